package sqlledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// GPUSeries answers ledger.GPUSeriesStore.GPUSeries.
func (l Ledger) GPUSeries(ctx context.Context, node string, from, to time.Time, step time.Duration) ([]ledger.GPUHistory, error) {
	return read(ctx, l, "ledger", func(q Querier) ([]ledger.GPUHistory, error) { return GPUSeries(ctx, q, node, from, to, step) })
}

// GPUSeries reads node's GPU figures per step: minute or hour rows, summed
// into steps aligned to the epoch, the rows without readings left out.
func GPUSeries(ctx context.Context, q Querier, node string, from, to time.Time, step time.Duration) ([]ledger.GPUHistory, error) {
	if step < time.Minute || step%time.Minute != 0 {
		return nil, fmt.Errorf("GPU series step %v: want a positive whole number of minutes", step)
	}
	if node == "" {
		return nil, fmt.Errorf("GPU series: no node")
	}
	lo, hi := minuteWindow(ledger.Filter{From: from, To: to})
	hourly := step%time.Hour == 0
	if hourly {
		lo, hi = floor(lo, 3600), floor(hi+3599, 3600)
	}
	if lo >= hi {
		return nil, nil
	}
	gpus, err := readGPUs(ctx, q, node)
	if err != nil || len(gpus) == 0 {
		return nil, err
	}
	s := int64(step / time.Second)
	var out []ledger.GPUHistory
	if hourly {
		if out, err = gpuHourSeries(ctx, q, node, Range{lo, hi}, s, gpus); err != nil {
			return nil, err
		}
	} else if out, err = gpuMinuteSeries(ctx, q, node, Range{lo, hi}, s, gpus); err != nil {
		return nil, fmt.Errorf("GPU series: %w", err)
	}
	slices.SortFunc(out, func(a, b ledger.GPUHistory) int {
		return cmp.Or(cmp.Compare(a.GPU.Index, b.GPU.Index), cmp.Compare(a.GPU.UUID, b.GPU.UUID))
	})
	return out, nil
}

// gpuHourSeries sums node's GPU hour rows in r into steps of s seconds.
func gpuHourSeries(ctx context.Context, q Querier, node string, r Range, s int64, gpus map[int64]ledger.GPU) ([]ledger.GPUHistory, error) {
	var qb query
	// The step is a whole number the caller cannot name freely, so it is
	// written into the text: a parameter would leave its type to guess.
	sql := fmt.Sprintf(`SELECT start - start %% %[1]d AS step_start, gpu_id,
		CAST(SUM(samples) AS BIGINT), CAST(SUM(util_sum_cpct) AS BIGINT), MAX(util_max_cpct),
		CAST(SUM(mem_sum_bytes) AS BIGINT), MAX(mem_max_bytes),
		CAST(SUM(power_sum_mw) AS BIGINT), MAX(power_max_mw),
		CAST(SUM(temp_sum_ccel) AS BIGINT), MAX(temp_max_ccel)
		FROM gpu_hour
		WHERE start >= %[2]s AND start < %[3]s AND samples > 0
			AND gpu_id IN (SELECT g.id FROM gpus g JOIN nodes n ON n.id = g.node_id WHERE n.name = %[4]s)
		GROUP BY step_start, gpu_id
		ORDER BY gpu_id, step_start`, s, qb.arg(r.From), qb.arg(r.To), qb.arg(node))
	rows, err := q.Query(ctx, sql, qb.args...)
	if err != nil {
		return nil, fmt.Errorf("GPU series: %w", err)
	}
	defer rows.Close()
	var out []ledger.GPUHistory
	last := int64(-1)
	for rows.Next() {
		var (
			start, gpu int64
			v          GaugeValues
		)
		if err := rows.Scan(&start, &gpu, &v.Samples, &v.UtilSum, &v.UtilMax, &v.MemSum, &v.MemMax,
			&v.PowerSum, &v.PowerMax, &v.TempSum, &v.TempMax); err != nil {
			return nil, fmt.Errorf("GPU series: %w", err)
		}
		if gpu != last || len(out) == 0 {
			out = append(out, ledger.GPUHistory{GPU: gpus[gpu]})
			last = gpu
		}
		h := &out[len(out)-1]
		h.Points = append(h.Points, v.Gauges().Point(time.Unix(start, 0)))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("GPU series: %w", err)
	}
	return out, nil
}

// gpuMinuteSeries sums node's GPU minutes in r into steps of s seconds,
// the minutes without readings left out.
func gpuMinuteSeries(ctx context.Context, q Querier, node string, r Range, s int64, gpus map[int64]ledger.GPU) ([]ledger.GPUHistory, error) {
	ms, err := readMinutes(ctx, q, gpuFamily, node, r)
	if err != nil {
		return nil, err
	}
	type step struct {
		start int64
		v     GaugeValues
	}
	byGPU := map[int64][]step{}
	for i := range ms {
		m := &ms[i]
		v := gpuValues(m).Gauges
		if v.Samples <= 0 {
			continue
		}
		at := m.start - m.start%s
		steps := byGPU[m.key[0]]
		if n := len(steps); n > 0 && steps[n-1].start == at {
			steps[n-1].v = steps[n-1].v.Add(v)
			continue
		}
		byGPU[m.key[0]] = append(steps, step{at, v})
	}
	ids := make([]int64, 0, len(byGPU))
	for id := range byGPU {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]ledger.GPUHistory, 0, len(ids))
	for _, id := range ids {
		h := ledger.GPUHistory{GPU: gpus[id]}
		for _, st := range byGPU[id] {
			h.Points = append(h.Points, st.v.Gauges().Point(time.Unix(st.start, 0)))
		}
		out = append(out, h)
	}
	return out, nil
}

// GPUUsageSeries answers ledger.GPUSeriesStore.GPUUsageSeries.
func GPUUsageSeries(ctx context.Context, q Querier, f ledger.Filter, step time.Duration) ([]ledger.GPUUsage, error) {
	p, err := PlanSeries(f, step)
	if err != nil {
		return nil, err
	}
	if p.Empty() {
		return nil, nil
	}
	var rs []minuteRow
	if len(p.Minutes) > 0 {
		rs, err = readMinutes(ctx, q, gpuFamily, f.Node, p.Minutes[0])
	} else {
		rs, err = readHourRows(ctx, q, gpuFamily, f.Node, p.Hours)
	}
	if err != nil {
		return nil, fmt.Errorf("GPU usage series: %w", err)
	}
	if len(rs) == 0 {
		return nil, nil
	}
	gpus, err := readGPUs(ctx, q, f.Node)
	if err != nil {
		return nil, err
	}
	out := make([]ledger.GPUUsage, len(rs))
	for i := range rs {
		g, ok := gpus[rs[i].key[0]]
		if !ok {
			return nil, fmt.Errorf("GPU usage series: no GPU with id %d", rs[i].key[0])
		}
		v := gpuValues(&rs[i])
		out[i] = ledger.GPUUsage{Node: g.Node, Start: time.Unix(rs[i].start, 0).UTC(), GPU: g.UUID, GPUSums: v.Sums(), Gauges: v.Gauges.Gauges()}
	}
	slices.SortStableFunc(out, func(a, b ledger.GPUUsage) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Node, b.Node), cmp.Compare(a.GPU, b.GPU))
	})
	return out, nil
}
