package web

import (
	"strings"
	"testing"
	"time"
)

func usageView() *Usage {
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	from := time.Date(2026, 11, 1, 11, 0, 0, 0, time.UTC)
	to := from.Add(24 * time.Hour)
	held := 2.0
	starts := []time.Time{from, from.Add(time.Hour)}
	return &Usage{
		Frame: Frame{Page: PageUsage, Title: "Usage", Loc: loc, Zone: "Europe/Berlin", Now: to, User: "root", Role: "admin", Method: "token", Nav: Nav("/usage", "admin", false)},
		From:  from, To: to, Window: "24h", By: "user", Groupings: []string{"user", "team"},
		Presets:  []Link{{Label: "24 h", Href: "/usage?window=24h", Current: true}, {Label: "7 days", Href: "/usage?window=7d"}},
		FromDate: "2026-11-01", ToDate: "2026-11-02", FilterTeam: `"><b>team`,
		Crumbs:    []Link{{Label: "all teams", Href: "/usage?by=team"}, {Label: `team "><b>team`, Current: true}},
		Downloads: []Link{{Label: "CSV", Href: "/api/v1/usage.csv?by=user", File: "usage.csv"}},
		Chart:     UsageChart(from, to, starts, time.Hour, loc, []float64{1, 0.5}, []float64{1, 0}),
		Rows: []UsageRow{{Key: "<script>alert(1)</script>", Href: "/usage?by=container&user=%3Cscript%3E", Allocated: 2, Used: 1, Held: &held,
			Efficiency: 0.5, EnergyKWh: 0.25, PeakMemory: 8 << 30, Cost: 4, Currency: "EUR", Containers: 1},
			// A host user's processes hold no GPU: no efficiency.
			{Key: "carol (host)", Used: 0.5, Held: new(0.0), Currency: "EUR"}},
		Totals:   UsageRow{Key: "(total)", Allocated: 2, Used: 1, Cost: 4, Currency: "EUR", Containers: 1},
		Idle:     &UsageIdle{GPUHours: 3, EnergyKWh: 0.1, Cost: 6},
		Currency: "EUR",
	}
}

func render(t *testing.T, page string, v any) string {
	t.Helper()
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := c.Render(&b, page, v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestUsageRender(t *testing.T) {
	out := render(t, PageUsage, usageView())
	if strings.Contains(out, "<script>alert") || strings.Contains(out, `"><b>team`) {
		t.Error("a name reaches the page unescaped")
	}
	for _, want := range []string{
		`&lt;script&gt;alert(1)&lt;/script&gt;</a>`,
		`<td class="num">2 h</td>`, `<td class="num">50 %</td>`, `<td class="num">8 GiB</td>`, `<td class="num">4.00 EUR</td>`,
		// The totals row has no held hours to show.
		`<tr class="total"><th scope="row">Total</th><td class="num">2 h</td>
  <td class="num">n/a</td>`,
		// Unknown, not 0 %, where the row held nothing; the peak's
		// values carry their unit.
		`<td class="num"><span title="it held no GPU time">–</span></td>`,
		`<th scope="col" class="num">Peak GPU memory</th>`,
		`Idle pool (not in the total)`, `<td class="num">6.00 EUR</td>`,
		`<input type="hidden" name="team" value="&#34;&gt;&lt;b&gt;team">`,
		`<label for="by">Group by`, `<option value="user" selected>user</option>`,
		`<a href="/usage?window=24h" aria-current="true">24 h</a>`,
		`<span aria-current="page">team &#34;&gt;&lt;b&gt;team</span>`,
		`<a class="button" href="/api/v1/usage.csv?by=user" download="usage.csv">CSV</a>`,
		`time (Europe/Berlin)`, `<title>2026-11-01 12:00 used: 1 h</title>`, `<title>2026-11-01 12:00 held, not used: 1 h</title>`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(out, `<td class="num">0 %</td>`) {
		t.Error("a row that held nothing shows an efficiency of 0 %")
	}
	if strings.Contains(out, "style=") || strings.Contains(out, "<script>") && !strings.Contains(out, `<script src="/static/console.js" defer></script>`) {
		t.Error("the page has an inline style or script")
	}
}

func TestUsageRenderEmpty(t *testing.T) {
	v := usageView()
	v.Rows, v.Idle, v.Filtered = nil, nil, true
	v.Chart = UsageChart(v.From, v.To, []time.Time{v.From}, time.Hour, v.Loc, []float64{0}, []float64{0})
	out := render(t, PageUsage, v)
	for _, want := range []string{"No usage in this window for this filter.", "nothing was used or held in this window"} {
		if !strings.Contains(out, want) {
			t.Errorf("the empty page lacks %q", want)
		}
	}
	if strings.Contains(out, `id="idle-row"`) {
		t.Error("the idle pool is shown to a reader who may not see it")
	}
}

func TestUsageChartDays(t *testing.T) {
	day := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	starts := []time.Time{day, day.AddDate(0, 0, 1)}
	c := UsageChart(day, day.AddDate(0, 0, 2), starts, 24*time.Hour, time.UTC, []float64{3, 0}, []float64{1, 2})
	if c.Title != "GPU-hours used and held per day" || c.YLabel != "GPU-hours" || c.Empty {
		t.Fatalf("chart %q %q empty %v", c.Title, c.YLabel, c.Empty)
	}
	// Day one: used 3 h under 1 h held idle; day two: 2 h held idle only.
	var got []string
	for _, r := range c.Rects {
		got = append(got, r.Class+" "+r.Title)
	}
	want := []string{"c0 2026-11-01 00:00 used: 3 h", "c1 2026-11-01 00:00 held, not used: 1 h", "c1 2026-11-02 00:00 held, not used: 2 h"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("bars %q, want %q", got, want)
	}
	if top := c.YTicks[len(c.YTicks)-1].Label; top != "5 h" {
		t.Errorf("top tick %q, want 5 h (the highest stack, 4 h, rounded up)", top)
	}
}

func TestAxisHours(t *testing.T) {
	for v, want := range map[float64]string{0: "0 h", 0.0025: "0.0025 h", 0.00376: "0.0038 h", 0.05: "0.05 h", 0.5: "0.5 h", 1.25: "1.25 h", 12.5: "12.5 h", 250: "250 h", 1234.6: "1235 h"} {
		if got := axisHours(v); got != want {
			t.Errorf("axisHours(%v) = %q, want %q", v, got, want)
		}
	}
}
