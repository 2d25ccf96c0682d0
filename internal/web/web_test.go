package web

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestFormats(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{FormatBytes(0), "0 B"},
		{FormatBytes(1536), "1.5 KiB"},
		{FormatBytes(80 << 30), "80 GiB"},
		{FormatPercent(42.4), "42 %"},
		{FormatHours(0.0042), "0.0042 h"},
		{FormatHours(0.004), "0.004 h"},
		{FormatHours(12.345), "12.35 h"},
		{FormatHours(0), "0 h"},
		{FormatMoney(12.5, "EUR"), "12.50 EUR"},
		{FormatSeconds(59), "59s"},
		{FormatSeconds(3725), "1h 2m"},
		{FormatSeconds(3 * 86400), "3d 0h"},
		{trim(1.50, 2), "1.5"},
		{trim(-0.001, 2), "0"},
		{trim(math.NaN(), 2), "n/a"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestZone(t *testing.T) {
	if loc, name, note := Zone("Europe/Berlin"); loc.String() != "Europe/Berlin" || name != "Europe/Berlin" || note != "" {
		t.Errorf("Europe/Berlin: %v %q %q", loc, name, note)
	}
	if loc, name, note := Zone(""); loc != time.UTC || name != "UTC" || note != "" {
		t.Errorf("no zone: %v %q %q", loc, name, note)
	}
	if loc, name, note := Zone("Mars/Olympus_Mons"); loc != time.UTC || name != "UTC" || !strings.Contains(note, `"Mars/Olympus_Mons" is unknown here: times are in UTC`) {
		t.Errorf("an unknown zone: %v %q %q", loc, name, note)
	}
}

// TestTimeTicks: ticks sit on round local times, also in a zone half an
// hour off UTC and across a daylight-saving change.
func TestTimeTicks(t *testing.T) {
	p := Rect{X: 0, W: 1000}
	kolkata, _ := time.LoadLocation("Asia/Kolkata")
	from := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	ticks := timeTicks(from, from.Add(time.Hour), kolkata, p)
	if len(ticks) == 0 || len(ticks) > 7 {
		t.Fatalf("%d ticks", len(ticks))
	}
	for _, tk := range ticks {
		if !strings.HasSuffix(tk.Label, "0") || tk.Pos < 0 || tk.Pos > 1000 {
			t.Errorf("tick %+v is not on a round local time inside the plot", tk)
		}
	}
	if ticks[0].Label != "15:30" {
		t.Errorf("first tick %q, want 15:30 (10:00 UTC in Kolkata)", ticks[0].Label)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	// Summer time ends on 25 October 2026.
	week := timeTicks(time.Date(2026, 10, 22, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 29, 0, 0, 0, 0, time.UTC), berlin, p)
	for _, tk := range week {
		if !strings.HasPrefix(tk.Label, "Thu") && !strings.HasPrefix(tk.Label, "Fri") && !strings.HasPrefix(tk.Label, "Sat") &&
			!strings.HasPrefix(tk.Label, "Sun") && !strings.HasPrefix(tk.Label, "Mon") && !strings.HasPrefix(tk.Label, "Tue") && !strings.HasPrefix(tk.Label, "Wed") {
			t.Errorf("a week's tick %q is not a day", tk.Label)
		}
	}
	// Local midnights from 23 to 29 October; the day the clocks go back
	// is an hour longer.
	if len(week) != 7 || week[0].Label != "Fri 23 Oct" {
		t.Fatalf("day ticks %+v, want 7 from Fri 23 Oct", week)
	}
	if short, long := week[2].Pos-week[1].Pos, week[3].Pos-week[2].Pos; long <= short {
		t.Errorf("25 October is %v wide, 24 October %v: want the 25-hour day wider", long, short)
	}
}

// TestLineChart: points land inside the plot, a gap breaks the line, and
// no data says so.
func TestLineChart(t *testing.T) {
	from := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	step := time.Minute
	s := Series{Name: "GPU 0", Points: []Point{{from, 0}, {from.Add(step), 50}, {from.Add(10 * step), 100}, {from.Add(11 * step), 150}}}
	c := LineChart("u", "Utilisation", from, from.Add(20*step), step, time.UTC, Axis{Label: "%", Format: FormatPercent, Max: 100}, []Series{s})
	if c.Empty || len(c.Lines) != 1 {
		t.Fatalf("chart %+v", c)
	}
	if d := c.Lines[0].D; strings.Count(d, "M") != 2 || strings.Count(d, "L") != 2 {
		t.Errorf("path %q: want the gap to start a second line", d)
	}
	if !strings.HasPrefix(c.Lines[0].D, "M56.0 ") || !strings.Contains(c.Lines[0].D, " 24.0") {
		t.Errorf("path %q: want 0 at the plot's left and 150 %% clamped to its top", c.Lines[0].D)
	}
	if len(c.YTicks) != 5 || c.YTicks[4].Label != "100 %" || c.YTicks[0].Label != "0 %" {
		t.Errorf("y ticks %+v", c.YTicks)
	}
	// A reading with a gap on either side, and a line of one point, are
	// dots: no-length segments the round cap draws.
	lone := Series{Name: "GPU 1", Points: []Point{{from, 10}, {from.Add(5 * step), 20}, {from.Add(6 * step), 30}, {from.Add(19 * step), 40}}}
	one := Series{Name: "GPU 2", Points: []Point{{from.Add(19 * step), 40}}}
	c = LineChart("u", "Utilisation", from, from.Add(20*step), step, time.UTC, Axis{Max: 100, Format: FormatPercent}, []Series{lone, one})
	if len(c.Lines) != 2 {
		t.Fatalf("lines %+v", c.Lines)
	}
	if d := c.Lines[0].D; strings.Count(d, "h0") != 2 || !strings.HasSuffix(d, "h0") || strings.Count(d, "M") != 3 || strings.Count(d, "L") != 1 {
		t.Errorf("path %q: want a dot, a line of two points and a dot", d)
	}
	if d := c.Lines[1].D; strings.Count(d, "M") != 1 || !strings.HasSuffix(d, "h0") {
		t.Errorf("path %q: want one dot", d)
	}
	empty := LineChart("u", "Utilisation", from, from.Add(time.Hour), step, time.UTC, Axis{}, []Series{{Name: "GPU 0"}})
	if !empty.Empty || empty.Note == "" {
		t.Errorf("a chart without points: %+v", empty)
	}
}

func TestStackedBarsAndHeatmap(t *testing.T) {
	from := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	starts := []time.Time{from, from.Add(time.Hour)}
	c := StackedBars("s", "Used and held", from, from.Add(2*time.Hour), starts, time.Hour, time.UTC, Axis{Label: "GPU-hours", Format: func(v float64) string { return trim(v, 1) + " h" }},
		[]Band{{"used", []float64{1, 2}}, {"held, not used", []float64{1, 0}}})
	if len(c.Rects) != 3 || c.YTicks[4].Label != "2 h" {
		t.Fatalf("bars %+v ticks %+v", c.Rects, c.YTicks)
	}
	// The first bucket's two bands stack to the top: 2 of 2.
	if top := c.Rects[1].Y; top != c.Plot.Y {
		t.Errorf("the stacked band's top is at %v, want the plot's top %v", top, c.Plot.Y)
	}
	h := Heatmap("h", "Temperature", from, from.Add(2*time.Hour), starts, time.Hour, time.UTC, 40, 80, func(v float64) string { return trim(v, 0) + " °C" },
		[]HeatRow{{"GPU 0", []float64{40, 80}}, {"GPU 1", []float64{math.NaN(), 60}}})
	if len(h.Rects) != 3 || h.Rects[0].Class != "h0" || h.Rects[1].Class != "h7" || h.Rects[2].Class != "h4" {
		t.Errorf("cells %+v", h.Rects)
	}
	if len(h.Legend) != 8 || len(h.RowLabels) != 2 {
		t.Errorf("legend %+v rows %+v", h.Legend, h.RowLabels)
	}
}

// TestRenderEscapes: what containers and users are called reaches the
// page as text.
func TestRenderEscapes(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	evil := `<script>alert(1)</script>`
	f := Frame{Page: PageOverview, Title: "Overview", Node: evil, User: evil, Role: "admin", Method: "session", CSRF: `"><x`, Now: time.Now(), Nav: Nav("/", "admin", false)}
	v := &Overview{Frame: f, Tiles: []Tile{{Index: 0, Model: evil, Holders: []string{evil}}}}
	var b strings.Builder
	if err := c.Render(&b, PageOverview, v); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "<script>alert") || strings.Contains(out, `"><x`) {
		t.Errorf("the page holds markup from data:\n%s", out)
	}
	if !strings.Contains(out, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the name is not on the page as text")
	}
	if strings.Count(out, "<script") != 1 {
		t.Errorf("the page has %d script elements, want only console.js", strings.Count(out, "<script"))
	}
	if err := c.Render(&b, "nonsense", v); err == nil {
		t.Error("rendering a page that does not exist did not fail")
	}
}
