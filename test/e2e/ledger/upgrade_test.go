package ledger

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestReportOldLedger reports on a copy of the ledger file that the
// release before held GPU-hours wrote (internal/ledger/testdata/v3), then
// simulates the same scenario two hours later into it. The old usage has
// no held time: its rows read gpu_hours_held null and efficiency 0 with a
// note; over both, held and efficiency cover the new usage alone.
func TestReportOldLedger(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	old, err := os.ReadFile(harness.RepoFile("internal/ledger/testdata/v3/ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, old, 0o600); err != nil {
		t.Fatal(err)
	}
	reportOf := func(from, to string, format string) string {
		t.Helper()
		out, stderr, code := harness.RunCLI(t, nil, "report", "--db", db, "--by", "user", "--from", from, "--to", to, "--format", format)
		if code != 0 {
			t.Fatalf("report %s..%s exited %d: %s", from, to, code, stderr)
		}
		return out
	}
	jsonOf := func(from, to string) (report.Report, map[string]any) {
		t.Helper()
		out := reportOf(from, to, "json")
		var rep report.Report
		var doc map[string]any
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		return rep, doc
	}

	// The old usage alone: nothing known of held time.
	const from, to = "2026-11-02T00:00:00Z", "2026-11-02T02:00:00Z"
	rep, doc := jsonOf(from, to)
	if len(rep.Rows) != 4 {
		t.Fatalf("%d rows, want alice, bob, carol and dave", len(rep.Rows))
	}
	rows, _ := doc["rows"].([]any)
	for _, r := range append(rows, doc["totals"]) {
		m, _ := r.(map[string]any)
		if v, ok := m["gpu_hours_held"]; !ok || v != nil {
			t.Errorf("row %v: gpu_hours_held %v (present %v), want null", m["key"], v, ok)
		}
		if m["efficiency"] != 0.0 {
			t.Errorf("row %v: efficiency %v, want 0 with nothing held known", m["key"], m["efficiency"])
		}
	}
	if len(rep.Notes) != 1 || rep.Notes[0] != report.NoteHeldUnknown {
		t.Errorf("notes %q, want the note on held GPU-hours", rep.Notes)
	}
	table := reportOf(from, to, "table")
	if !strings.Contains(table, "note: "+report.NoteHeldUnknown) {
		t.Errorf("table has no note:\n%s", table)
	}

	// The same scenario from 02:00 into the same file.
	sc, err := os.ReadFile(harness.RepoFile("internal/ledger/testdata/v3/scenario.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	later := strings.Replace(string(sc), "start: 2026-11-02T00:40:00Z", "start: 2026-11-02T02:00:00Z", 1)
	if later == string(sc) {
		t.Fatal("scenario.yaml: no start or duration to move")
	}
	scenario := filepath.Join(dir, "later.yaml")
	if err := os.WriteFile(scenario, []byte(later), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := harness.RunCLI(t, nil, "simulate", "--scenario", scenario, "--db", db); code != 0 {
		t.Fatalf("simulate into the old ledger exited %d: %s", code, stderr)
	}

	// Over both: held and efficiency from the new 40 minutes. alice
	// holds GPU 0 all of it (2/3 h) at 60 %, bob the first 30 minutes
	// (1/2 h) at 20 %; carol holds GPU 1 from 10m (1/2 h), at 80 % for 15
	// minutes and then 0 %: 0.2 of 0.5 h used; dave's host process holds
	// nothing. All: 0.4 + 0.1 + 0.2 = 0.7 of 5/3 held GPU-hours.
	rep, _ = jsonOf(from, "2026-11-02T03:00:00Z")
	want := map[string][2]float64{"alice": {2.0 / 3, 0.6}, "bob": {0.5, 0.2}, "carol": {0.5, 0.4}, "dave": {0, 0},
		"(total)": {5.0 / 3, 0.7 / (5.0 / 3)}}
	for _, r := range append(rep.Rows, rep.Totals) {
		w, ok := want[r.Key]
		if !ok {
			t.Errorf("unexpected row %s", r.Key)
			continue
		}
		if r.GPUHoursHeld == nil || !harness.CloseTo(*r.GPUHoursHeld, w[0], 1e-3) || !harness.CloseTo(r.Efficiency, w[1], 1e-3) {
			t.Errorf("row %s: held %v, efficiency %v; want %v and %v", r.Key, r.GPUHoursHeld, r.Efficiency, w[0], w[1])
		}
	}
	if len(rep.Notes) != 1 {
		t.Errorf("notes %q, want the note on held GPU-hours", rep.Notes)
	}
}
