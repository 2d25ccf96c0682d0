package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/units"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

// PageWhatIf is the what-if replay's page.
const PageWhatIf = "whatif"

// WhatIfSource replays the ledger's history; *whatif.Service is one.
type WhatIfSource interface {
	WhatIf(ctx context.Context, q whatif.Query) (*whatif.Result, error)
	Advice(ctx context.Context, q whatif.Query) (*whatif.AdviceReport, error)
	GPUUse(ctx context.Context, from, to time.Time) (map[string]whatif.GPUUse, error)
}

func (s *handler) whatifPages() []pageDef {
	return []pageDef{{path: "/whatif", name: PageWhatIf, title: "What-if", act: auth.ActUsageRead, view: s.whatifPage}}
}

// whatifWindows are the page's windows, the default first.
var whatifWindows = []struct{ name, label string }{{"7d", "7 days"}, {"30d", "30 days"}, {"24h", "24 h"}}

// WhatIfView is the what-if page: the modes side by side as bars, and
// their utilisation over the window.
type WhatIfView struct {
	Frame
	// Note says why there is nothing to show (the ledger is off).
	Note string
	// Window, GPUs and Share are the controls as given.
	Window, GPUs string
	Share        int
	Presets      []WindowPreset
	From, To     time.Time
	Replayed     time.Time
	Holders      int
	QueueJobs    int
	Measured     WhatIfRow
	Modes        []WhatIfRow
	Chart        Chart
	// Download is the replay's JSON from the API.
	Download    string
	Assumptions []string
	Notes       []string
}

// WindowPreset is one window the page offers.
type WindowPreset struct {
	Name, Label, Href string
	Current           bool
}

// WhatIfRow is one mode (or the measured history) with its bars' widths
// in percent of the largest.
type WhatIfRow struct {
	Mode                              string
	GPUs                              int
	Util, WaitP95, Makespan           float64
	UtilBar, WaitBar, MakespanBar     float64
	Held, StretchP95, Cost            float64
	Currency                          string
	Slowed, OverTimeLimit, NeverStart int
}

func (s *handler) whatifPage(r *http.Request, _ *Visitor, f Frame) (any, error) {
	v := &WhatIfView{Frame: f, Window: whatifWindows[0].name, Share: 2}
	q := r.URL.Query()
	for k, vs := range q {
		if !slices.Contains([]string{"window", "gpus", "share"}, k) {
			return nil, badPage("%s: not a parameter of the what-if page (it takes window, gpus and share)", k)
		}
		if len(vs) > 1 {
			return nil, badPage("%s: given %d times", k, len(vs))
		}
	}
	if w := q.Get("window"); w != "" {
		if !slices.ContainsFunc(whatifWindows, func(x struct{ name, label string }) bool { return x.name == w }) {
			return nil, badPage("window: %q is not one of 24h, 7d, 30d", w)
		}
		v.Window = w
	}
	v.GPUs = q.Get("gpus")
	fleet, err := whatif.ParseFleet(v.GPUs)
	if err != nil {
		return nil, badPage("gpus: %s", err)
	}
	if sh := q.Get("share"); sh != "" {
		n, err := strconv.Atoi(sh)
		if err != nil || n < 1 || n > 64 {
			return nil, badPage("share: %q is not a whole number between 1 and 64", sh)
		}
		v.Share = n
	}
	for _, w := range whatifWindows {
		p := url.Values{"window": {w.name}}
		if v.GPUs != "" {
			p.Set("gpus", v.GPUs)
		}
		p.Set("share", strconv.Itoa(v.Share))
		v.Presets = append(v.Presets, WindowPreset{Name: w.name, Label: w.label, Href: "/whatif?" + p.Encode(), Current: w.name == v.Window})
	}
	if s.cfg.WhatIf == nil {
		v.Note = "The ledger is off on this agent (ledger.enabled: false): there is no history to replay."
		return v, nil
	}
	api := url.Values{"since": {v.Window}, "share": {strconv.Itoa(v.Share)}, "search": {"0"}}
	if v.GPUs != "" {
		api.Set("fleet_gpus", v.GPUs)
	}
	v.Download = "/api/v1/whatif?" + api.Encode()
	since, err := units.ParseDuration(v.Window)
	if err != nil {
		return nil, badPage("window: %s", err)
	}
	wq := whatif.Query{Since: since, Options: whatif.Options{Fleet: fleet, NoSearch: true,
		Params: whatif.Params{Share: v.Share, SwitchOverhead: whatif.DefaultSwitchOverhead}}}
	res, err := s.cfg.WhatIf.WhatIf(r.Context(), wq)
	if errors.Is(err, whatif.ErrQuery) {
		return nil, badPage("%s", err)
	}
	if err != nil {
		s.cfg.Logger.Warn("what-if page", "err", err)
		return nil, &pageError{http.StatusInternalServerError, "could not read the ledger; the agent's log says why"}
	}
	v.From, v.To, v.Replayed = res.Window.From, res.Window.To, res.Window.ReplayedFrom
	v.Holders, v.QueueJobs = res.Model.Holders, res.Model.QueueJobs
	v.Assumptions, v.Notes = res.Model.Assumptions, res.Model.Notes
	m := res.Measured
	v.Measured = WhatIfRow{Mode: "measured", GPUs: m.GPUs, Util: m.UtilMean, WaitP95: m.Wait.P95, Makespan: m.MakespanS, Held: m.GPUHoursHeld, StretchP95: 1}
	var series []Series
	end := res.Window.To
	step := time.Hour
	for _, x := range res.Modes {
		name := string(x.Mode)
		if fleet.Set && x.GPUs != m.GPUs {
			name += " (" + strconv.Itoa(x.GPUs) + " GPUs)"
		}
		v.Modes = append(v.Modes, WhatIfRow{Mode: name, GPUs: x.GPUs, Util: x.UtilMean, WaitP95: x.Wait.P95, Makespan: x.MakespanS,
			Held: x.GPUHoursHeld, StretchP95: x.Stretch.P95, Cost: x.Cost.Amount, Currency: x.Cost.Currency,
			Slowed: x.JobsSlowed, OverTimeLimit: x.OverTimeLimit, NeverStart: x.Unplaced})
		sr := Series{Name: name}
		step = time.Duration(x.UtilStepS * float64(time.Second))
		for i, u := range x.UtilSeries {
			sr.Points = append(sr.Points, Point{T: res.Window.ReplayedFrom.Add(time.Duration(i) * step), V: 100 * u})
		}
		if e := res.Window.ReplayedFrom.Add(time.Duration(len(x.UtilSeries)) * step); e.After(end) {
			end = e
		}
		series = append(series, sr)
	}
	var maxU, maxW, maxM float64
	for _, x := range append([]WhatIfRow{v.Measured}, v.Modes...) {
		maxU, maxW, maxM = max(maxU, x.Util), max(maxW, x.WaitP95), max(maxM, x.Makespan)
	}
	bar := func(x, top float64) float64 {
		if top <= 0 {
			return 0
		}
		return round1(100 * x / top)
	}
	for _, x := range append([]*WhatIfRow{&v.Measured}, pointers(v.Modes)...) {
		x.UtilBar, x.WaitBar, x.MakespanBar = bar(x.Util, maxU), bar(x.WaitP95, maxW), bar(x.Makespan, maxM)
	}
	v.Chart = LineChart("whatif-util", "GPU utilisation over the replay, each mode", res.Window.ReplayedFrom, end, step, f.Loc,
		Axis{Label: "utilisation (%)", Format: FormatPercent, Max: 100}, series)
	return v, nil
}

func pointers(rows []WhatIfRow) []*WhatIfRow {
	out := make([]*WhatIfRow, len(rows))
	for i := range rows {
		out[i] = &rows[i]
	}
	return out
}
