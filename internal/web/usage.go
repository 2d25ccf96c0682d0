package web

import (
	"math"
	"time"
)

// Link is one link the page offers; Current marks the one the page shows.
type Link struct {
	Label, Href string
	Current     bool
	// File is the name a download is saved under.
	File string
}

// UsageRow is one row of the usage table.
type UsageRow struct {
	Key string
	// Href drills down into the row (a team into its users, a user into
	// their containers); "" when there is nothing below it.
	Href            string
	Allocated, Used float64 // GPU-hours
	Held            *float64
	Efficiency      float64 // 0..1
	EnergyKWh       float64
	PeakMemory      uint64
	CPUCoreHours    float64
	Cost            float64
	Currency        string
	Containers      int
}

// HeldSome says the row held GPU time, so that it has an efficiency:
// a row of host processes held none, and its efficiency is unknown, not
// 0 % (the CLI writes "-" for it, the JSON 0 with gpu_hours_held 0).
func (r UsageRow) HeldSome() bool { return r.Held != nil && *r.Held > 0 }

// UsageIdle is the idle pool: GPU time nobody held.
type UsageIdle struct {
	GPUHours, EnergyKWh, Cost float64
	// Shared says that its cost is in the rows' cost already.
	Shared bool
}

// Usage is the page at /usage: a report over a window, grouped one way.
type Usage struct {
	Frame
	// From and To are the window, [From, To).
	From, To time.Time
	// Window is the preset shown, or "custom"; By the grouping.
	Window, By string
	Groupings  []string
	Presets    []Link
	// FromDate and ToDate fill the custom window's date inputs: the
	// window's first and last day in the reader's zone.
	FromDate, ToDate string
	// User and Team are the filters the page carries along.
	FilterUser, FilterTeam string
	// Crumbs lead back up the drill-down; the last one is the page.
	Crumbs    []Link
	Downloads []Link
	Chart     Chart
	Rows      []UsageRow
	Totals    UsageRow
	// Idle is nil where the reader may not see the node's idle pool.
	Idle     *UsageIdle
	Currency string
	// Filtered says the rows are a part of the node's use.
	Filtered bool
	Notes    []string
	// Advice is what the window's measured use advises the reader's
	// users to ask for (a user: their own); AdviceNote says why there is
	// none to show, when there cannot be.
	Advice     []AdviceRow
	AdviceNote string
}

// AdviceRow is one piece of advice on the usage page.
type AdviceRow struct {
	User, Group, Kind, Flag string
	Evidence                string
	SavedGPUHours, Saved    float64
	Currency                string
}

// UsageChart draws GPU-hours used and held but not used per bucket, one
// bar each, starting at starts and step long.
func UsageChart(from, to time.Time, starts []time.Time, step time.Duration, loc *time.Location, used, heldIdle []float64) Chart {
	title := "GPU-hours used and held per hour"
	if step >= 24*time.Hour {
		title = "GPU-hours used and held per day"
	}
	return StackedBars("usage-chart", title, from, to, starts, step, loc,
		Axis{Label: "GPU-hours", Format: axisHours},
		[]Band{{Name: "used", Values: used}, {Name: "held, not used", Values: heldIdle}})
}

// axisHours writes a tick of GPU-hours with three significant digits (two
// below 0.01 h, so that the label fits left of the plot), so that the
// ticks of a window of minutes do not all read 0 h.
func axisHours(v float64) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return trim(v, 0) + " h"
	}
	digits := 3
	if math.Abs(v) < 0.01 {
		digits = 2
	}
	prec := max(0, digits-1-int(math.Floor(math.Log10(math.Abs(v)))))
	return trim(v, prec) + " h"
}
