package console

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestConsoleOver30DayLedger serves the console from an agent whose
// ledger holds the 30 days up to this hour (8 GPUs, 2,000 containers),
// on the ledger's own node: the pages read the last day and week from
// it, draw charts with data and say nothing went wrong.
func TestConsoleOver30DayLedger(t *testing.T) {
	b := harness.NewBrowser(t) // first: without a browser there is nothing to fill the ledger for
	dir := t.TempDir()
	node := monthLedger(t, filepath.Join(dir, "ledger.db"))

	scenario := filepath.Join(dir, "node.yaml")
	err := os.WriteFile(scenario, fmt.Appendf(nil, `version: 1
node: %s
duration: 1h
gpus:
  - count: 8
    model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    idle_power: 70W
    max_power: 700W
containers:
  - name: live-train
    labels: {gpumeter.user: user01, gpumeter.team: nlp}
    gpus: [0, 1]
    phases: [{at: 0s, util: 60, memory: 30GiB}]
`, node), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	a := harness.Serve(t, []string{"GPUMETER_DATA_DIR=" + dir}, "--sim", scenario, "--interval", "200ms")
	// The pages are read once the agent has written its first readings
	// to the ledger, as a slow run (CI's, under the race detector) reads
	// them: the node's GPUs are then the ledger's and the agent's alike.
	harness.WaitFor(t, 30*time.Second, "the agent's first ledger flush", func() bool {
		return a.Scrape(t).Sum("gpumeter_ledger_flushes_total") > 0
	})
	ctx := b.Ctx
	harness.SignIn(t, ctx, a.URL, a.Token, "e2e (admin)")
	emulate(t, ctx, viewports[0], "light")

	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			for _, path := range p.ledgerPaths() {
				began := time.Now()
				if status := open(t, ctx, a.URL+path); status != 200 {
					t.Errorf("%s: status %d, want 200", path, status)
				}
				t.Logf("%s loaded in %v", path, time.Since(began).Round(time.Millisecond))
				st := state(t, ctx)
				if st.Message != "" || !strings.Contains(st.Status, "signed in as e2e (admin)") {
					t.Errorf("%s: status %q, message %q", path, st.Status, st.Message)
				}
				charts := evaluate[[]chart](t, ctx, "charts", chartsJS)
				for _, pr := range chartProblems(charts, p.charts) {
					t.Errorf("%s: %s", path, pr)
				}
				for _, c := range charts {
					if p.ledgerLines > 0 && len(c.Points) > 0 && len(c.Points) != p.ledgerLines {
						t.Errorf("%s: chart %s draws %d lines, want %d: one per GPU of the node", path, c.ID, len(c.Points), p.ledgerLines)
					}
				}
				noErrors(t, b, path)
			}
			if *updateDocs && !p.docsFromDemo {
				// The README's picture of the page: its first window
				// over a full month, at the desktop size, light.
				open(t, ctx, a.URL+p.ledgerPaths()[0])
				t.Logf("wrote %s", screenshot(t, ctx, docsDir(t), p.name))
			}
		})
	}

	// The overview's figures for today come from the ledger (and, in
	// the first hour of a day, from what the agent wrote since).
	var used string
	harness.WaitFor(t, 20*time.Second, "the overview's GPU-hours used today", func() bool {
		open(t, ctx, a.URL+"/")
		used = evaluate[string](t, ctx, "today's GPU-hours", `(document.getElementById("today-used") || {}).textContent || ""`)
		f, err := strconv.ParseFloat(strings.Fields(used + " x")[0], 64)
		return err == nil && f > 0
	})
	t.Logf("GPU-hours used today: %s", used)
}

// monthLedger writes to path a SQLite ledger of ledgertest.Fill30DaysTo
// up to this hour, and returns its node. Its GPUs are the ones the
// simulator gives that node, so that the agent carries on their series:
// with GPUs of its own, the node would have 16 once the agent wrote its
// first minute, 8 of them with readings of this hour only (one point in
// the week's steps of an hour). The ledger is built once an hour, shared
// by every go test run of that hour (with the race detector and without),
// and kept in os.TempDir(), keyed by the fill's and the schema's versions;
// each test gets a copy. It is built by ./monthfill in a go test without
// the race detector: 6–8 s, where the detector made it 1.5 min on a quiet
// machine and 7 min on a busy one.
func monthLedger(t *testing.T, path string) string {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Hour)
	node := ledgertest.Plan30Days().Node
	prefix := fmt.Sprintf("gpumeter-console-ledger-fill%d-schema%d-simgpus-", ledgertest.FillVersion, sqlite.SchemaVersion())
	cached := filepath.Join(os.TempDir(), prefix+now.Format("2006010215")+".db")
	if _, err := os.Stat(cached); err != nil {
		tmp, err := os.CreateTemp(os.TempDir(), prefix+"*.building")
		if err != nil {
			t.Fatal(err)
		}
		tmp.Close()
		defer os.Remove(tmp.Name())
		out := harness.GoTest(t, []string{"GPUMETER_MONTH_FILL=" + tmp.Name(), "GPUMETER_MONTH_TO=" + now.Format(time.RFC3339)},
			"-count=1", "-v", "-run", "^TestFillMonth$", "./test/e2e/console/monthfill")
		for line := range strings.Lines(out) {
			if strings.Contains(line, "filled the 30-day ledger") {
				t.Log(strings.TrimSpace(line))
			}
		}
		if err := os.Rename(tmp.Name(), cached); err != nil {
			t.Fatal(err)
		}
		// Those of hours past are of no more use.
		old, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*.db"))
		for _, o := range old {
			if o != cached {
				os.Remove(o)
			}
		}
	}
	b, err := os.ReadFile(cached)
	if err == nil {
		err = os.WriteFile(path, b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	return node
}
