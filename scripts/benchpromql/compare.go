package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// queryFamily is the family the answers compare: allocated GPU time, the
// cost basis, which `gpumeter report --by user --format json` gives as
// rows[].gpu_hours_allocated.
const queryFamily = "gpumeter_container_gpu_allocated_seconds"

// promQuery is GPU-hours per user over the days before the query's time,
// as one would ask Prometheus for it.
func promQuery(days int) string {
	return fmt.Sprintf("sum by (user) (increase(%s_total[%dd])) / 3600", queryFamily, days)
}

// increase is what Prometheus 2.42's increase() (extrapolatedRate in
// promql/functions.go) gives for a counter series s over the range
// [start, end], both ends included: the rise from the first sample to the
// last, stretched to the range's ends where a sample lies within 1.1
// average intervals of them, and by half an average interval where it
// does not (a series that starts or ends inside the range), never back
// past the counter's zero. The converter writes every counter series
// from 0, so the rise is the last value and the start is never
// stretched; a series that ends before the range does gains half an
// interval at its end. That gain is the whole difference from the
// ledger, which sums the minutes exactly.
func increase(s counterSeries, start, end int64) (float64, error) {
	if s.First < start || s.Last > end {
		return 0, fmt.Errorf("series of %s from %d to %d is not inside the range [%d, %d]", s.User, s.First, s.Last, start, end)
	}
	if s.Samples < 2 {
		return 0, nil // no answer for the series
	}
	first := 0.0 // every counter series starts at 0
	rise := s.Value - first
	toStart := float64(s.First - start)
	toEnd := float64(end - s.Last)
	sampled := float64(s.Last - s.First)
	avg := sampled / float64(s.Samples-1)
	if rise > 0 && first >= 0 {
		toStart = min(toStart, sampled*(first/rise))
	}
	threshold := avg * 1.1
	interval := sampled
	if toStart < threshold {
		interval += toStart
	} else {
		interval += avg / 2
	}
	if toEnd < threshold {
		interval += toEnd
	} else {
		interval += avg / 2
	}
	return rise * (interval / sampled), nil
}

// userAnswer is one user's GPU-hours as each side gives them, in seconds.
type userAnswer struct {
	User string
	// Exact is the sum of the user's minutes as converted, Ledger what
	// the report says, Prom what Prometheus answered and Model what
	// increase() predicts from the series written.
	Exact, Ledger, Prom, Model float64
	Series, EndInside          int // series, and those ending before the range does
}

// reportAnswer is the part of `gpumeter report --format json` compared.
type reportAnswer struct {
	Rows []struct {
		Key               string  `json:"key"`
		GPUHoursAllocated float64 `json:"gpu_hours_allocated"`
	} `json:"rows"`
}

// compareAnswers puts the ledger's report (JSON), Prometheus's answer
// (GPU-hours by user) and the series converted side by side, and says
// what disagrees beyond Prometheus's known extrapolation: the report must
// equal the minutes' sum, and Prometheus the prediction of increase().
func compareAnswers(reportJSON []byte, prom map[string]float64, series []counterSeries, from, to time.Time) ([]userAnswer, []string, error) {
	var rep reportAnswer
	if err := json.Unmarshal(reportJSON, &rep); err != nil {
		return nil, nil, fmt.Errorf("report JSON: %w", err)
	}
	by := map[string]*userAnswer{}
	get := func(u string) *userAnswer {
		a := by[u]
		if a == nil {
			a = &userAnswer{User: u}
			by[u] = a
		}
		return a
	}
	for _, s := range series {
		if s.User == "" {
			continue // nobody's: no user row on either side
		}
		v, err := increase(s, from.Unix(), to.Unix())
		if err != nil {
			return nil, nil, err
		}
		a := get(s.User)
		a.Exact += s.Value
		a.Model += v
		a.Series++
		if s.Last < to.Unix() {
			a.EndInside++
		}
	}
	var problems []string
	for _, r := range rep.Rows {
		if _, ok := by[r.Key]; !ok {
			if r.GPUHoursAllocated != 0 {
				problems = append(problems, fmt.Sprintf("the report has %s with %g GPU-hours allocated, the series do not", r.Key, r.GPUHoursAllocated))
			}
			continue
		}
		by[r.Key].Ledger = r.GPUHoursAllocated * 3600
	}
	for _, u := range slices.Sorted(maps.Keys(prom)) {
		v := prom[u]
		if _, ok := by[u]; !ok {
			if u != "" && v != 0 {
				problems = append(problems, fmt.Sprintf("Prometheus has %q with %g GPU-hours, the series do not", u, v))
			}
			continue
		}
		by[u].Prom = v * 3600
	}
	var out []userAnswer
	for _, a := range by {
		out = append(out, *a)
	}
	slices.SortFunc(out, func(a, b userAnswer) int { return cmp.Compare(a.User, b.User) })
	for _, a := range out {
		if !agree(a.Ledger, a.Exact) {
			problems = append(problems, fmt.Sprintf("%s: the report says %.6f GPU-seconds, the minutes add up to %.6f", a.User, a.Ledger, a.Exact))
		}
		if !agree(a.Prom, a.Model) {
			problems = append(problems, fmt.Sprintf("%s: Prometheus says %.6f GPU-seconds, its extrapolation of the series written gives %.6f", a.User, a.Prom, a.Model))
		}
	}
	return out, problems, nil
}

// agree says whether two sums of the same figures agree to float
// rounding: the report rounds to 12 significant digits, Prometheus adds
// in its own order.
func agree(got, want float64) bool {
	return math.Abs(got-want) <= 1e-6+1e-9*math.Abs(want)
}
