package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlledger"
)

// writeRows writes a batch's rows in one transaction, fenced by its
// node's lease when b.ID is set.
func (s *Store) writeRows(ctx context.Context, b *ledger.Batch, rows *sqlledger.Rows) error {
	st, err := s.statements(ctx)
	if err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		if !b.ID.IsZero() {
			written, err := fence(ctx, tx, b.ID)
			if err != nil || written {
				return err
			}
			if err := renew(ctx, tx, b.ID); err != nil {
				return fmt.Errorf("lease: %w", err)
			}
		}
		// Closed hours are compacted before the batch is written, so that
		// on a one-node ledger they are the minute tables' only rows and
		// go at once; rows the batch writes into closed hours (a late or
		// a many-hour batch) are compacted after.
		due, late := s.compactor.Due(rows)
		tq := writeQuerier{querier{tx}}
		if err := s.compact(ctx, tq, due); err != nil {
			return err
		}
		// Whether the batch goes into empty minute tables: then its rows
		// are all they hold, and the next compaction need not read them.
		emptied := false
		if len(due) > 0 && len(late) == 0 && s.wlock != nil {
			var err error
			if emptied, err = sqlledger.MinutesEmpty(ctx, tq); err != nil {
				return err
			}
		}
		w := &writer{tx: tx, st: st, known: &s.ids, added: newIDs()}
		if err := w.write(ctx, b, rows); err != nil {
			return err
		}
		if err := sqlledger.CompactDue(ctx, tq, late); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		// Ids become known only once the rows that hold them are committed.
		s.ids.merge(w.added)
		s.compactor.Done(due)
		s.sole = nil
		if emptied {
			s.sole = rows
		}
		return nil
	})
}

// compact runs the compactions of due: from s.sole, the last batch's rows,
// where they are all the minute tables hold (a simulation's hour after
// hour, or the first batch of each of an agent's hours when it is the
// hour's only one), else by reading the minute rows back.
func (s *Store) compact(ctx context.Context, tq writeQuerier, due map[string]int64) error {
	if len(due) == 1 && s.sole != nil && s.wlock != nil {
		for node, before := range due {
			ok, err := sqlledger.CompactRows(ctx, tq, node, before, s.sole,
				func(g sqlledger.GPURef) (int64, bool) { id, ok := s.ids.gpus[g]; return id, ok },
				func(o sqlledger.OwnerRef) (int64, bool) { id, ok := s.ids.owners[o]; return id, ok })
			if err != nil || ok {
				return err
			}
		}
	}
	return sqlledger.CompactDue(ctx, tq, due)
}

// statements returns the batch writer's statements, prepared on first
// use.
func (s *Store) statements(ctx context.Context) (*stmts, error) {
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.stmts == nil {
		st, err := prepare(ctx, s.wdb)
		if err != nil {
			return nil, err
		}
		s.stmts = st
	}
	return s.stmts, nil
}

// insertAudit adds audit events, given as the arguments of
// sqlledger.InsertAudit, in one transaction.
func (s *Store) insertAudit(ctx context.Context, args [][]any) error {
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		for _, a := range args {
			if _, err := tx.ExecContext(ctx, sqlledger.InsertAudit, a...); err != nil {
				return err
			}
		}
		return tx.Commit()
	})
}

// ids maps names to the ids of nodes, GPUs and owners; the rows are never
// deleted, so a committed id stays right.
type ids struct {
	nodes  map[string]int64
	gpus   map[sqlledger.GPURef]int64
	owners map[sqlledger.OwnerRef]int64
}

func newIDs() ids {
	return ids{nodes: map[string]int64{}, gpus: map[sqlledger.GPURef]int64{}, owners: map[sqlledger.OwnerRef]int64{}}
}

func (i *ids) merge(o ids) {
	maps.Copy(i.nodes, o.nodes)
	maps.Copy(i.gpus, o.gpus)
	maps.Copy(i.owners, o.owners)
}

// Statements, prepared once on the write connection.
const (
	nodeGetSQL    = `SELECT id FROM nodes WHERE name = $1`
	nodeInsertSQL = `INSERT INTO nodes (name) VALUES ($1) RETURNING id`
	// SQLite's two-argument min and max are NULL if either side is.
	nodeSeenSQL = `UPDATE nodes SET
		first_seen = coalesce(min(first_seen, $2), first_seen, $2),
		last_seen = coalesce(max(last_seen, $3), last_seen, $3)
		WHERE id = $1`
	gpuGetSQL      = `SELECT id FROM gpus WHERE node_id = $1 AND uuid = $2`
	gpuInsertSQL   = `INSERT INTO gpus (node_id, uuid) VALUES ($1, $2) RETURNING id`
	gpuDescribeSQL = `UPDATE gpus SET idx = $2, model = $3, memory_total = $4 WHERE id = $1`
	ownerGetSQL    = `SELECT id FROM owners WHERE node_id = $1 AND kind = $2 AND name = $3`
	ownerInsertSQL = `INSERT INTO owners (node_id, kind, name) VALUES ($1, $2, $3) RETURNING id`
	containerSQL   = `INSERT INTO containers (owner_id, node_id, container_id, name, image, labels,
		user_name, team, project, gpu_request, started_at, finished_at, exit_code, first_seen, last_seen)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
		ON CONFLICT (owner_id) DO UPDATE SET
			name = excluded.name, image = excluded.image, labels = excluded.labels,
			user_name = excluded.user_name, team = excluded.team, project = excluded.project,
			gpu_request = excluded.gpu_request,
			started_at = coalesce(excluded.started_at, started_at),
			finished_at = excluded.finished_at, exit_code = excluded.exit_code,
			first_seen = coalesce(min(first_seen, excluded.first_seen), first_seen, excluded.first_seen),
			last_seen = coalesce(max(last_seen, excluded.last_seen), last_seen, excluded.last_seen)`
	// held_us adds with a plain +, which keeps NULL: a row that a release
	// without held seconds began (NULL) has held time for only part of
	// what it sums, so it stays unknown; COALESCE(held_us, 0) would make
	// it claim to cover all of its used time. Reads leave such a row's
	// used time out of efficiency with it.
	// The usage statements name their table as %[1]s and their VALUES
	// list as %[2]s, which multiRow fills for one row or for bulkRows.
	usageSQL = `INSERT INTO %[1]s (start, gpu_id, owner_id, allocated_us, held_us, present_us, used_us,
		memory_byte_s, energy_mj, peak_memory_bytes, peak_util_cpct)
		VALUES %[2]s
		ON CONFLICT (start, gpu_id, owner_id) DO UPDATE SET
			allocated_us = allocated_us + excluded.allocated_us,
			held_us = held_us + excluded.held_us,
			present_us = present_us + excluded.present_us,
			used_us = used_us + excluded.used_us,
			memory_byte_s = memory_byte_s + excluded.memory_byte_s,
			energy_mj = energy_mj + excluded.energy_mj,
			peak_memory_bytes = max(peak_memory_bytes, excluded.peak_memory_bytes),
			peak_util_cpct = max(peak_util_cpct, excluded.peak_util_cpct)`
	gpuUsageSQL = `INSERT INTO %[1]s (start, gpu_id, seconds_us, allocated_us, idle_us, used_us,
		unattributed_us, energy_mj, idle_energy_mj, peak_util_cpct,
		samples, util_sum_cpct, util_max_cpct, mem_sum_bytes, mem_max_bytes,
		power_sum_mw, power_max_mw, temp_sum_ccel, temp_max_ccel)
		VALUES %[2]s
		ON CONFLICT (start, gpu_id) DO UPDATE SET
			seconds_us = seconds_us + excluded.seconds_us,
			allocated_us = allocated_us + excluded.allocated_us,
			idle_us = idle_us + excluded.idle_us,
			used_us = used_us + excluded.used_us,
			unattributed_us = unattributed_us + excluded.unattributed_us,
			energy_mj = energy_mj + excluded.energy_mj,
			idle_energy_mj = idle_energy_mj + excluded.idle_energy_mj,
			peak_util_cpct = max(peak_util_cpct, excluded.peak_util_cpct),
			samples = samples + excluded.samples,
			util_sum_cpct = util_sum_cpct + excluded.util_sum_cpct,
			util_max_cpct = max(util_max_cpct, excluded.util_max_cpct),
			mem_sum_bytes = mem_sum_bytes + excluded.mem_sum_bytes,
			mem_max_bytes = max(mem_max_bytes, excluded.mem_max_bytes),
			power_sum_mw = power_sum_mw + excluded.power_sum_mw,
			power_max_mw = max(power_max_mw, excluded.power_max_mw),
			temp_sum_ccel = temp_sum_ccel + excluded.temp_sum_ccel,
			temp_max_ccel = max(temp_max_ccel, excluded.temp_max_ccel)`
	containerUsageSQL = `INSERT INTO %[1]s (start, owner_id, cpu_us, ram_byte_s) VALUES %[2]s
		ON CONFLICT (start, owner_id) DO UPDATE SET
			cpu_us = cpu_us + excluded.cpu_us,
			ram_byte_s = ram_byte_s + excluded.ram_byte_s`
)

type stmts struct {
	nodeGet, nodeInsert, nodeSeen    *sql.Stmt
	gpuGet, gpuInsert, gpuDescribe   *sql.Stmt
	ownerGet, ownerInsert, container *sql.Stmt
	usage, gpu, ctr                  [3]*sql.Stmt // minute, hour, day
	// The same for bulkRows rows a statement.
	usageBulk, gpuBulk, ctrBulk [3]*sql.Stmt
}

// Columns of the usage statements.
const (
	usageCols    = 11
	gpuUsageCols = 19
	ctrUsageCols = 4
)

func prepare(ctx context.Context, db *sql.DB) (*stmts, error) {
	st := &stmts{}
	var errs []error
	p := func(dst **sql.Stmt, query string) {
		s, err := db.PrepareContext(ctx, query)
		errs = append(errs, err)
		*dst = s
	}
	p(&st.nodeGet, nodeGetSQL)
	p(&st.nodeInsert, nodeInsertSQL)
	p(&st.nodeSeen, nodeSeenSQL)
	p(&st.gpuGet, gpuGetSQL)
	p(&st.gpuInsert, gpuInsertSQL)
	p(&st.gpuDescribe, gpuDescribeSQL)
	p(&st.ownerGet, ownerGetSQL)
	p(&st.ownerInsert, ownerInsertSQL)
	p(&st.container, containerSQL)
	for i, grain := range []string{"minute", "hour", "day"} {
		p(&st.usage[i], multiRow(usageSQL, "usage_"+grain, usageCols, 1))
		p(&st.gpu[i], multiRow(gpuUsageSQL, "gpu_"+grain, gpuUsageCols, 1))
		p(&st.ctr[i], multiRow(containerUsageSQL, "container_"+grain, ctrUsageCols, 1))
		p(&st.usageBulk[i], multiRow(usageSQL, "usage_"+grain, usageCols, bulkRows))
		p(&st.gpuBulk[i], multiRow(gpuUsageSQL, "gpu_"+grain, gpuUsageCols, bulkRows))
		p(&st.ctrBulk[i], multiRow(containerUsageSQL, "container_"+grain, ctrUsageCols, bulkRows))
	}
	if err := errors.Join(errs...); err != nil {
		st.close()
		return nil, fmt.Errorf("prepare: %w", err)
	}
	return st, nil
}

func (st *stmts) all() []*sql.Stmt {
	return []*sql.Stmt{st.nodeGet, st.nodeInsert, st.nodeSeen, st.gpuGet, st.gpuInsert, st.gpuDescribe,
		st.ownerGet, st.ownerInsert, st.container,
		st.usage[0], st.usage[1], st.usage[2], st.gpu[0], st.gpu[1], st.gpu[2], st.ctr[0], st.ctr[1], st.ctr[2],
		st.usageBulk[0], st.usageBulk[1], st.usageBulk[2], st.gpuBulk[0], st.gpuBulk[1], st.gpuBulk[2],
		st.ctrBulk[0], st.ctrBulk[1], st.ctrBulk[2]}
}

func (st *stmts) close() {
	for _, s := range st.all() {
		if s != nil {
			s.Close()
		}
	}
}

// writer writes one batch in one transaction.
type writer struct {
	tx    *sql.Tx
	st    *stmts
	known *ids // committed
	added ids  // created or first looked up in this transaction
}

func (w *writer) stmt(ctx context.Context, s *sql.Stmt) *sql.Stmt { return w.tx.StmtContext(ctx, s) }

func (w *writer) write(ctx context.Context, b *ledger.Batch, r *sqlledger.Rows) error {
	for _, n := range r.Nodes {
		if _, err := w.node(ctx, n); err != nil {
			return fmt.Errorf("node %q: %w", n, err)
		}
	}
	if len(b.Nodes) > 0 {
		st := w.stmt(ctx, w.st.nodeSeen)
		for _, n := range b.Nodes {
			id, _ := w.node(ctx, n.Name)
			if _, err := st.ExecContext(ctx, id, sqlledger.Unix(n.FirstSeen), sqlledger.Unix(n.LastSeen)); err != nil {
				return fmt.Errorf("node %q: %w", n.Name, err)
			}
		}
	}
	for _, g := range r.GPUs {
		if _, err := w.gpu(ctx, g); err != nil {
			return fmt.Errorf("node %q GPU %q: %w", g.Node, g.UUID, err)
		}
	}
	if len(b.GPUs) > 0 {
		st := w.stmt(ctx, w.st.gpuDescribe)
		for _, g := range b.GPUs {
			id, _ := w.gpu(ctx, sqlledger.GPURef{Node: g.Node, UUID: g.UUID})
			if _, err := st.ExecContext(ctx, id, g.Index, g.Model, int64(g.MemoryTotal)); err != nil {
				return fmt.Errorf("node %q GPU %q: %w", g.Node, g.UUID, err)
			}
		}
	}
	for _, o := range r.Owners {
		if _, err := w.owner(ctx, o); err != nil {
			return fmt.Errorf("node %q %s %q: %w", o.Node, o.Kind, o.Name, err)
		}
	}
	if len(b.Containers) > 0 {
		st := w.stmt(ctx, w.st.container)
		for _, c := range b.Containers {
			oid, _ := w.owner(ctx, sqlledger.OwnerRef{Node: c.Node, Kind: ledger.KindContainer, Name: c.ID})
			nid, _ := w.node(ctx, c.Node)
			var exit *int64
			if c.ExitCode != nil {
				e := int64(*c.ExitCode)
				exit = &e
			}
			if _, err := st.ExecContext(ctx, oid, nid, c.ID, c.Name, c.Image, sqlledger.EncodeLabels(c.Labels),
				c.User, c.Team, c.Project, c.GPURequest,
				sqlledger.Unix(c.StartedAt), sqlledger.Unix(c.FinishedAt), exit,
				sqlledger.Unix(c.FirstSeen), sqlledger.Unix(c.LastSeen)); err != nil {
				return fmt.Errorf("node %q container %q: %w", c.Node, c.ID, err)
			}
		}
	}
	for i, rows := range [][]sqlledger.Row[sqlledger.UsageKey, sqlledger.UsageValues]{r.UsageMinute, r.UsageHour, r.UsageDay} {
		err := execRows(ctx, w, w.st.usage[i], w.st.usageBulk[i], rows, func(a []any, u *sqlledger.Row[sqlledger.UsageKey, sqlledger.UsageValues]) []any {
			gid, _ := w.gpu(ctx, sqlledger.GPURef{Node: u.Key.Node, UUID: u.Key.GPU})
			oid, _ := w.owner(ctx, sqlledger.OwnerRef{Node: u.Key.Node, Kind: u.Key.Kind, Name: u.Key.Owner})
			v := &u.Val
			return append(a, u.Key.Start, gid, oid, v.AllocatedUS, v.HeldUS, v.PresentUS, v.UsedUS,
				v.MemoryByteS, v.EnergyMJ, v.PeakMemory, v.PeakUtil)
		})
		if err != nil {
			return fmt.Errorf("usage: %w", err)
		}
	}
	for i, rows := range [][]sqlledger.Row[sqlledger.GPUKey, sqlledger.GPUValues]{r.GPUMinute, r.GPUHour, r.GPUDay} {
		err := execRows(ctx, w, w.st.gpu[i], w.st.gpuBulk[i], rows, func(a []any, g *sqlledger.Row[sqlledger.GPUKey, sqlledger.GPUValues]) []any {
			gid, _ := w.gpu(ctx, sqlledger.GPURef{Node: g.Key.Node, UUID: g.Key.GPU})
			v := &g.Val
			return append(a, g.Key.Start, gid, v.SecondsUS, v.AllocatedUS, v.IdleUS, v.UsedUS,
				v.UnattributedUS, v.EnergyMJ, v.IdleEnergyMJ, v.PeakUtil,
				v.Gauges.Samples, v.Gauges.UtilSum, v.Gauges.UtilMax, v.Gauges.MemSum, v.Gauges.MemMax,
				v.Gauges.PowerSum, v.Gauges.PowerMax, v.Gauges.TempSum, v.Gauges.TempMax)
		})
		if err != nil {
			return fmt.Errorf("gpu usage: %w", err)
		}
	}
	for i, rows := range [][]sqlledger.Row[sqlledger.ContainerKey, sqlledger.ContainerValues]{r.ContainerMinute, r.ContainerHour, r.ContainerDay} {
		err := execRows(ctx, w, w.st.ctr[i], w.st.ctrBulk[i], rows, func(a []any, c *sqlledger.Row[sqlledger.ContainerKey, sqlledger.ContainerValues]) []any {
			oid, _ := w.owner(ctx, sqlledger.OwnerRef{Node: c.Key.Node, Kind: ledger.KindContainer, Name: c.Key.ID})
			return append(a, c.Key.Start, oid, c.Val.CPUUS, c.Val.RAMByteS)
		})
		if err != nil {
			return fmt.Errorf("container usage: %w", err)
		}
	}
	return nil
}

// node, gpu and owner return the id of a row, creating it if missing.
// write resolves every name of the batch first, so later calls only hit
// the maps and cannot fail.
func (w *writer) node(ctx context.Context, name string) (int64, error) {
	if id, ok := w.known.nodes[name]; ok {
		return id, nil
	}
	if id, ok := w.added.nodes[name]; ok {
		return id, nil
	}
	id, err := w.getOrInsert(ctx, w.st.nodeGet, w.st.nodeInsert, name)
	if err != nil {
		return 0, err
	}
	w.added.nodes[name] = id
	return id, nil
}

func (w *writer) gpu(ctx context.Context, g sqlledger.GPURef) (int64, error) {
	if id, ok := w.known.gpus[g]; ok {
		return id, nil
	}
	if id, ok := w.added.gpus[g]; ok {
		return id, nil
	}
	nid, err := w.node(ctx, g.Node)
	if err != nil {
		return 0, err
	}
	id, err := w.getOrInsert(ctx, w.st.gpuGet, w.st.gpuInsert, nid, g.UUID)
	if err != nil {
		return 0, err
	}
	w.added.gpus[g] = id
	return id, nil
}

func (w *writer) owner(ctx context.Context, o sqlledger.OwnerRef) (int64, error) {
	if id, ok := w.known.owners[o]; ok {
		return id, nil
	}
	if id, ok := w.added.owners[o]; ok {
		return id, nil
	}
	nid, err := w.node(ctx, o.Node)
	if err != nil {
		return 0, err
	}
	id, err := w.getOrInsert(ctx, w.st.ownerGet, w.st.ownerInsert, nid, o.Kind, o.Name)
	if err != nil {
		return 0, err
	}
	w.added.owners[o] = id
	return id, nil
}

func (w *writer) getOrInsert(ctx context.Context, get, insert *sql.Stmt, args ...any) (int64, error) {
	var id int64
	err := w.stmt(ctx, get).QueryRowContext(ctx, args...).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		err = w.stmt(ctx, insert).QueryRowContext(ctx, args...).Scan(&id)
	}
	return id, err
}

// jobTx runs fn in a write transaction, for the job store, and commits it
// when fn returns nil.
func (s *Store) jobTx(ctx context.Context, fn func(sqlledger.Tx) error) error {
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		s.sole = nil // CompactMinutes comes this way
		if err := fn(writeQuerier{querier{tx}}); err != nil {
			return err
		}
		return tx.Commit()
	})
}

// writeQuerier is a write transaction as sqlledger's job store uses it.
type writeQuerier struct{ querier }

func (q writeQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
