package policy

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/waste"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestWasteClassic simulates the classic patterns of GPU waste into a
// ledger and runs `gpumeter waste` on it: it finds each pattern, and
// nothing else, with the wasted GPU-hours worked out by hand in
// testdata/waste/classic.yaml.
func TestWasteClassic(t *testing.T) {
	db := filepath.Join(t.TempDir(), "classic.db")
	if _, stderr, code := harness.RunCLI(t, nil, "simulate", "--scenario", harness.Testdata("waste/classic.yaml"), "--db", db); code != 0 {
		t.Fatalf("simulate exited %d: %s", code, stderr)
	}
	args := []string{"waste", "--config", harness.Testdata("waste/gpumeter.yaml"), "--db", db, "--from", "2026-11-02T16:00:00Z", "--to", "2026-11-03T08:00:00Z"}
	out, stderr, code := harness.RunCLI(t, nil, append(args, "--format", "json")...)
	if code != 0 {
		t.Fatalf("waste exited %d: %s", code, stderr)
	}
	var rep waste.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("waste --format json: %v\n%s", err, out)
	}
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, "2026-11-0"+s+":00Z")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	wants := []struct {
		rule, who, owner string
		gpus             []int
		since, until     time.Time
		wasted           float64 // GPU-hours
		active           bool
	}{
		{config.RuleOverAllocated, "greedy-llm", "alice", []int{1, 2, 3}, at("2T16:00"), at("2T19:00"), 3 * 3, false},
		{config.RuleStalled, "dataloader", "bob", []int{4, 5}, at("2T18:00"), at("2T19:30"), 2 * 1.5, false},
		{config.RuleIdle, "notebook", "carol", []int{6}, at("2T20:00"), at("3T05:00"), 9, false},
		{config.RuleTooOld, "no-limit", "erin", []int{7}, at("3T04:00"), at("3T08:00"), 4, true},
		{config.RuleOutside, "", "frank", []int{7}, at("2T17:00"), at("2T19:00"), 2, false},
	}
	if len(rep.Findings) != len(wants) {
		t.Errorf("%d findings, want %d:\n%s", len(rep.Findings), len(wants), out)
	}
	var total float64
	for _, w := range wants {
		total += w.wasted
		i := slices.IndexFunc(rep.Findings, func(f waste.Finding) bool { return f.Rule == w.rule && f.Container == w.who && f.Owner == w.owner })
		if i < 0 {
			t.Errorf("no %s finding for %s/%s", w.rule, w.who, w.owner)
			continue
		}
		f := rep.Findings[i]
		var gpus []int
		for _, g := range f.GPUs {
			gpus = append(gpus, g.Index)
		}
		if !slices.Equal(gpus, w.gpus) {
			t.Errorf("%s %s: GPUs %v, want %v", w.rule, w.who, gpus, w.gpus)
		}
		if !f.Since.Equal(w.since) || !f.Until.Equal(w.until) {
			t.Errorf("%s %s: %s to %s, want %s to %s", w.rule, w.who, f.Since, f.Until, w.since, w.until)
		}
		if math.Abs(f.WastedGPUHours-w.wasted) > w.wasted*1e-3 {
			t.Errorf("%s %s: wasted %v GPU-hours, want %v", w.rule, w.who, f.WastedGPUHours, w.wasted)
		}
		if math.Abs(f.Cost-2.5*w.wasted) > 2.5*w.wasted*1e-3 {
			t.Errorf("%s %s: cost %v, want %v at 2.50 a GPU-hour", w.rule, w.who, f.Cost, 2.5*w.wasted)
		}
		if f.Active != w.active || f.Node != "gpu-07" || f.ID == "" || len(f.Evidence) == 0 {
			t.Errorf("%s %s: active %v, node %q, ID %q, evidence %v", w.rule, w.who, f.Active, f.Node, f.ID, f.Evidence)
		}
	}
	if rep.Currency != "EUR" {
		t.Errorf("currency %q, want EUR", rep.Currency)
	}
	if n := len(rep.Totals); n == 0 || rep.Totals[n-1].Rule != waste.TotalKey || math.Abs(rep.Totals[n-1].WastedGPUHours-total) > total*1e-3 {
		t.Errorf("totals %+v, want the last to be %s with %v GPU-hours", rep.Totals, waste.TotalKey, total)
	}

	// The other formats say the same.
	table, stderr, code := harness.RunCLI(t, nil, args...)
	if code != 0 {
		t.Fatalf("waste (table) exited %d: %s", code, stderr)
	}
	for _, want := range []string{"RULE", "greedy-llm", "dataloader", "notebook", "no-limit", "frank", "TOTAL"} {
		if !strings.Contains(table, want) {
			t.Errorf("table does not contain %q:\n%s", want, table)
		}
	}
	csv, stderr, code := harness.RunCLI(t, nil, append(args, "--format", "csv")...)
	if code != 0 {
		t.Fatalf("waste --format csv exited %d: %s", code, stderr)
	}
	if lines := strings.Split(strings.TrimSpace(csv), "\n"); len(lines) != 1+len(wants) || !strings.HasPrefix(lines[0], "rule,id,") {
		t.Errorf("csv has %d lines, want a header and %d:\n%s", len(lines), len(wants), csv)
	}

	// A stricter rule on the command line finds more: the evening and
	// morning of the notebook (40 % SM) count as idle under 50 %.
	out, stderr, code = harness.RunCLI(t, nil, append(args, "--format", "json", "--waste-idle-sm-percent", "50")...)
	if code != 0 {
		t.Fatalf("waste --waste-idle-sm-percent 50 exited %d: %s", code, stderr)
	}
	var strict waste.Report
	if err := json.Unmarshal([]byte(out), &strict); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(strict.Findings, func(f waste.Finding) bool { return f.Rule == config.RuleIdle && f.Container == "notebook" })
	if i < 0 || math.Abs(strict.Findings[i].WastedGPUHours-11) > 11e-3 {
		t.Errorf("with idle under 50 %%, findings:\n%s\nwant the notebook idle for all its 11 h", out)
	}
}

// TestServeWasteLive plays the patterns with windows of two seconds:
// /api/v1/waste lists them as `gpumeter waste --format json` would, and
// /metrics counts them.
func TestServeWasteLive(t *testing.T) {
	env := []string{
		"GPUMETER_WASTE_IDLE_WINDOW=2s", "GPUMETER_WASTE_STALLED_WINDOW=2s", "GPUMETER_WASTE_OVER_ALLOCATED_WINDOW=2s",
		"GPUMETER_WASTE_LOW_EFFICIENCY_WINDOW=4s", "GPUMETER_WASTE_LOW_EFFICIENCY_MIN_GPU_HOURS=0",
	}
	a := harness.Serve(t, env, "--sim", harness.Testdata("waste/live.yaml"), "--interval", "100ms")
	want := map[string]string{ // rule -> who
		config.RuleIdle: "notebook", config.RuleStalled: "dataloader", config.RuleOverAllocated: "greedy-llm", config.RuleOutside: "frank",
	}
	var rep waste.Report
	harness.WaitFor(t, 15*time.Second, "the live findings", func() bool {
		rep = waste.Report{}
		if err := json.Unmarshal([]byte(harness.Get(t, a.URL+"/api/v1/waste")), &rep); err != nil {
			t.Fatal(err)
		}
		active := 0
		for _, f := range rep.Findings {
			if f.Active && f.WastedGPUHours > 0 {
				active++
			}
		}
		return active >= len(want)
	})
	if len(rep.Findings) != len(want) {
		t.Errorf("%d findings, want %d: %+v", len(rep.Findings), len(want), rep.Findings)
	}
	for _, f := range rep.Findings {
		who := f.Container
		if who == "" {
			who = f.Owner
		}
		if want[f.Rule] != who {
			t.Errorf("finding %s for %s, want none", f.Rule, who)
		}
		if !f.Active || f.Node != "gpu-07" || f.Since.IsZero() || f.FirstSeen.Before(f.Since) {
			t.Errorf("%s %s: active %v, node %q, since %s, first seen %s", f.Rule, who, f.Active, f.Node, f.Since, f.FirstSeen)
		}
	}
	metrics := harness.Series(harness.Get(t, a.URL+"/metrics"))
	for rule, who := range want {
		owner := map[string]string{"notebook": "carol", "dataloader": "bob", "greedy-llm": "alice", "frank": "frank"}[who]
		key := fmt.Sprintf(`gpumeter_waste_findings{Hostname="gpu-07",owner=%q,rule=%q}`, owner, rule)
		if metrics[key] != 1 {
			t.Errorf("%s = %v, want 1", key, metrics[key])
		}
		key = fmt.Sprintf(`gpumeter_waste_gpu_hours_total{Hostname="gpu-07",owner=%q,rule=%q}`, owner, rule)
		if metrics[key] <= 0 {
			t.Errorf("%s = %v, want more than 0", key, metrics[key])
		}
	}
}

// TestWasteWindowLength runs the real agent on the live patterns
// (testdata/waste/live.yaml) until it has flushed a few seconds of them,
// stops it, and judges its ledger with `gpumeter waste` over 47 h and
// 49 h. Under two days the rules read minute rows, over two days the
// whole hours come from hour rows: both windows find the same rules,
// owners and GPUs, since the same time to the hour, and whether a finding
// is active must not depend on the window's length either.
//
// The ledger spans seconds, not days: what picks minute or hour rows is
// the window's length alone, so a ledger reaching back two days would only
// add rows neither window disagrees on (the unit tests in internal/waste
// cover a ledger whose data crosses hours). What this test proves is that
// the binary, over what a real agent wrote, does not change its findings
// with the window's length, and that a stopped agent's findings are never
// active. Right after the stop they may be (within a minute and a flush
// interval nothing tells a stopped agent from a live one about to flush),
// so windows ending now are only compared with each other; windows ending
// later (--to in the future, as running the command then would give) must
// find nothing active: three minutes after the stop, on minute rows, and
// two hours after the stop's hour, where the 49 h window reads the agent's
// rows from hour rows.
func TestWasteWindowLength(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	started := time.Now()
	a := harness.Launch(t, data, "--sim", harness.Testdata("waste/live.yaml"), "--interval", "100ms", "--ledger-flush-interval", "1s")
	for range 4 {
		a.NextFlush(t)
	}
	a.Stop(t)
	stopped := time.Now()
	db := filepath.Join(data, "ledger.db")

	// Windows of seconds for the rules, as the agent ran for seconds.
	rules := []string{"--waste-idle-window", "2s", "--waste-stalled-window", "2s", "--waste-over-allocated-window", "2s"}
	judge := func(since string, to time.Time) map[string]waste.Finding {
		t.Helper()
		args := append([]string{"waste", "--db", db, "--format", "json", "--since", since}, rules...)
		if !to.IsZero() {
			args = append(args, "--to", to.UTC().Format(time.RFC3339))
		}
		out, stderr, code := harness.RunCLI(t, nil, args...)
		if code != 0 {
			t.Fatalf("%s exited %d: %s", strings.Join(args, " "), code, stderr)
		}
		var rep waste.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		got := map[string]waste.Finding{}
		for _, f := range rep.Findings {
			var gpus []int
			for _, g := range f.GPUs {
				gpus = append(gpus, g.Index)
			}
			got[fmt.Sprintf("%s %s/%s %v", f.Rule, f.Container, f.Owner, gpus)] = f
		}
		return got
	}
	want := []string{
		"idle notebook/carol [0]",
		"stalled dataloader/bob [1]",
		"over_allocated greedy-llm/alice [3]",
		"outside /frank [4]",
	}
	for _, end := range []struct {
		name string
		to   time.Time // zero: now
		over bool      // the window ends past the slack after the stop
	}{
		{"ending now", time.Time{}, false},
		{"ending three minutes after the stop", stopped.Truncate(time.Minute).Add(3 * time.Minute), true},
		{"ending two hours after the stop's hour", stopped.Truncate(time.Hour).Add(2 * time.Hour), true},
	} {
		t.Run(end.name, func(t *testing.T) {
			var minutes, hours map[string]waste.Finding
			for try := 1; ; try++ {
				// Windows ending now end with the minute: judged in two
				// minutes, they would end a minute apart.
				at := time.Now().Truncate(time.Minute)
				minutes, hours = judge("47h", end.to), judge("49h", end.to)
				if !end.to.IsZero() || time.Now().Truncate(time.Minute).Equal(at) || try == 3 {
					break
				}
			}
			for _, k := range want {
				m, okM := minutes[k]
				h, okH := hours[k]
				if !okM || !okH {
					t.Errorf("%s: found over 47 h %v, over 49 h %v; want both", k, okM, okH)
					continue
				}
				if d := h.Since.Sub(m.Since).Abs(); d >= time.Hour {
					t.Errorf("%s: since %s over 47 h, %s over 49 h: want the same to the hour", k, m.Since, h.Since)
				}
				if m.Since.Before(started.Truncate(time.Minute)) || m.Since.After(stopped) {
					t.Errorf("%s: since %s over 47 h, want it while the agent ran, %s to %s", k, m.Since, started, stopped)
				}
				if m.Active != h.Active {
					t.Errorf("%s: active %v over 47 h, %v over 49 h", k, m.Active, h.Active)
				}
				if end.over && (m.Active || h.Active) {
					t.Errorf("%s: active over 47 h %v, over 49 h %v, %s after the agent stopped; want neither", k, m.Active, h.Active, end.to.Sub(stopped).Round(time.Second))
				}
			}
			for _, got := range []map[string]waste.Finding{minutes, hours} {
				for k := range got {
					if !slices.Contains(want, k) {
						t.Errorf("unwanted finding %s; over 47 h: %v; over 49 h: %v", k, slices.Sorted(maps.Keys(minutes)), slices.Sorted(maps.Keys(hours)))
					}
				}
			}
		})
	}
}
