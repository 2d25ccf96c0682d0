package web

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// A chart is computed here and drawn by the "chart" template: a view box
// in pixels, a plot area inside it, paths and rectangles in view-box
// coordinates, and labelled ticks. Colours are classes (c0…c7 for series,
// h0…h7 for the heatmap's scale) that the style sheet sets for the light
// and the dark theme.

// Chart geometry, in view-box units.
const (
	chartW     = 720
	chartH     = 232
	plotLeft   = 56
	plotRight  = 12
	plotTop    = 24
	plotBottom = 34
	// seriesClasses is how many series colours the style sheet has.
	seriesClasses = 8
	// heatClasses is how many steps the heatmap's scale has.
	heatClasses = 8
)

// Point is one value at one time.
type Point struct {
	T time.Time
	V float64
}

// Series is one line (or one band of a stacked chart).
type Series struct {
	Name   string
	Points []Point
}

// Chart is an SVG chart ready to draw.
type Chart struct {
	ID, Title string
	// YLabel and XLabel name the axes with their units.
	YLabel, XLabel string
	Width, Height  int
	Plot           Rect
	Lines          []Path
	Rects          []Cell
	YTicks, XTicks []Tick
	Legend         []LegendItem
	// RowLabels are the heatmap's rows.
	RowLabels []Tick
	// Empty says the chart has nothing to draw; Note says why.
	Empty bool
	Note  string
}

// Rect is the plot area.
type Rect struct{ X, Y, W, H float64 }

// Path is one drawn line.
type Path struct {
	Name, Class, D string
}

// Cell is one rectangle: a bar or a heatmap cell, with its tooltip.
type Cell struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

// Tick is one labelled position along an axis.
type Tick struct {
	Pos   float64
	Label string
}

// LegendItem names one colour.
type LegendItem struct {
	Class, Label string
}

// Axis says how the y axis reads: its label, the format of its ticks,
// and its top (0: the data's highest value, rounded up).
type Axis struct {
	Label  string
	Format func(float64) string
	Max    float64
}

func newChart(id, title string, from, to time.Time, loc *time.Location) Chart {
	c := Chart{ID: id, Title: title, Width: chartW, Height: chartH,
		Plot: Rect{X: plotLeft, Y: plotTop, W: chartW - plotLeft - plotRight, H: chartH - plotTop - plotBottom}}
	c.XLabel = "time (" + zoneName(loc) + ")"
	c.XTicks = timeTicks(from, to, loc, c.Plot)
	return c
}

func zoneName(loc *time.Location) string {
	if loc == nil {
		return "UTC"
	}
	return loc.String()
}

// LineChart draws each series as a line over [from, to); a gap longer
// than twice step breaks the line.
func LineChart(id, title string, from, to time.Time, step time.Duration, loc *time.Location, y Axis, series []Series) Chart {
	c := newChart(id, title, from, to, loc)
	top := y.Max
	if top <= 0 {
		for _, s := range series {
			for _, p := range s.Points {
				top = max(top, p.V)
			}
		}
		top = niceCeil(top)
	}
	c.YLabel = y.Label
	c.YTicks = valueTicks(top, y.Format, c.Plot)
	for i, s := range series {
		class := "c" + strconv.Itoa(i%seriesClasses)
		c.Legend = append(c.Legend, LegendItem{class, s.Name})
		var b strings.Builder
		var last time.Time
		// run is how many points the line since its last gap has: a
		// line of one point (a GPU first seen in the window's last step,
		// a reading between two gaps) is drawn as a dot, a segment of no
		// length that the round line cap makes visible.
		run := 0
		dot := func() {
			if run == 1 {
				b.WriteString("h0")
			}
		}
		for _, p := range s.Points {
			if p.T.Before(from) || !p.T.Before(to) {
				continue
			}
			x := xAt(p.T, from, to, c.Plot)
			yv := c.Plot.Y + c.Plot.H*(1-clamp(p.V/top, 0, 1))
			cmd := "L"
			if last.IsZero() || p.T.Sub(last) > 2*step {
				cmd = "M"
				dot()
				run = 0
			}
			fmt.Fprintf(&b, "%s%.1f %.1f", cmd, x, yv)
			run++
			last = p.T
		}
		dot()
		if b.Len() == 0 {
			continue
		}
		c.Lines = append(c.Lines, Path{Name: s.Name, Class: class, D: b.String()})
	}
	if len(c.Lines) == 0 {
		c.Empty, c.Note = true, "no readings in this window"
	}
	return c
}

// Band is one stack of a stacked bar chart.
type Band struct {
	Name   string
	Values []float64 // one per bucket
}

// StackedBars draws one bar per bucket starting at starts[i] and step
// long, its bands stacked bottom up.
func StackedBars(id, title string, from, to time.Time, starts []time.Time, step time.Duration, loc *time.Location, y Axis, bands []Band) Chart {
	c := newChart(id, title, from, to, loc)
	top := y.Max
	if top <= 0 {
		for i := range starts {
			sum := 0.0
			for _, b := range bands {
				if i < len(b.Values) {
					sum += b.Values[i]
				}
			}
			top = max(top, sum)
		}
		top = niceCeil(top)
	}
	c.YLabel = y.Label
	c.YTicks = valueTicks(top, y.Format, c.Plot)
	for j, b := range bands {
		c.Legend = append(c.Legend, LegendItem{"c" + strconv.Itoa(j%seriesClasses), b.Name})
	}
	any := false
	for i, start := range starts {
		x0, x1 := xAt(start, from, to, c.Plot), xAt(start.Add(step), from, to, c.Plot)
		w := max(1, (x1-x0)*0.8)
		base := 0.0
		for j, b := range bands {
			if i >= len(b.Values) || b.Values[i] <= 0 {
				continue
			}
			v := b.Values[i]
			y0 := c.Plot.Y + c.Plot.H*(1-clamp((base+v)/top, 0, 1))
			y1 := c.Plot.Y + c.Plot.H*(1-clamp(base/top, 0, 1))
			c.Rects = append(c.Rects, Cell{X: round1(x0 + (x1-x0)*0.1), Y: round1(y0), W: round1(w), H: round1(max(0.5, y1-y0)),
				Class: "c" + strconv.Itoa(j%seriesClasses),
				Title: fmt.Sprintf("%s %s: %s", start.In(locOr(loc)).Format("2006-01-02 15:04"), b.Name, y.Format(v))})
			base += v
			any = true
		}
	}
	if !any {
		c.Empty, c.Note = true, "nothing was used or held in this window"
	}
	return c
}

// HeatRow is one row of a heatmap: a label and its values per bucket,
// NaN where there is none.
type HeatRow struct {
	Label  string
	Values []float64
}

// Heatmap draws rows × buckets of cells coloured on a scale from lo to
// hi; format writes a value for the cell's tooltip and the legend.
func Heatmap(id, title string, from, to time.Time, starts []time.Time, step time.Duration, loc *time.Location, lo, hi float64, format func(float64) string, rows []HeatRow) Chart {
	c := newChart(id, title, from, to, loc)
	c.YLabel = "GPU"
	if len(rows) == 0 {
		c.Empty, c.Note = true, "no readings in this window"
		return c
	}
	rowH := c.Plot.H / float64(len(rows))
	any := false
	for r, row := range rows {
		c.RowLabels = append(c.RowLabels, Tick{Pos: round1(c.Plot.Y + rowH*(float64(r)+0.5)), Label: row.Label})
		for i, start := range starts {
			if i >= len(row.Values) || math.IsNaN(row.Values[i]) {
				continue
			}
			v := row.Values[i]
			x0, x1 := xAt(start, from, to, c.Plot), xAt(start.Add(step), from, to, c.Plot)
			k := 0
			if hi > lo {
				k = int(clamp((v-lo)/(hi-lo), 0, 0.9999) * heatClasses)
			}
			c.Rects = append(c.Rects, Cell{X: round1(x0), Y: round1(c.Plot.Y + rowH*float64(r)), W: round1(max(0.5, x1-x0)), H: round1(rowH - 1),
				Class: "h" + strconv.Itoa(k),
				Title: fmt.Sprintf("%s %s: %s", row.Label, start.In(locOr(loc)).Format("2006-01-02 15:04"), format(v))})
			any = true
		}
	}
	for k := range heatClasses {
		c.Legend = append(c.Legend, LegendItem{"h" + strconv.Itoa(k), format(lo + (hi-lo)*float64(k)/heatClasses)})
	}
	if !any {
		c.Empty, c.Note = true, "no readings in this window"
	}
	return c
}

func locOr(loc *time.Location) *time.Location {
	if loc == nil {
		return time.UTC
	}
	return loc
}

func xAt(t, from, to time.Time, p Rect) float64 {
	span := to.Sub(from)
	if span <= 0 {
		return p.X
	}
	return round1(p.X + p.W*clamp(float64(t.Sub(from))/float64(span), 0, 1))
}

func clamp(v, lo, hi float64) float64 {
	if math.IsNaN(v) {
		return lo
	}
	return math.Max(lo, math.Min(hi, v))
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for nothing).
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p*1.0000001 {
			return m * p
		}
	}
	return 10 * p
}

// valueTicks are five ticks from 0 to top.
func valueTicks(top float64, format func(float64) string, p Rect) []Tick {
	if format == nil {
		format = func(v float64) string { return trim(v, 2) }
	}
	out := make([]Tick, 0, 5)
	for i := range 5 {
		v := top * float64(i) / 4
		out = append(out, Tick{Pos: round1(p.Y + p.H*(1-float64(i)/4)), Label: format(v)})
	}
	return out
}

// tickSteps are the spacings time ticks may have.
var tickSteps = []time.Duration{time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour}

// timeTicks are at most seven ticks on round local times within [from, to).
func timeTicks(from, to time.Time, loc *time.Location, p Rect) []Tick {
	loc = locOr(loc)
	span := to.Sub(from)
	if span <= 0 {
		return nil
	}
	step := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		if span/s <= 7 {
			step = s
			break
		}
	}
	lf := from.In(loc)
	var t time.Time
	if step >= 24*time.Hour {
		t = time.Date(lf.Year(), lf.Month(), lf.Day(), 0, 0, 0, 0, loc)
	} else {
		// Round up within the local day, so that ticks sit on the zone's
		// hours even where it is off UTC by a half hour.
		day := time.Date(lf.Year(), lf.Month(), lf.Day(), 0, 0, 0, 0, loc)
		t = day.Add(lf.Sub(day).Truncate(step))
	}
	var out []Tick
	for ; t.Before(to); t = nextTick(t, step, loc) {
		if t.Before(from) {
			continue
		}
		label := t.Format("15:04")
		switch {
		case step >= 24*time.Hour:
			label = t.Format("Mon 2 Jan")
		case t.Hour() == 0 && t.Minute() == 0:
			label = t.Format("2 Jan")
		}
		out = append(out, Tick{Pos: xAt(t, from, to, p), Label: label})
	}
	return out
}

// nextTick steps by whole local days when step is days, so that ticks
// stay at midnight across a daylight-saving change.
func nextTick(t time.Time, step time.Duration, loc *time.Location) time.Time {
	if step >= 24*time.Hour {
		return t.AddDate(0, 0, int(step/(24*time.Hour)))
	}
	return t.Add(step)
}
