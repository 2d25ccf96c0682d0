package sqlledger

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

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

// Horizons reads the minute horizon recorded by Retain and the day
// horizon recorded by the migration that added day rows: NoHorizon for
// each that is not recorded (day rows then answer every day).
func Horizons(ctx context.Context, q Querier) (minutes, days int64, err error) {
	rows, err := q.Query(ctx, "SELECT key, value FROM "+MetaTable+" WHERE key IN ($1, $2)", MetaHorizon, MetaDays)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	minutes, days = NoHorizon, NoHorizon
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return 0, 0, err
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s.%s: %w", MetaTable, k, err)
		}
		if k == MetaHorizon {
			minutes = n
		} else {
			days = n
		}
	}
	return minutes, days, rows.Err()
}

// query builds SQL text with numbered parameters.
type query struct{ args []any }

func (q *query) arg(v any) string {
	q.args = append(q.args, v)
	return "$" + strconv.Itoa(len(q.args))
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
	l, ok := plainLabels(s)
	if !ok {
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			return nil, err
		}
	}
	if len(l) == 0 {
		return nil, nil
	}
	return l, nil
}

// plainLabels decodes what EncodeLabels writes for most labels, an object
// of strings without escapes, without encoding/json, which cost a
// month's report a tenth of its time. ok is false for anything else (an
// escape, a control character, invalid UTF-8, a malformed object), which
// json.Unmarshal then decodes, or refuses.
func plainLabels(s string) (l map[string]string, ok bool) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, false
	}
	str := func(i int) (string, int, bool) {
		if i >= len(s) || s[i] != '"' {
			return "", i, false
		}
		for j := i + 1; j < len(s); j++ {
			switch c := s[j]; {
			case c == '"':
				v := s[i+1 : j]
				return v, j + 1, utf8.ValidString(v)
			case c == '\\' || c < 0x20:
				return "", j, false
			}
		}
		return "", len(s), false
	}
	l = map[string]string{}
	i := 1
	for i < len(s)-1 {
		k, j, ok := str(i)
		if !ok || j >= len(s) || s[j] != ':' {
			return nil, false
		}
		v, j, ok := str(j + 1)
		if !ok {
			return nil, false
		}
		l[k] = v
		switch {
		case j == len(s)-1:
			return l, true
		case s[j] == ',' && j+1 < len(s)-1:
			i = j + 1
		default:
			return nil, false
		}
	}
	return nil, false
}

// byteSecondsUnit splits a byte-seconds column for summing: a container
// that holds 1 TiB of RAM for four months adds up to more byte-seconds
// than an int64 holds. Sums of x / unit and of x % unit stay far from
// that and exact; bigSum joins them.
const byteSecondsUnit = 1 << 20

// unheld makes the ledger.Unheld of a group from its counts of rows.
func unheld(unheldRows, heldRows, unheldUsedUS int64) ledger.Unheld {
	if unheldRows == 0 {
		return ledger.Unheld{}
	}
	return ledger.Unheld{Rows: int(unheldRows), All: heldRows == 0, UsedSeconds: float64(unheldUsedUS) / MicrosPerSecond}
}

// bigSum joins the two halves of a split sum, rounding once.
func bigSum(hi, lo int64) float64 { return float64(hi)*byteSecondsUnit + float64(lo) }

// usageSums adds up one (GPU, owner)'s usage rows in stored units: memory
// split at byteSecondsUnit, and the rows with and without held_us counted
// (held_us is NULL in rows written before it existed).
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

// The columns of the usage and GPU rollups that Usage and GPUs sum.
const (
	usageCols = "gpu_id, owner_id, allocated_us, held_us, present_us, used_us, memory_byte_s, energy_mj, peak_memory_bytes, peak_util_cpct"
	gpuCols   = "gpu_id, seconds_us, allocated_us, idle_us, used_us, unattributed_us, energy_mj, idle_energy_mj, peak_util_cpct"
)

// rollups selects cols from family's day rows over p.Days and its hour
// rows over p.HourParts, as one UNION ALL.
func (q *query) rollups(family, cols string, p Plan) string {
	var parts []string
	add := func(table string, r Range) {
		parts = append(parts, "SELECT "+cols+" FROM "+table+" WHERE start >= "+q.arg(r.From)+" AND start < "+q.arg(r.To))
	}
	if !p.Days.Empty() {
		add(family+"_day", p.Days)
	}
	for _, r := range p.HourParts() {
		add(family+"_hour", r)
	}
	return strings.Join(parts, " UNION ALL ")
}

// eachRollupRow calls fn with each of f's day rows over p.Days and hour
// rows over p.HourParts, of node ("" for every node), in no order. The
// row is reused.
func eachRollupRow(ctx context.Context, q Querier, f *family, node string, p Plan, fn func(*minuteRow)) error {
	var qb query
	sql := "SELECT " + f.selectCols() + " FROM (" + qb.rollups(f.name, "start, "+strings.Join(f.keys, ", ")+", "+strings.Join(f.cols, ", "), p) + ") AS u"
	if node != "" {
		sql += " WHERE " + f.nodeByName(qb.arg(node))
	}
	rows, err := q.Query(ctx, sql, qb.args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	sc := f.scanner()
	for rows.Next() {
		row, err := sc.scan(rows)
		if err != nil {
			return err
		}
		fn(&row)
	}
	return rows.Err()
}

// plan reads the horizons and plans f's window.
func plan(ctx context.Context, q Querier, f ledger.Filter) (Plan, error) {
	minutes, days, err := Horizons(ctx, q)
	if err != nil {
		return Plan{}, err
	}
	return PlanWindow(f, minutes, days), nil
}

// ctrSums adds up one container's CPU and RAM rows, RAM split at
// byteSecondsUnit.
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

// Usage answers ledger.Store.Usage: the day and hour rows summed per
// (GPU, owner) and per container in SQL, the minutes at the window's
// edges added in Go, then the GPUs, owners and containers they name.
func Usage(ctx context.Context, q Querier, f ledger.Filter) ([]ledger.UsageTotal, error) {
	p, err := plan(ctx, q, f)
	if err != nil {
		return nil, err
	}
	if p.Empty() {
		return nil, nil
	}
	usage := map[[2]int64]*usageSums{}
	ctrs := map[int64]*ctrSums{}

	addUsage := func(r *minuteRow) {
		s := usage[r.key]
		if s == nil {
			s = &usageSums{}
			usage[r.key] = s
		}
		s.addMinute(r)
	}
	addCtr := func(r *minuteRow) {
		s := ctrs[r.key[0]]
		if s == nil {
			s = &ctrSums{}
			ctrs[r.key[0]] = s
		}
		s.cpuUS += r.v[0]
		s.rHi += r.v[1] / byteSecondsUnit
		s.rLo += r.v[1] % byteSecondsUnit
	}
	if !p.Hours.Empty() {
		// Summed here rather than with GROUP BY: SQLite's sorter and its
		// fourteen aggregates cost several times reading the rows.
		if err := eachRollupRow(ctx, q, usageFamily, f.Node, p, addUsage); err != nil {
			return nil, fmt.Errorf("usage: %w", err)
		}
		if err := eachRollupRow(ctx, q, containerFamily, f.Node, p, addCtr); err != nil {
			return nil, fmt.Errorf("container usage: %w", err)
		}
	}
	for _, r := range p.Minutes {
		ms, err := readMinutes(ctx, q, usageFamily, f.Node, r)
		if err != nil {
			return nil, fmt.Errorf("usage: %w", err)
		}
		for i := range ms {
			addUsage(&ms[i])
		}
		ms, err = readMinutes(ctx, q, containerFamily, f.Node, r)
		if err != nil {
			return nil, fmt.Errorf("container usage: %w", err)
		}
		for i := range ms {
			addCtr(&ms[i])
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
	owners, containers, err := readOwnersContainers(ctx, q, list)
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
	p, err := plan(ctx, q, f)
	if err != nil {
		return nil, err
	}
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
	FROM (` + gq.rollups("gpu", gpuCols, p) + `) AS u
	WHERE true` + where + `
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
