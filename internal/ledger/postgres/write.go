package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlledger"
)

// writeRows writes a batch's rows in one transaction, fenced by its
// node's lease when b.ID is set.
func (s *Store) writeRows(ctx context.Context, b *ledger.Batch, rows *sqlledger.Rows) error {
	stmts := statements(b, rows)
	if id := b.ID; !id.IsZero() {
		stmts = append(stmts, statement{"lease", renewSQL, []any{id.Node, id.Instance, int64(id.Seq)}, 1})
	}
	due, _ := s.compactor.Due(rows) // compacted after the batch is written, late rows with the rest
	compacted := false
	err := s.retry(ctx, func() error {
		compacted = false
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if !b.ID.IsZero() {
				written, err := fence(ctx, tx, b.ID)
				if err != nil || written {
					return err
				}
			}
			// One round trip: every statement is pipelined.
			var pb pgx.Batch
			for _, st := range stmts {
				pb.Queue(st.sql, st.args...)
			}
			res := tx.SendBatch(ctx, &pb)
			for _, st := range stmts {
				tag, err := res.Exec()
				if err != nil {
					res.Close()
					return fmt.Errorf("%s: %w", st.what, err)
				}
				if st.rows >= 0 && tag.RowsAffected() != int64(st.rows) {
					res.Close()
					return fmt.Errorf("%s: wrote %d rows, want %d", st.what, tag.RowsAffected(), st.rows)
				}
			}
			if err := res.Close(); err != nil {
				return err
			}
			if err := sqlledger.CompactDue(ctx, writeQuerier{querier{tx}}, due); err != nil {
				return err
			}
			compacted = true
			return nil
		})
	})
	if err == nil && compacted {
		s.compactor.Done(due)
	}
	return err
}

// insertAudit adds audit events, given as the arguments of
// sqlledger.InsertAudit, in one transaction of one round trip.
func (s *Store) insertAudit(ctx context.Context, args [][]any) error {
	var pb pgx.Batch
	for _, a := range args {
		pb.Queue(sqlledger.InsertAudit, a...)
	}
	return s.retry(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			return tx.SendBatch(ctx, &pb).Close()
		})
	})
}

// statement is one SQL statement of a batch. rows, when not negative, is
// how many rows it must write: fewer would mean a row whose node, GPU or
// owner did not resolve.
type statement struct {
	what string
	sql  string
	args []any
	rows int
}

// Dimension rows are inserted only where missing (NOT EXISTS), so that
// the identity sequences are not spent on every batch.
const (
	nodesSQL = `INSERT INTO nodes (name)
		SELECT r.name FROM unnest($1::text[]) AS r(name)
		WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.name = r.name)
		ORDER BY r.name
		ON CONFLICT (name) DO NOTHING`
	nodesSeenSQL = `UPDATE nodes AS t SET
			first_seen = LEAST(t.first_seen, r.first_seen),
			last_seen = GREATEST(t.last_seen, r.last_seen)
		FROM (SELECT name, min(first_seen) AS first_seen, max(last_seen) AS last_seen
			FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS u(name, first_seen, last_seen)
			GROUP BY name) AS r
		WHERE t.name = r.name`
	gpusSQL = `INSERT INTO gpus (node_id, uuid)
		SELECT n.id, r.uuid FROM unnest($1::text[], $2::text[]) AS r(node, uuid)
		JOIN nodes n ON n.name = r.node
		WHERE NOT EXISTS (SELECT 1 FROM gpus g WHERE g.node_id = n.id AND g.uuid = r.uuid)
		ORDER BY n.id, r.uuid
		ON CONFLICT (node_id, uuid) DO NOTHING`
	gpusDescribeSQL = `UPDATE gpus AS g SET idx = r.idx, model = r.model, memory_total = r.memory_total
		FROM unnest($1::text[], $2::text[], $3::integer[], $4::text[], $5::bigint[]) AS r(node, uuid, idx, model, memory_total)
		JOIN nodes n ON n.name = r.node
		WHERE g.node_id = n.id AND g.uuid = r.uuid
			AND (g.idx, g.model, g.memory_total) IS DISTINCT FROM (r.idx, r.model, r.memory_total)`
	ownersSQL = `INSERT INTO owners (node_id, kind, name)
		SELECT n.id, r.kind, r.name FROM unnest($1::text[], $2::text[], $3::text[]) AS r(node, kind, name)
		JOIN nodes n ON n.name = r.node
		WHERE NOT EXISTS (SELECT 1 FROM owners o WHERE o.node_id = n.id AND o.kind = r.kind AND o.name = r.name)
		ORDER BY n.id, r.kind, r.name
		ON CONFLICT (node_id, kind, name) DO NOTHING`
	containersSQL = `INSERT INTO containers AS t (owner_id, node_id, container_id, name, image, labels,
			user_name, team, project, gpu_request, started_at, finished_at, exit_code, first_seen, last_seen)
		SELECT o.id, n.id, r.id, r.name, r.image, r.labels::jsonb, r.user_name, r.team, r.project, r.gpu_request,
			r.started_at, r.finished_at, r.exit_code, r.first_seen, r.last_seen
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
			$9::text[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[])
			AS r(node, id, name, image, labels, user_name, team, project, gpu_request,
				started_at, finished_at, exit_code, first_seen, last_seen)
		JOIN nodes n ON n.name = r.node
		JOIN owners o ON o.node_id = n.id AND o.kind = 'container' AND o.name = r.id
		ORDER BY o.id
		ON CONFLICT (owner_id) DO UPDATE SET
			name = EXCLUDED.name, image = EXCLUDED.image, labels = EXCLUDED.labels,
			user_name = EXCLUDED.user_name, team = EXCLUDED.team, project = EXCLUDED.project,
			gpu_request = EXCLUDED.gpu_request,
			started_at = COALESCE(EXCLUDED.started_at, t.started_at),
			finished_at = EXCLUDED.finished_at, exit_code = EXCLUDED.exit_code,
			first_seen = LEAST(t.first_seen, EXCLUDED.first_seen),
			last_seen = GREATEST(t.last_seen, EXCLUDED.last_seen)`
	// held_us adds with a plain +, which keeps NULL: a row that a release
	// without held seconds began (NULL) has held time for only part of
	// what it sums, so it stays unknown; COALESCE(t.held_us, 0) would
	// make it claim to cover all of its used time. Reads leave such a
	// row's used time out of efficiency with it.
	usageSQL = `INSERT INTO %s AS t (start, gpu_id, owner_id, allocated_us, held_us, present_us, used_us,
			memory_byte_s, energy_mj, peak_memory_bytes, peak_util_cpct)
		SELECT r.start, g.id, o.id, r.a, r.h, r.p, r.u, r.m, r.e, r.pm, r.pu
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[],
			$6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[])
			AS r(start, node, gpu, kind, owner, a, p, u, m, e, pm, pu, h)
		JOIN nodes n ON n.name = r.node
		JOIN gpus g ON g.node_id = n.id AND g.uuid = r.gpu
		JOIN owners o ON o.node_id = n.id AND o.kind = r.kind AND o.name = r.owner
		ORDER BY r.start, g.id, o.id
		ON CONFLICT (start, gpu_id, owner_id) DO UPDATE SET
			allocated_us = t.allocated_us + EXCLUDED.allocated_us,
			held_us = t.held_us + EXCLUDED.held_us,
			present_us = t.present_us + EXCLUDED.present_us,
			used_us = t.used_us + EXCLUDED.used_us,
			memory_byte_s = t.memory_byte_s + EXCLUDED.memory_byte_s,
			energy_mj = t.energy_mj + EXCLUDED.energy_mj,
			peak_memory_bytes = GREATEST(t.peak_memory_bytes, EXCLUDED.peak_memory_bytes),
			peak_util_cpct = GREATEST(t.peak_util_cpct, EXCLUDED.peak_util_cpct)`
	gpuUsageSQL = `INSERT INTO %s AS t (start, gpu_id, seconds_us, allocated_us, idle_us, used_us,
			unattributed_us, energy_mj, idle_energy_mj, peak_util_cpct,
			samples, util_sum_cpct, util_max_cpct, mem_sum_bytes, mem_max_bytes,
			power_sum_mw, power_max_mw, temp_sum_ccel, temp_max_ccel)
		SELECT r.start, g.id, r.s, r.a, r.i, r.u, r.x, r.e, r.ie, r.pu,
			r.n, r.us, r.um, r.ms, r.mm, r.ps, r.pm, r.ts, r.tm
		FROM unnest($1::bigint[], $2::text[], $3::text[],
			$4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[],
			$12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[], $18::bigint[], $19::bigint[], $20::bigint[])
			AS r(start, node, gpu, s, a, i, u, x, e, ie, pu, n, us, um, ms, mm, ps, pm, ts, tm)
		JOIN nodes n ON n.name = r.node
		JOIN gpus g ON g.node_id = n.id AND g.uuid = r.gpu
		ORDER BY r.start, g.id
		ON CONFLICT (start, gpu_id) DO UPDATE SET
			seconds_us = t.seconds_us + EXCLUDED.seconds_us,
			allocated_us = t.allocated_us + EXCLUDED.allocated_us,
			idle_us = t.idle_us + EXCLUDED.idle_us,
			used_us = t.used_us + EXCLUDED.used_us,
			unattributed_us = t.unattributed_us + EXCLUDED.unattributed_us,
			energy_mj = t.energy_mj + EXCLUDED.energy_mj,
			idle_energy_mj = t.idle_energy_mj + EXCLUDED.idle_energy_mj,
			peak_util_cpct = GREATEST(t.peak_util_cpct, EXCLUDED.peak_util_cpct),
			samples = t.samples + EXCLUDED.samples,
			util_sum_cpct = t.util_sum_cpct + EXCLUDED.util_sum_cpct,
			util_max_cpct = GREATEST(t.util_max_cpct, EXCLUDED.util_max_cpct),
			mem_sum_bytes = t.mem_sum_bytes + EXCLUDED.mem_sum_bytes,
			mem_max_bytes = GREATEST(t.mem_max_bytes, EXCLUDED.mem_max_bytes),
			power_sum_mw = t.power_sum_mw + EXCLUDED.power_sum_mw,
			power_max_mw = GREATEST(t.power_max_mw, EXCLUDED.power_max_mw),
			temp_sum_ccel = t.temp_sum_ccel + EXCLUDED.temp_sum_ccel,
			temp_max_ccel = GREATEST(t.temp_max_ccel, EXCLUDED.temp_max_ccel)`
	containerUsageSQL = `INSERT INTO %s AS t (start, owner_id, cpu_us, ram_byte_s)
		SELECT r.start, o.id, r.c, r.r
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::bigint[]) AS r(start, node, id, c, r)
		JOIN nodes n ON n.name = r.node
		JOIN owners o ON o.node_id = n.id AND o.kind = 'container' AND o.name = r.id
		ORDER BY r.start, o.id
		ON CONFLICT (start, owner_id) DO UPDATE SET
			cpu_us = t.cpu_us + EXCLUDED.cpu_us,
			ram_byte_s = t.ram_byte_s + EXCLUDED.ram_byte_s`
)

// statements turns a batch into its statements, tables in one fixed
// order and rows in key order, so that concurrent batches lock rows in
// the same order.
func statements(b *ledger.Batch, r *sqlledger.Rows) []statement {
	var out []statement
	add := func(what, sql string, rows int, args ...any) {
		out = append(out, statement{what: what, sql: sql, args: args, rows: rows})
	}

	add("nodes", nodesSQL, -1, r.Nodes)
	if len(b.Nodes) > 0 {
		var names []string
		var first, last []*int64
		for _, n := range b.Nodes {
			names = append(names, n.Name)
			first = append(first, sqlledger.Unix(n.FirstSeen))
			last = append(last, sqlledger.Unix(n.LastSeen))
		}
		add("nodes", nodesSeenSQL, -1, names, first, last)
	}

	if len(r.GPUs) > 0 {
		var nodes, uuids []string
		for _, g := range r.GPUs {
			nodes, uuids = append(nodes, g.Node), append(uuids, g.UUID)
		}
		add("gpus", gpusSQL, -1, nodes, uuids)
	}
	if len(b.GPUs) > 0 {
		// The last description of a GPU in the batch wins.
		last := map[sqlledger.GPURef]ledger.GPU{}
		for _, g := range b.GPUs {
			last[sqlledger.GPURef{Node: g.Node, UUID: g.UUID}] = g
		}
		var nodes, uuids, models []string
		var idx []int32
		var mem []int64
		for _, ref := range r.GPUs {
			g, ok := last[ref]
			if !ok {
				continue
			}
			nodes, uuids, models = append(nodes, g.Node), append(uuids, g.UUID), append(models, g.Model)
			idx, mem = append(idx, int32(g.Index)), append(mem, int64(g.MemoryTotal))
		}
		add("gpus", gpusDescribeSQL, -1, nodes, uuids, idx, models, mem)
	}

	if len(r.Owners) > 0 {
		var nodes, kinds, names []string
		for _, o := range r.Owners {
			nodes, kinds, names = append(nodes, o.Node), append(kinds, o.Kind), append(names, o.Name)
		}
		add("owners", ownersSQL, -1, nodes, kinds, names)
	}

	if len(b.Containers) > 0 {
		// The last record of a container in the batch wins.
		type key struct{ node, id string }
		last := map[key]int{}
		var order []key
		for i, c := range b.Containers {
			k := key{c.Node, c.ID}
			if _, ok := last[k]; !ok {
				order = append(order, k)
			}
			last[k] = i
		}
		var nodes, ids, names, images, labels, users, teams, projects, requests []string
		var started, finished, exit, first, seen []*int64
		for _, k := range order {
			c := &b.Containers[last[k]]
			nodes, ids, names, images = append(nodes, c.Node), append(ids, c.ID), append(names, c.Name), append(images, c.Image)
			labels, users, teams = append(labels, sqlledger.EncodeLabels(c.Labels)), append(users, c.User), append(teams, c.Team)
			projects, requests = append(projects, c.Project), append(requests, c.GPURequest)
			started, finished = append(started, sqlledger.Unix(c.StartedAt)), append(finished, sqlledger.Unix(c.FinishedAt))
			var e *int64
			if c.ExitCode != nil {
				v := int64(*c.ExitCode)
				e = &v
			}
			exit, first, seen = append(exit, e), append(first, sqlledger.Unix(c.FirstSeen)), append(seen, sqlledger.Unix(c.LastSeen))
		}
		add("containers", containersSQL, len(order), nodes, ids, names, images, labels, users, teams, projects, requests,
			started, finished, exit, first, seen)
	}

	for _, t := range []struct {
		table string
		rows  []sqlledger.Row[sqlledger.UsageKey, sqlledger.UsageValues]
	}{{"usage_minute", r.UsageMinute}, {"usage_hour", r.UsageHour}, {"usage_day", r.UsageDay}} {
		if len(t.rows) == 0 {
			continue
		}
		n := len(t.rows)
		start := make([]int64, n)
		nodes, gpus, kinds, owners := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		a, p, u, m, e, pm, pu, h := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		for i, row := range t.rows {
			k, v := row.Key, row.Val
			start[i], nodes[i], gpus[i], kinds[i], owners[i] = k.Start, k.Node, k.GPU, k.Kind, k.Owner
			a[i], p[i], u[i], m[i], e[i], pm[i], pu[i], h[i] = v.AllocatedUS, v.PresentUS, v.UsedUS, v.MemoryByteS, v.EnergyMJ, v.PeakMemory, v.PeakUtil, v.HeldUS
		}
		add(t.table, fmt.Sprintf(usageSQL, t.table), n, start, nodes, gpus, kinds, owners, a, p, u, m, e, pm, pu, h)
	}
	for _, t := range []struct {
		table string
		rows  []sqlledger.Row[sqlledger.GPUKey, sqlledger.GPUValues]
	}{{"gpu_minute", r.GPUMinute}, {"gpu_hour", r.GPUHour}, {"gpu_day", r.GPUDay}} {
		if len(t.rows) == 0 {
			continue
		}
		n := len(t.rows)
		start := make([]int64, n)
		nodes, gpus := make([]string, n), make([]string, n)
		sec, a, idle, u, x, e, ie, pu := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		var gauge [9][]int64 // samples, then sum and max of util, memory, power, temperature
		for j := range gauge {
			gauge[j] = make([]int64, n)
		}
		for i, row := range t.rows {
			k, v := row.Key, row.Val
			start[i], nodes[i], gpus[i] = k.Start, k.Node, k.GPU
			sec[i], a[i], idle[i], u[i], x[i], e[i], ie[i], pu[i] = v.SecondsUS, v.AllocatedUS, v.IdleUS, v.UsedUS, v.UnattributedUS, v.EnergyMJ, v.IdleEnergyMJ, v.PeakUtil
			gv := v.Gauges
			for j, f := range [9]int64{gv.Samples, gv.UtilSum, gv.UtilMax, gv.MemSum, gv.MemMax, gv.PowerSum, gv.PowerMax, gv.TempSum, gv.TempMax} {
				gauge[j][i] = f
			}
		}
		add(t.table, fmt.Sprintf(gpuUsageSQL, t.table), n, start, nodes, gpus, sec, a, idle, u, x, e, ie, pu,
			gauge[0], gauge[1], gauge[2], gauge[3], gauge[4], gauge[5], gauge[6], gauge[7], gauge[8])
	}
	for _, t := range []struct {
		table string
		rows  []sqlledger.Row[sqlledger.ContainerKey, sqlledger.ContainerValues]
	}{{"container_minute", r.ContainerMinute}, {"container_hour", r.ContainerHour}, {"container_day", r.ContainerDay}} {
		if len(t.rows) == 0 {
			continue
		}
		n := len(t.rows)
		start, cpu, ram := make([]int64, n), make([]int64, n), make([]int64, n)
		nodes, ids := make([]string, n), make([]string, n)
		for i, row := range t.rows {
			start[i], nodes[i], ids[i], cpu[i], ram[i] = row.Key.Start, row.Key.Node, row.Key.ID, row.Val.CPUUS, row.Val.RAMByteS
		}
		add(t.table, fmt.Sprintf(containerUsageSQL, t.table), n, start, nodes, ids, cpu, ram)
	}
	return out
}

// jobTx runs fn in a write transaction, for the job store, commits it
// when fn returns nil, and runs it again after a deadlock or a
// serialization failure.
func (s *Store) jobTx(ctx context.Context, fn func(sqlledger.Tx) error) error {
	return s.retry(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			return fn(writeQuerier{querier{tx}})
		})
	})
}

// lockGPUs takes a transaction's advisory lock on each of node's GPUs,
// in the order given (sorted, so that writers lock alike), released at
// its end: a pooled connection keeps no lock past the transaction.
func lockGPUs(ctx context.Context, tx sqlledger.Tx, node string, gpus []string) error {
	for _, g := range gpus {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", gpuLock, node+"/"+g); err != nil {
			return err
		}
	}
	return nil
}

// writeQuerier is a write transaction as sqlledger's job store uses it.
type writeQuerier struct{ querier }

func (q writeQuerier) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := q.tx.Exec(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
