package sqlledger

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Cursor is a result set as both database/sql and pgx give it (the backends
// adapt Close).
type Cursor interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Querier runs queries inside one read transaction, so that the queries of
// one report see one snapshot. Queries number their parameters $1, $2...,
// which both SQLite and PostgreSQL accept.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (Cursor, error)
}

// Totals reads Usage and GPUs through one querier, so that a backend that
// runs it in one snapshot gets rows and totals that agree.
func Totals(ctx context.Context, q Querier, f ledger.Filter) ([]ledger.UsageTotal, []ledger.GPUTotal, error) {
	usage, err := Usage(ctx, q, f)
	if err != nil {
		return nil, nil, err
	}
	gpus, err := GPUs(ctx, q, f)
	if err != nil {
		return nil, nil, err
	}
	return usage, gpus, nil
}

// Horizon reads the minute horizon recorded by Retain.
func Horizon(ctx context.Context, q Querier) (int64, error) {
	rows, err := q.Query(ctx, "SELECT value FROM "+MetaTable+" WHERE key = $1", MetaHorizon)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	h := int64(NoHorizon)
	if rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return 0, err
		}
		if h, err = strconv.ParseInt(v, 10, 64); err != nil {
			return 0, fmt.Errorf("%s.%s: %w", MetaTable, MetaHorizon, err)
		}
	}
	return h, rows.Err()
}

// query builds SQL text with numbered parameters.
type query struct{ args []any }

func (q *query) arg(v any) string {
	q.args = append(q.args, v)
	return "$" + strconv.Itoa(len(q.args))
}

// union selects cols from table_hour over p.Hours and from table_minute
// over p.Minutes, each part filtered by where ("" for none).
func (q *query) union(table, cols, where string, p Plan) string {
	var parts []string
	add := func(t string, r Range) {
		s := fmt.Sprintf("SELECT %s FROM %s WHERE start >= %s AND start < %s", cols, t, q.arg(r.From), q.arg(r.To))
		if where != "" {
			s += " AND " + where
		}
		parts = append(parts, s)
	}
	if !p.Hours.Empty() {
		add(table+"_hour", p.Hours)
	}
	for _, r := range p.Minutes {
		add(table+"_minute", r)
	}
	return strings.Join(parts, "\n\tUNION ALL\n\t")
}

// containerSQL reads the containers among owners; scanContainer reads a
// row.
const containerSQL = `SELECT c.owner_id, n.name, c.container_id, c.name, c.image, c.labels, c.user_name, c.team, c.project,
	c.gpu_request, c.started_at, c.finished_at, c.exit_code, c.first_seen, c.last_seen
FROM containers c JOIN nodes n ON n.id = c.node_id
WHERE c.owner_id IN (%s)`

func scanContainer(rows Cursor) (int64, *ledger.Container, error) {
	var (
		ownerID                        int64
		c                              ledger.Container
		labels                         string
		started, finished, first, last *int64
		exit                           *int64
	)
	if err := rows.Scan(&ownerID, &c.Node, &c.ID, &c.Name, &c.Image, &labels, &c.User, &c.Team, &c.Project,
		&c.GPURequest, &started, &finished, &exit, &first, &last); err != nil {
		return 0, nil, err
	}
	c.StartedAt, c.FinishedAt, c.FirstSeen, c.LastSeen = Time(started), Time(finished), Time(first), Time(last)
	if exit != nil {
		code := int(*exit)
		c.ExitCode = &code
	}
	var err error
	if c.Labels, err = DecodeLabels(labels); err != nil {
		return 0, nil, fmt.Errorf("container %s labels: %w", c.ID, err)
	}
	return ownerID, &c, nil
}

// EncodeLabels is how the stores keep labels: a JSON object.
func EncodeLabels(l map[string]string) string {
	if len(l) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(l) // strings only: cannot fail
	return string(b)
}

// DecodeLabels is the inverse of EncodeLabels; no labels read as nil.
func DecodeLabels(s string) (map[string]string, error) {
	if s == "" || s == "{}" {
		return nil, nil
	}
	var l map[string]string
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return nil, err
	}
	if len(l) == 0 {
		return nil, nil
	}
	return l, nil
}

// byteSecondsUnit splits a byte-seconds column for summing: a container
// that holds 1 TiB of RAM for four months adds up to more byte-seconds
// than an int64 holds, which SQLite's SUM refuses and PostgreSQL cannot
// cast back to bigint. SUM(x / unit) and SUM(x % unit) stay far from that
// and exact in both; bigSum joins them.
const byteSecondsUnit = 1 << 20

// splitSum is the SQL that sums col over a group as col_hi and col_lo.
func splitSum(col string) string {
	return fmt.Sprintf("CAST(SUM(%[1]s / %[2]d) AS BIGINT) AS %[1]s_hi, CAST(SUM(%[1]s %% %[2]d) AS BIGINT) AS %[1]s_lo", col, byteSecondsUnit)
}

// heldSums sums held_us over a group as held_us (0 when no row has it),
// with unheld_rows and held_rows, the rows without and with it, and
// unheld_used_us, the used_us of the rows without it. held_us is NULL in
// rows written before it existed, which SUM and COUNT(held_us) skip.
const heldSums = `CAST(COALESCE(SUM(held_us), 0) AS BIGINT) AS held_us,
		CAST(COUNT(*) - COUNT(held_us) AS BIGINT) AS unheld_rows, CAST(COUNT(held_us) AS BIGINT) AS held_rows,
		CAST(COALESCE(SUM(CASE WHEN held_us IS NULL THEN used_us ELSE 0 END), 0) AS BIGINT) AS unheld_used_us`

// unheld makes the ledger.Unheld of a group from heldSums' counts.
func unheld(unheldRows, heldRows, unheldUsedUS int64) ledger.Unheld {
	if unheldRows == 0 {
		return ledger.Unheld{}
	}
	return ledger.Unheld{Rows: int(unheldRows), All: heldRows == 0, UsedSeconds: float64(unheldUsedUS) / MicrosPerSecond}
}

// bigSum joins the two halves of splitSum, rounding once.
func bigSum(hi, lo int64) float64 { return float64(hi)*byteSecondsUnit + float64(lo) }

// Usage answers ledger.Store.Usage with three queries: usage sums per
// (GPU, owner), CPU and RAM sums per container, and the metadata of the
// containers either found.
func Usage(ctx context.Context, q Querier, f ledger.Filter) ([]ledger.UsageTotal, error) {
	horizon, err := Horizon(ctx, q)
	if err != nil {
		return nil, err
	}
	p := PlanWindow(f, horizon)
	if p.Empty() {
		return nil, nil
	}

	// Each query numbers its own parameters.
	usageRows := func(qb *query) string {
		var where string
		if f.Node != "" {
			where = "gpu_id IN (SELECT g.id FROM gpus g JOIN nodes n ON n.id = g.node_id WHERE n.name = " + qb.arg(f.Node) + ")"
		}
		return qb.union("usage", "gpu_id, owner_id, allocated_us, held_us, present_us, used_us, memory_byte_s, energy_mj, peak_memory_bytes, peak_util_cpct", where, p)
	}
	ctrRows := func(qb *query) string {
		var where string
		if f.Node != "" {
			where = "owner_id IN (SELECT o.id FROM owners o JOIN nodes n ON n.id = o.node_id WHERE n.name = " + qb.arg(f.Node) + ")"
		}
		return qb.union("container", "owner_id, cpu_us, ram_byte_s", where, p)
	}

	var uq query
	usageSQL := `SELECT s.owner_id, n.name, o.kind, o.name, g.uuid, g.idx, g.model, g.memory_total,
	s.allocated_us, s.held_us, s.unheld_rows, s.held_rows, s.unheld_used_us,
	s.present_us, s.used_us, s.memory_byte_s_hi, s.memory_byte_s_lo, s.energy_mj, s.peak_memory_bytes, s.peak_util_cpct
FROM (
	SELECT gpu_id, owner_id,
		CAST(SUM(allocated_us) AS BIGINT) AS allocated_us, ` + heldSums + `, CAST(SUM(present_us) AS BIGINT) AS present_us,
		CAST(SUM(used_us) AS BIGINT) AS used_us, ` + splitSum("memory_byte_s") + `,
		CAST(SUM(energy_mj) AS BIGINT) AS energy_mj,
		MAX(peak_memory_bytes) AS peak_memory_bytes, MAX(peak_util_cpct) AS peak_util_cpct
	FROM (
	` + usageRows(&uq) + `
	) AS u
	GROUP BY gpu_id, owner_id
) AS s
JOIN gpus g ON g.id = s.gpu_id
JOIN nodes n ON n.id = g.node_id
JOIN owners o ON o.id = s.owner_id`

	var out []ledger.UsageTotal
	type owned struct {
		rows []int // indexes in out
		cpu  int   // index in out of the row that carries CPU and RAM
	}
	owners := map[int64]*owned{}
	rows, err := q.Query(ctx, usageSQL, uq.args...)
	if err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	for rows.Next() {
		var (
			ownerID int64
			t       ledger.UsageTotal
			idx     *int64
			v       UsageValues
			mHi     int64 // memory byte-seconds, split as splitSum does
			mLo     int64

			unheldRows, heldRows, unheldUsedUS int64
		)
		if err := rows.Scan(&ownerID, &t.Node, &t.OwnerKind, &t.OwnerID, &t.GPU.UUID, &idx, &t.GPU.Model, &t.GPU.MemoryTotal,
			&v.AllocatedUS, &v.HeldUS, &unheldRows, &heldRows, &unheldUsedUS,
			&v.PresentUS, &v.UsedUS, &mHi, &mLo, &v.EnergyMJ, &v.PeakMemory, &v.PeakUtil); err != nil {
			rows.Close()
			return nil, fmt.Errorf("usage: %w", err)
		}
		t.GPU.Node = t.Node
		t.GPU.Index = -1
		if idx != nil {
			t.GPU.Index = int(*idx)
		}
		t.Sums = v.Sums()
		t.MemoryByteSeconds = bigSum(mHi, mLo)
		t.Unheld = unheld(unheldRows, heldRows, unheldUsedUS)
		o := owners[ownerID]
		if o == nil {
			o = &owned{cpu: len(out)}
			owners[ownerID] = o
		} else if t.GPU.UUID < out[o.cpu].GPU.UUID {
			o.cpu = len(out)
		}
		o.rows = append(o.rows, len(out))
		out = append(out, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}

	var cq query
	ctrSQL := `SELECT s.owner_id, n.name, o.name, s.cpu_us, s.ram_byte_s_hi, s.ram_byte_s_lo
FROM (
	SELECT owner_id, CAST(SUM(cpu_us) AS BIGINT) AS cpu_us, ` + splitSum("ram_byte_s") + `
	FROM (
	` + ctrRows(&cq) + `
	) AS u
	GROUP BY owner_id
) AS s
JOIN owners o ON o.id = s.owner_id
JOIN nodes n ON n.id = o.node_id`
	rows, err = q.Query(ctx, ctrSQL, cq.args...)
	if err != nil {
		return nil, fmt.Errorf("container usage: %w", err)
	}
	for rows.Next() {
		var (
			ownerID  int64
			node, id string
			cpuUS    int64
			rHi, rLo int64
		)
		if err := rows.Scan(&ownerID, &node, &id, &cpuUS, &rHi, &rLo); err != nil {
			rows.Close()
			return nil, fmt.Errorf("container usage: %w", err)
		}
		cpu, ram := float64(cpuUS)/MicrosPerSecond, bigSum(rHi, rLo)
		if o := owners[ownerID]; o != nil {
			out[o.cpu].CPUSeconds, out[o.cpu].RAMByteSeconds = cpu, ram
			continue
		}
		owners[ownerID] = &owned{rows: []int{len(out)}, cpu: len(out)}
		out = append(out, ledger.UsageTotal{Node: node, OwnerKind: ledger.KindContainer, OwnerID: id, CPUSeconds: cpu, RAMByteSeconds: ram})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("container usage: %w", err)
	}

	if len(owners) > 0 {
		var mq query
		in := "SELECT owner_id FROM (" + usageRows(&mq) + ") AS u UNION SELECT owner_id FROM (" + ctrRows(&mq) + ") AS c"
		rows, err = q.Query(ctx, fmt.Sprintf(containerSQL, in), mq.args...)
		if err != nil {
			return nil, fmt.Errorf("containers: %w", err)
		}
		for rows.Next() {
			ownerID, c, err := scanContainer(rows)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("containers: %w", err)
			}
			if o := owners[ownerID]; o != nil {
				for _, i := range o.rows {
					out[i].Container = c
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("containers: %w", err)
		}
	}

	slices.SortFunc(out, func(a, b ledger.UsageTotal) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.OwnerKind, b.OwnerKind),
			cmp.Compare(a.OwnerID, b.OwnerID), cmp.Compare(a.GPU.UUID, b.GPU.UUID))
	})
	return out, nil
}

// GPUs answers ledger.Store.GPUs.
func GPUs(ctx context.Context, q Querier, f ledger.Filter) ([]ledger.GPUTotal, error) {
	horizon, err := Horizon(ctx, q)
	if err != nil {
		return nil, err
	}
	p := PlanWindow(f, horizon)
	if p.Empty() {
		return nil, nil
	}
	var gq query
	var where string
	if f.Node != "" {
		n := gq.arg(f.Node)
		where = "gpu_id IN (SELECT g.id FROM gpus g JOIN nodes n ON n.id = g.node_id WHERE n.name = " + n + ")"
	}
	gpuSQL := `SELECT n.name, g.uuid, g.idx, g.model, g.memory_total,
	s.seconds_us, s.allocated_us, s.idle_us, s.used_us, s.unattributed_us, s.energy_mj, s.idle_energy_mj, s.peak_util_cpct
FROM (
	SELECT gpu_id,
		CAST(SUM(seconds_us) AS BIGINT) AS seconds_us, CAST(SUM(allocated_us) AS BIGINT) AS allocated_us,
		CAST(SUM(idle_us) AS BIGINT) AS idle_us, CAST(SUM(used_us) AS BIGINT) AS used_us,
		CAST(SUM(unattributed_us) AS BIGINT) AS unattributed_us, CAST(SUM(energy_mj) AS BIGINT) AS energy_mj,
		CAST(SUM(idle_energy_mj) AS BIGINT) AS idle_energy_mj, MAX(peak_util_cpct) AS peak_util_cpct
	FROM (
	` + gq.union("gpu", "gpu_id, seconds_us, allocated_us, idle_us, used_us, unattributed_us, energy_mj, idle_energy_mj, peak_util_cpct", where, p) + `
	) AS u
	GROUP BY gpu_id
) AS s
JOIN gpus g ON g.id = s.gpu_id
JOIN nodes n ON n.id = g.node_id`
	rows, err := q.Query(ctx, gpuSQL, gq.args...)
	if err != nil {
		return nil, fmt.Errorf("gpu usage: %w", err)
	}
	defer rows.Close()
	var out []ledger.GPUTotal
	for rows.Next() {
		var (
			t   ledger.GPUTotal
			idx *int64
			v   GPUValues
		)
		if err := rows.Scan(&t.GPU.Node, &t.GPU.UUID, &idx, &t.GPU.Model, &t.GPU.MemoryTotal,
			&v.SecondsUS, &v.AllocatedUS, &v.IdleUS, &v.UsedUS, &v.UnattributedUS, &v.EnergyMJ, &v.IdleEnergyMJ, &v.PeakUtil); err != nil {
			return nil, fmt.Errorf("gpu usage: %w", err)
		}
		t.GPU.Index = -1
		if idx != nil {
			t.GPU.Index = int(*idx)
		}
		t.GPUSums = v.Sums()
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("gpu usage: %w", err)
	}
	slices.SortFunc(out, func(a, b ledger.GPUTotal) int {
		return cmp.Or(cmp.Compare(a.GPU.Node, b.GPU.Node), cmp.Compare(a.GPU.Index, b.GPU.Index), cmp.Compare(a.GPU.UUID, b.GPU.UUID))
	})
	return out, nil
}
