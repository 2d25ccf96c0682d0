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

// usageSums adds up one (GPU, owner)'s usage rows in stored units, as the
// SQL of the hour rows does: memory split as splitSum splits it, and the
// rows with and without held_us counted as heldSums counts them.
type usageSums struct {
	v                                  UsageValues
	mHi, mLo                           int64
	unheldRows, heldRows, unheldUsedUS int64
}

func (s *usageSums) addMinute(r *minuteRow) {
	v := UsageValues{AllocatedUS: r.v[0], HeldUS: r.v[1], PresentUS: r.v[2], UsedUS: r.v[3],
		EnergyMJ: r.v[5], PeakMemory: r.v[6], PeakUtil: r.v[7]}
	s.v = s.v.Add(v)
	s.mHi += r.v[4] / byteSecondsUnit
	s.mLo += r.v[4] % byteSecondsUnit
	if r.null {
		s.unheldRows++
		s.unheldUsedUS += r.v[3]
	} else {
		s.heldRows++
	}
}

// ctrSums adds up one container's CPU and RAM rows, RAM split as splitSum
// splits it.
type ctrSums struct{ cpuUS, rHi, rLo int64 }

// idList is ids as an SQL list of integers.
func idList(ids []int64) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	return b.String()
}

// Usage answers ledger.Store.Usage: the hour rows summed per (GPU, owner)
// and per container in SQL, the minutes at the window's edges added in
// Go, then the GPUs, owners and containers they name.
func Usage(ctx context.Context, q Querier, f ledger.Filter) ([]ledger.UsageTotal, error) {
	horizon, err := Horizon(ctx, q)
	if err != nil {
		return nil, err
	}
	p := PlanWindow(f, horizon)
	if p.Empty() {
		return nil, nil
	}
	usage := map[[2]int64]*usageSums{}
	ctrs := map[int64]*ctrSums{}

	if !p.Hours.Empty() {
		var uq query
		var where string
		if f.Node != "" {
			where = " AND " + usageFamily.nodeByName(uq.arg(f.Node))
		}
		sql := `SELECT gpu_id, owner_id,
		CAST(SUM(allocated_us) AS BIGINT), ` + heldSums + `, CAST(SUM(present_us) AS BIGINT),
		CAST(SUM(used_us) AS BIGINT), ` + splitSum("memory_byte_s") + `,
		CAST(SUM(energy_mj) AS BIGINT), MAX(peak_memory_bytes), MAX(peak_util_cpct)
	FROM usage_hour WHERE start >= ` + uq.arg(p.Hours.From) + ` AND start < ` + uq.arg(p.Hours.To) + where + `
	GROUP BY gpu_id, owner_id`
		rows, err := q.Query(ctx, sql, uq.args...)
		if err != nil {
			return nil, fmt.Errorf("usage: %w", err)
		}
		for rows.Next() {
			var (
				key [2]int64
				s   usageSums
			)
			if err := rows.Scan(&key[0], &key[1], &s.v.AllocatedUS, &s.v.HeldUS, &s.unheldRows, &s.heldRows, &s.unheldUsedUS,
				&s.v.PresentUS, &s.v.UsedUS, &s.mHi, &s.mLo, &s.v.EnergyMJ, &s.v.PeakMemory, &s.v.PeakUtil); err != nil {
				rows.Close()
				return nil, fmt.Errorf("usage: %w", err)
			}
			usage[key] = &s
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("usage: %w", err)
		}

		var cq query
		where = ""
		if f.Node != "" {
			where = " AND " + containerFamily.nodeByName(cq.arg(f.Node))
		}
		sql = `SELECT owner_id, CAST(SUM(cpu_us) AS BIGINT), ` + splitSum("ram_byte_s") + `
	FROM container_hour WHERE start >= ` + cq.arg(p.Hours.From) + ` AND start < ` + cq.arg(p.Hours.To) + where + `
	GROUP BY owner_id`
		rows, err = q.Query(ctx, sql, cq.args...)
		if err != nil {
			return nil, fmt.Errorf("container usage: %w", err)
		}
		for rows.Next() {
			var (
				id int64
				s  ctrSums
			)
			if err := rows.Scan(&id, &s.cpuUS, &s.rHi, &s.rLo); err != nil {
				rows.Close()
				return nil, fmt.Errorf("container usage: %w", err)
			}
			ctrs[id] = &s
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("container usage: %w", err)
		}
	}
	for _, r := range p.Minutes {
		ms, err := readMinutes(ctx, q, usageFamily, f.Node, r)
		if err != nil {
			return nil, fmt.Errorf("usage: %w", err)
		}
		for i := range ms {
			s := usage[ms[i].key]
			if s == nil {
				s = &usageSums{}
				usage[ms[i].key] = s
			}
			s.addMinute(&ms[i])
		}
		ms, err = readMinutes(ctx, q, containerFamily, f.Node, r)
		if err != nil {
			return nil, fmt.Errorf("container usage: %w", err)
		}
		for i := range ms {
			s := ctrs[ms[i].key[0]]
			if s == nil {
				s = &ctrSums{}
				ctrs[ms[i].key[0]] = s
			}
			s.cpuUS += ms[i].v[0]
			s.rHi += ms[i].v[1] / byteSecondsUnit
			s.rLo += ms[i].v[1] % byteSecondsUnit
		}
	}
	if len(usage) == 0 && len(ctrs) == 0 {
		return nil, nil
	}

	// What the sums name.
	gpus, err := readGPUs(ctx, q, f.Node)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for k := range usage {
		ids = append(ids, k[1])
	}
	for id := range ctrs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	list := idList(ids)
	owners, err := readOwners(ctx, q, list, nil)
	if err != nil {
		return nil, err
	}
	containers, err := readContainers(ctx, q, list, nil)
	if err != nil {
		return nil, err
	}

	out := make([]ledger.UsageTotal, 0, len(usage)+len(ctrs))
	type owned struct {
		rows []int // indexes in out
		cpu  int   // index in out of the row that carries CPU and RAM
	}
	byOwner := map[int64]*owned{}
	for key, s := range usage {
		g, ok := gpus[key[0]]
		if !ok {
			return nil, fmt.Errorf("usage: no GPU with id %d", key[0])
		}
		o, ok := owners[key[1]]
		if !ok {
			return nil, fmt.Errorf("usage: no owner with id %d", key[1])
		}
		t := ledger.UsageTotal{Node: g.Node, OwnerKind: o.Kind, OwnerID: o.Name, GPU: g, Container: containers[key[1]]}
		t.Sums = s.v.Sums()
		t.MemoryByteSeconds = bigSum(s.mHi, s.mLo)
		t.Unheld = unheld(s.unheldRows, s.heldRows, s.unheldUsedUS)
		ow := byOwner[key[1]]
		if ow == nil {
			ow = &owned{cpu: len(out)}
			byOwner[key[1]] = ow
		} else if t.GPU.UUID < out[ow.cpu].GPU.UUID {
			ow.cpu = len(out)
		}
		ow.rows = append(ow.rows, len(out))
		out = append(out, t)
	}
	for id, s := range ctrs {
		cpu, ram := float64(s.cpuUS)/MicrosPerSecond, bigSum(s.rHi, s.rLo)
		if ow := byOwner[id]; ow != nil {
			out[ow.cpu].CPUSeconds, out[ow.cpu].RAMByteSeconds = cpu, ram
			continue
		}
		o, ok := owners[id]
		if !ok {
			return nil, fmt.Errorf("container usage: no owner with id %d", id)
		}
		out = append(out, ledger.UsageTotal{Node: o.Node, OwnerKind: ledger.KindContainer, OwnerID: o.Name,
			CPUSeconds: cpu, RAMByteSeconds: ram, Container: containers[id]})
	}
	slices.SortFunc(out, func(a, b ledger.UsageTotal) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.OwnerKind, b.OwnerKind),
			cmp.Compare(a.OwnerID, b.OwnerID), cmp.Compare(a.GPU.UUID, b.GPU.UUID))
	})
	return out, nil
}

// GPUs answers ledger.Store.GPUs as Usage answers Usage.
func GPUs(ctx context.Context, q Querier, f ledger.Filter) ([]ledger.GPUTotal, error) {
	horizon, err := Horizon(ctx, q)
	if err != nil {
		return nil, err
	}
	p := PlanWindow(f, horizon)
	if p.Empty() {
		return nil, nil
	}
	sums := map[int64]*GPUValues{}
	if !p.Hours.Empty() {
		var gq query
		var where string
		if f.Node != "" {
			where = " AND " + gpuFamily.nodeByName(gq.arg(f.Node))
		}
		sql := `SELECT gpu_id,
		CAST(SUM(seconds_us) AS BIGINT), CAST(SUM(allocated_us) AS BIGINT),
		CAST(SUM(idle_us) AS BIGINT), CAST(SUM(used_us) AS BIGINT),
		CAST(SUM(unattributed_us) AS BIGINT), CAST(SUM(energy_mj) AS BIGINT),
		CAST(SUM(idle_energy_mj) AS BIGINT), MAX(peak_util_cpct)
	FROM gpu_hour WHERE start >= ` + gq.arg(p.Hours.From) + ` AND start < ` + gq.arg(p.Hours.To) + where + `
	GROUP BY gpu_id`
		rows, err := q.Query(ctx, sql, gq.args...)
		if err != nil {
			return nil, fmt.Errorf("gpu usage: %w", err)
		}
		for rows.Next() {
			var (
				id int64
				v  GPUValues
			)
			if err := rows.Scan(&id, &v.SecondsUS, &v.AllocatedUS, &v.IdleUS, &v.UsedUS, &v.UnattributedUS,
				&v.EnergyMJ, &v.IdleEnergyMJ, &v.PeakUtil); err != nil {
				rows.Close()
				return nil, fmt.Errorf("gpu usage: %w", err)
			}
			sums[id] = &v
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("gpu usage: %w", err)
		}
	}
	for _, r := range p.Minutes {
		ms, err := readMinutes(ctx, q, gpuFamily, f.Node, r)
		if err != nil {
			return nil, fmt.Errorf("gpu usage: %w", err)
		}
		for i := range ms {
			v := sums[ms[i].key[0]]
			if v == nil {
				v = &GPUValues{}
				sums[ms[i].key[0]] = v
			}
			*v = v.Add(gpuValues(&ms[i]))
		}
	}
	if len(sums) == 0 {
		return nil, nil
	}
	gpus, err := readGPUs(ctx, q, f.Node)
	if err != nil {
		return nil, err
	}
	out := make([]ledger.GPUTotal, 0, len(sums))
	for id, v := range sums {
		g, ok := gpus[id]
		if !ok {
			return nil, fmt.Errorf("gpu usage: no GPU with id %d", id)
		}
		out = append(out, ledger.GPUTotal{GPU: g, GPUSums: v.Sums()})
	}
	slices.SortFunc(out, func(a, b ledger.GPUTotal) int {
		return cmp.Or(cmp.Compare(a.GPU.Node, b.GPU.Node), cmp.Compare(a.GPU.Index, b.GPU.Index), cmp.Compare(a.GPU.UUID, b.GPU.UUID))
	})
	return out, nil
}

// gpuValues is a gpu family minute row as GPUValues.
func gpuValues(r *minuteRow) GPUValues {
	return GPUValues{
		SecondsUS: r.v[0], AllocatedUS: r.v[1], IdleUS: r.v[2], UsedUS: r.v[3], UnattributedUS: r.v[4],
		EnergyMJ: r.v[5], IdleEnergyMJ: r.v[6], PeakUtil: r.v[7],
		Gauges: GaugeValues{Samples: r.v[8], UtilSum: r.v[9], UtilMax: r.v[10], MemSum: r.v[11], MemMax: r.v[12],
			PowerSum: r.v[13], PowerMax: r.v[14], TempSum: r.v[15], TempMax: r.v[16]},
	}
}
