package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// simulatedLedger simulates scenario into a fresh SQLite ledger and
// returns its path.
func simulatedLedger(t *testing.T, scenario string) string {
	t.Helper()
	sc, err := sim.Load(scenario)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "l.db")
	ctx := context.Background()
	store, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := simulate(ctx, io.Discard, sc, store, "test"); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func runRoot(t *testing.T, args ...string) (string, error) {
	t.Helper()
	t.Setenv("GPUMETER_DATA_DIR", t.TempDir())
	t.Setenv("GPUMETER_CONFIG", "")
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestWhatifCommand replays a simulated ledger and reads the JSON
// contract back: exclusive mode gives the measured figures; on one GPU
// exclusive mode queues the four containers one after another, while
// time-slicing runs two at a time and finishes in half the time.
func TestWhatifCommand(t *testing.T) {
	db := simulatedLedger(t, "testdata/whatif/light.yaml")
	out, err := runRoot(t, "whatif", "--db", db, "--from", "2026-11-02T00:00:00Z", "--to", "2026-11-02T03:00:00Z", "--format", "json", "--switch-overhead", "0", "--fleet-gpus", "1")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Window struct {
			From         string `json:"from"`
			ReplayedFrom string `json:"replayed_from"`
		} `json:"window"`
		Model    map[string]any `json:"model"`
		Measured struct {
			UtilMean float64 `json:"util_mean"`
		} `json:"measured"`
		Modes []map[string]any `json:"modes"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if got.Window.ReplayedFrom != "2026-11-02T00:00:00Z" || len(got.Modes) != 6 {
		t.Fatalf("window %+v, %d modes; want replayed from the start, 3 modes on 2 GPUs and 3 on 1", got.Window, len(got.Modes))
	}
	for _, m := range got.Modes {
		for _, k := range []string{"mode", "gpus", "util_mean", "gpu_hours_held", "wait_s", "makespan_s", "stretch", "jobs_slowed", "gpus_for_p95_wait", "cost"} {
			if _, ok := m[k]; !ok {
				t.Errorf("mode %v has no %q", m["mode"], k)
			}
		}
	}
	ex, ex1, ts1 := got.Modes[0], got.Modes[3], got.Modes[4]
	// (0.4+0.3+0.2+0.1) GPU-hours used over 2 GPUs for 2 hours.
	if u := ex["util_mean"].(float64); math.Abs(u-0.25) > 0.005 || math.Abs(got.Measured.UtilMean-0.25) > 0.005 {
		t.Errorf("exclusive utilisation %v, measured %v; want 0.25", u, got.Measured.UtilMean)
	}
	if ex["makespan_s"].(float64) != 7200 || ex1["gpus"].(float64) != 1 || ex1["makespan_s"].(float64) != 4*3600 || ts1["makespan_s"].(float64) != 2*3600 {
		t.Errorf("makespans: exclusive on 2 GPUs %v, on 1 %v (%v GPUs), timeslice on 1 %v; want 2 h, 4 h, 2 h", ex["makespan_s"], ex1["makespan_s"], ex1["gpus"], ts1["makespan_s"])
	}
	if u := ts1["util_mean"].(float64); math.Abs(u-0.5) > 0.005 {
		t.Errorf("timeslice on 1 GPU: utilisation %v, want 0.5", u)
	}

	for _, tc := range []struct{ args, want string }{
		{"--mode exclusive,bogus", `--mode: "bogus" is not a mode`},
		{"--share 0", "--share: 0 is not between 1 and 64"},
		{"--memory-fraction 1.5", "--memory-fraction: 1.5 is not in (0, 1]"},
		{"--switch-overhead 1", "--switch-overhead: 1 is not in [0, 1)"},
		{"--fleet-gpus two", `--fleet-gpus: "two" is not a GPU count`},
		{"--fleet-gpus 0", "--fleet-gpus: \"0\": a fleet has at least one GPU"},
		{"--format yaml", `--format: "yaml" is not one of table, csv, json`},
		{"--since 0", "--since: must be more than 0"},
		{"--target 2", "--target: 2 is not in (0, 1]"},
	} {
		_, err := runRoot(t, append([]string{"whatif", "--db", db}, strings.Fields(tc.args)...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("whatif %s: got %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// TestAdviseCommand: the demo's ledger, whose GPU 1-2 job computes on
// one of its two GPUs, and the exit status of a wrong window.
func TestAdviseCommand(t *testing.T) {
	db := simulatedLedger(t, "../../internal/sim/demo.yaml")
	out, err := runRoot(t, "advise", "--db", db, "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T02:00:00Z", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Advice []struct {
			User, Kind, Flag string
			Evidence         map[string]any
			SavedGPUHours    float64 `json:"saved_gpu_hours"`
			SavedCost        struct {
				Amount   *float64
				Currency string
			} `json:"saved_cost"`
		} `json:"advice"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	found := false
	for _, a := range got.Advice {
		if a.Kind == "gpus" && a.Flag == "--gpus 1" {
			found = true
		}
		if a.Evidence == nil || a.SavedCost.Amount == nil || a.SavedCost.Currency == "" {
			t.Errorf("advice without evidence or saved_cost: %+v", a)
		}
	}
	if !found {
		t.Errorf("no --gpus 1 advice for the job that holds two GPUs and computes on one: %s", out)
	}
	for _, args := range [][]string{{"--since", "zzz"}, {"--from", "2026-01-02", "--to", "2026-01-01"}} {
		_, err := runRoot(t, append([]string{"advise", "--db", db}, args...)...)
		var ee exitError
		if !errors.As(err, &ee) || ee != 2 {
			t.Errorf("advise %v: got %v, want exit status 2", args, err)
		}
	}
	if _, err := runRoot(t, "advise", "--db", db, "--user", "a", "--team", "b"); err == nil || !strings.Contains(err.Error(), "--user and --team") {
		t.Errorf("advise --user --team: got %v", err)
	}
}

// TestWhatifReproducesSimulatedQueue simulates a scenario whose jobs
// the queue's scheduler placed (testdata/whatif/queue.yaml) and replays
// it: exclusive mode gives back the measured utilisation (over every
// holder) and the queue jobs' waits within 2 %.
func TestWhatifReproducesSimulatedQueue(t *testing.T) {
	db := simulatedLedger(t, "testdata/whatif/queue.yaml")
	out, err := runRoot(t, "whatif", "--db", db, "--from", "2026-11-02T00:00:00Z", "--to", "2026-11-04T00:00:00Z", "--format", "json", "--no-search", "--mode", "exclusive")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Model struct {
			QueueJobs int      `json:"queue_jobs"`
			Notes     []string `json:"notes"`
		} `json:"model"`
		Measured struct {
			UtilMean float64                         `json:"util_mean"`
			Wait     struct{ P50, P95, Max float64 } `json:"wait_s"`
		} `json:"measured"`
		Modes []struct {
			UtilMean float64                         `json:"util_mean"`
			Wait     struct{ P50, P95, Max float64 } `json:"wait_s"`
		} `json:"modes"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	m, ex := got.Measured, got.Modes[0]
	t.Logf("%d queue jobs; measured util %.4f waits %+v; exclusive util %.4f waits %+v; notes %q", got.Model.QueueJobs, m.UtilMean, m.Wait, ex.UtilMean, ex.Wait, got.Model.Notes)
	if got.Model.QueueJobs < 40 || m.Wait.P95 == 0 {
		t.Fatalf("the simulated queue is too light to test: %d jobs, waits %+v", got.Model.QueueJobs, m.Wait)
	}
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"utilisation", ex.UtilMean, m.UtilMean}, {"wait p50", ex.Wait.P50, m.Wait.P50},
		{"wait p95", ex.Wait.P95, m.Wait.P95}, {"wait max", ex.Wait.Max, m.Wait.Max},
	} {
		if d := math.Abs(c.got - c.want); d > 0.02*c.want {
			t.Errorf("%s: replayed %v, measured %v: more than 2 %% apart", c.what, c.got, c.want)
		}
	}
}
