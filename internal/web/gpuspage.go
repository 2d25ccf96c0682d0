package web

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
)

func (s *handler) gpusPages() []pageDef {
	return []pageDef{{path: "/gpus", name: PageGPUs, title: "GPUs", act: auth.ActGPUsRead, refresh: 30, view: s.gpusPage}}
}

// gpusPage is /gpus?window=1h|24h|7d[&gpu=UUID]. A GPU's figures are its
// own, so every role sees them whole; its holders are shown as the
// overview shows them.
func (s *handler) gpusPage(r *http.Request, c *Visitor, f Frame) (any, error) {
	historyWindows := s.cfg.API.HistoryWindows()
	q := r.URL.Query()
	for k, vs := range q {
		if k != "window" && k != "gpu" {
			return nil, badPage("the GPUs page does not know the parameter %q: it takes window (%s) and gpu (a GPU's UUID)", k, windowNames(historyWindows))
		}
		if len(vs) > 1 {
			return nil, badPage("%s is given %d times: give it once", k, len(vs))
		}
	}
	name := cmp.Or(q.Get("window"), apitype.HistoryHour)
	i := slices.IndexFunc(historyWindows, func(h HistoryWindow) bool { return h.Name == name })
	if i < 0 {
		return nil, badPage("the window %q is not one this page shows: choose %s", name, windowNames(historyWindows))
	}
	hw := historyWindows[i]
	v := &GPUsPage{Frame: f, Window: name, GPU: q.Get("gpu")}
	for _, h := range historyWindows {
		v.Windows = append(v.Windows, Choice{Value: h.Name, Label: windowLabel(h.Name), Href: gpusHref(h.Name, v.GPU), Current: h.Name == name})
	}
	if t := s.cfg.Ticks.Latest(); t != nil {
		v.Holders = s.tiles(t, c)
	}
	to := s.cfg.Now().UTC().Truncate(hw.Step).Add(hw.Step)
	from := to.Add(-hw.Span)
	gpus, err := s.cfg.API.History(r.Context(), hw, from, to)
	switch {
	case errors.Is(err, ErrNoHistory):
		return nil, &pageError{http.StatusServiceUnavailable, "this agent keeps no GPU history"}
	case hw.Recent:
		v.Source = "The last hour, from the agent's memory, in steps of " + hw.StepName + "."
	case errors.Is(err, ErrNoLedger):
		return nil, &pageError{http.StatusServiceUnavailable, fmt.Sprintf("the window %s reads the ledger, which is off (ledger.enabled: false); the last hour is kept in memory: /gpus?window=1h", name)}
	case err != nil:
		return nil, fmt.Errorf("GPU history %s: %w", name, err)
	default:
		v.Source = "From the ledger, in steps of " + hw.StepName + "; each point is the mean of its step."
	}
	for _, g := range gpus {
		v.GPUs = append(v.GPUs, Choice{Value: g.UUID, Label: gpuLabel(g), Href: gpusHref(name, g.UUID), Current: g.UUID == v.GPU})
	}
	if len(v.GPUs) > 1 || v.GPU != "" {
		v.GPUs = append([]Choice{{Label: "all GPUs", Href: gpusHref(name, ""), Current: v.GPU == ""}}, v.GPUs...)
	} else {
		v.GPUs = nil
	}
	if v.GPU != "" {
		j := slices.IndexFunc(gpus, func(g apitype.GPUHistory) bool { return g.UUID == v.GPU })
		if j < 0 {
			return nil, &pageError{http.StatusNotFound, fmt.Sprintf("no GPU %q has figures in the last %s: /gpus?window=%s lists those that do", v.GPU, name, name)}
		}
		gpus = gpus[j : j+1]
	}
	loc := f.Loc
	series := func(get func(apitype.HistoryPoint) float64) []Series {
		out := make([]Series, 0, len(gpus))
		for _, g := range gpus {
			sr := Series{Name: gpuLabel(g), Points: make([]Point, 0, len(g.Points))}
			for _, p := range g.Points {
				sr.Points = append(sr.Points, Point{T: p.T, V: get(p)})
			}
			out = append(out, sr)
		}
		return out
	}
	memMax := 0.0
	for _, g := range gpus {
		for _, p := range g.Points {
			memMax = max(memMax, p.MemMax)
		}
	}
	memUnit, memDiv := "GiB", float64(1<<30)
	if memMax < 1<<30 {
		memUnit, memDiv = "MiB", float64(1<<20)
	}
	v.Charts = []Chart{
		LineChart("util", "Utilisation", from, to, hw.Step, loc, Axis{Label: "SM utilisation (%)", Format: FormatPercent, Max: 100},
			series(func(p apitype.HistoryPoint) float64 { return p.UtilMean })),
		LineChart("memory", "Memory in use", from, to, hw.Step, loc, Axis{Label: "memory (" + memUnit + ")", Format: func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) + " " + memUnit }},
			series(func(p apitype.HistoryPoint) float64 { return math.Round(p.MemMean/memDiv*10) / 10 })),
		LineChart("power", "Power", from, to, hw.Step, loc, Axis{Label: "power (W)", Format: func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) + " W" }},
			series(func(p apitype.HistoryPoint) float64 { return p.PowerMean })),
		LineChart("temperature", "Temperature", from, to, hw.Step, loc, Axis{Label: "temperature (°C)", Format: func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) + " °C" }},
			series(func(p apitype.HistoryPoint) float64 { return p.TempMean })),
	}
	// The heatmap has one cell per step and GPU: the step's hottest
	// reading.
	var starts []time.Time
	for t := from; t.Before(to); t = t.Add(hw.Step) {
		starts = append(starts, t)
	}
	rows := make([]HeatRow, 0, len(gpus))
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, g := range gpus {
		vals := make([]float64, len(starts))
		for k := range vals {
			vals[k] = math.NaN()
		}
		for _, p := range g.Points {
			if k := int(p.T.Sub(from) / hw.Step); k >= 0 && k < len(vals) {
				vals[k] = p.TempMax
				lo, hi = min(lo, p.TempMax), max(hi, p.TempMax)
			}
		}
		rows = append(rows, HeatRow{Label: gpuLabel(g), Values: vals})
	}
	// A scale of at least 20 °C, so that a steady GPU is not painted as
	// if it ran from cold to hot.
	if hi-lo < 20 {
		mid := (hi + lo) / 2
		lo, hi = mid-10, mid+10
	}
	if math.IsInf(lo, 0) {
		lo, hi = 20, 90
	}
	v.Heat = Heatmap("heatmap", "Temperature across GPUs (hottest reading of each step)", from, to, starts, hw.Step, loc,
		math.Floor(lo), math.Ceil(hi), func(x float64) string { return strconv.FormatFloat(math.Round(x), 'f', -1, 64) + " °C" }, rows)
	return v, nil
}

func gpuLabel(g apitype.GPUHistory) string {
	if g.Index < 0 {
		return g.UUID
	}
	return "GPU " + strconv.Itoa(g.Index)
}

func gpusHref(window, gpu string) string {
	q := url.Values{"window": {window}}
	if gpu != "" {
		q.Set("gpu", gpu)
	}
	return "/gpus?" + q.Encode()
}

func windowNames(historyWindows []HistoryWindow) string {
	names := make([]string, len(historyWindows))
	for i, h := range historyWindows {
		names[i] = h.Name
	}
	return strings.Join(names, ", ")
}

func windowLabel(name string) string {
	switch name {
	case apitype.HistoryHour:
		return "last hour"
	case apitype.HistoryDay:
		return "last 24 hours"
	case apitype.HistoryWeek:
		return "last 7 days"
	}
	return name
}
