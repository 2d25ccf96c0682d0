package web

import (
	"strings"
	"testing"
	"time"
)

func TestEvidenceText(t *testing.T) {
	for _, tt := range []struct {
		rule, key string
		v         float64
		want      string
	}{
		{"idle", "sm_percent", 1.54, "1.5 %"},
		{"idle", "threshold", 5, "5 % SM"},
		{"over_allocated", "threshold", 10, "10 % SM"},
		{"low_efficiency", "threshold", 0.3, "30 %"},
		{"stalled", "threshold", 0.25, "0.25"},
		{"low_efficiency", "efficiency", 0.123, "12.3 %"},
		{"stalled", "memory_bytes", 4 << 30, "4 GiB"},
		{"outside", "unaccounted_memory_bytes_max", 1536 << 20, "1.5 GiB"},
		{"idle", "cpu_cores", 0.02, "0.02 cores"},
		{"idle", "threshold_cpu_cores", 0.1, "0.1 cores"},
		{"idle", "duration_seconds", 3700, "1h 1m"},
		{"too_old", "max_age_seconds", 3 * 86400, "3d 0h"},
		{"over_allocated", "gpus_held", 4, "4 GPUs"},
		{"low_efficiency", "gpu_hours_held", 12.345, "12.35 h"},
		{"idle", "something_new", 2.5, "2.5"},
	} {
		e := Evidence{Key: tt.key, Value: tt.v, Rule: tt.rule}
		if got := e.Text(); got != tt.want {
			t.Errorf("%s %s=%v: %q, want %q", tt.rule, tt.key, tt.v, got, tt.want)
		}
	}
	if got := (Evidence{Key: "something_new"}).Label(); got != "something_new" {
		t.Errorf("an unknown key is labelled %q", got)
	}
	if got := (Evidence{Key: "sm_percent"}).Label(); got != "mean SM utilisation" {
		t.Errorf("sm_percent is labelled %q", got)
	}
}

// TestRenderJobsWasteAudit: each page draws with its rows, with nothing
// at all, and with its off note; what it is given comes out as text.
func TestRenderJobsWasteAudit(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	frame := func(page string) Frame {
		return Frame{Page: page, Title: page, Now: now, User: "root", Role: "admin", Method: "session", CSRF: "tok", Nav: Nav("/"+page, "admin", false)}
	}
	evil := "<script>alert(1)</script>"
	stop := &Button{Label: "Stop", Method: "POST", Path: "/api/v1/containers/x/stop", Body: `{"reason":"waste: idle"}`, Confirm: "Stop " + evil + "?", Danger: true}
	pages := []struct {
		name string
		v    any
		want []string
	}{
		{PageWaste, &Waste{Frame: frame(PageWaste), Currency: "EUR",
			Findings: []WasteFinding{{ID: "f1", Rule: "idle", Who: evil, Owner: "alice", GPUs: []string{"GPU 0"}, Active: true, WastedHours: 1.5, Cost: 3,
				Evidence: []Evidence{{Key: "sm_percent", Value: 2, Rule: "idle"}}, Stop: stop}},
			Totals: []WasteTotal{{Rule: "idle", Findings: 1, Active: 1, WastedHours: 1.5, Cost: 3}, {Rule: "(total)", Findings: 1, Active: 1, WastedHours: 1.5, Cost: 3, Total: true}}},
			[]string{"&lt;script&gt;alert(1)&lt;/script&gt;", `data-body="{&#34;reason&#34;:&#34;waste: idle&#34;}"`, "<dd>2 %</dd>", `<td class="num">3.00 EUR</td>`, `<tr class="total"><td>Total</td>`}},
		{PageWaste, &Waste{Frame: frame(PageWaste)}, []string{`id="no-findings"`}},
		{PageWaste, &Waste{Frame: frame(PageWaste), Note: "off " + evil}, []string{`id="waste-off">off &lt;script&gt;`}},
		{PageJobs, &Jobs{Frame: frame(PageJobs), Everyone: true, Jobs: []JobRow{{ID: "j-1", Name: evil, User: "bob", State: "queued", Position: 3, GPUsRequested: 2, Class: "normal",
			Command: []string{"sleep", evil}, Estimated: &now, Buttons: []Button{{Label: "Hold", Method: "POST", Path: "/api/v1/jobs/j-1/hold", Confirm: "Hold?"}}}}},
			[]string{"Every user's jobs", "#3 in line", "2 GPUs", "starts about 12:00:00", `data-path="/api/v1/jobs/j-1/hold"`, "sleep &lt;script&gt;"}},
		{PageJobs, &Jobs{Frame: frame(PageJobs)}, []string{`id="no-jobs"`, "Your jobs"}},
		{PageJobs, &Jobs{Frame: frame(PageJobs), Note: "queue off"}, []string{`id="queue-off">queue off`}},
		{PageAudit, &Audit{Frame: frame(PageAudit), From: now.Add(-time.Hour), To: now, Truncated: true, Limit: 1,
			Events: []AuditRow{{Time: now.Add(-time.Minute), Kind: "api", Action: "containers.stop", Target: evil, Status: 200, Outcome: "ok", Count: 3}}},
			[]string{`id="truncated"`, "than 1 events", "<td>containers.stop", "×3 calls", "&lt;script&gt;"}},
		{PageAudit, &Audit{Frame: frame(PageAudit)}, []string{`id="no-events"`}},
	}
	for _, p := range pages {
		var b strings.Builder
		if err := c.Render(&b, p.name, p.v); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		out := b.String()
		if strings.Contains(out, evil) {
			t.Errorf("%s: unescaped script in\n%s", p.name, out)
		}
		for _, w := range p.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: no %s in\n%s", p.name, w, out)
			}
		}
	}
}
