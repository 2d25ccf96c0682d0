package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// unreachableDSN names a PostgreSQL server that refuses connections.
const unreachableDSN = "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"

// cliCase is a command line that must fail: a status other than 0, no
// crash, and stderr naming the problem.
type cliCase struct {
	name  string
	args  []string
	want  []string // in stderr
	after func(t *testing.T)
}

func runFailing(t *testing.T, tests []cliCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			begin := time.Now()
			stdout, stderr, code := harness.RunCLI(t, nil, tt.args...)
			took := time.Since(begin)
			if code == 0 {
				t.Fatalf("gpumeter %s: exit status 0, want failure; stdout:\n%s", strings.Join(tt.args, " "), stdout)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Errorf("stderr shows a crash:\n%s", stderr)
			}
			// How long it took is the machine's figure: a command that
			// hangs instead of failing is killed and failed by RunCLI.
			t.Logf("failed in %s", took.Round(time.Millisecond))
			if tt.after != nil {
				tt.after(t)
			}
		})
	}
}

// foreignSQLite makes an SQLite database with someone else's table in it.
func foreignSQLite(t *testing.T, path string) {
	t.Helper()
	db := harness.OpenSQLite(t, path)
	for _, q := range []string{
		"CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL)",
		"INSERT INTO customers (name) VALUES ('acme')",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
}

// unchanged checks that a file that is not a ledger was left as it was.
func unchangedText(path, want string) func(t *testing.T) {
	return func(t *testing.T) {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s now holds %q, want it untouched (%q)", path, got, want)
		}
	}
}

// unchangedForeign checks that foreignSQLite's database was left as it
// was: its one table and row, no ledger tables, its journal mode.
func unchangedForeign(path string) func(t *testing.T) {
	return func(t *testing.T) {
		db := harness.OpenSQLite(t, path)
		var tables []string
		rows, err := db.Query("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			tables = append(tables, n)
		}
		rows.Close()
		var count int
		var mode string
		if err := db.QueryRow("SELECT count(*) FROM customers").Scan(&count); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tables, []string{"customers"}) || count != 1 || mode != "delete" {
			t.Errorf("%s now has tables %v, %d customers, journal mode %s; want it untouched", path, tables, count, mode)
		}
	}
}

const textNotLedger = "these are my notes, not a ledger\n"

// TestReportBadInput runs `gpumeter report` on bad flags, ledgers that are
// missing, not ledgers or unreachable, and prices that do not fit the
// ledger.
func TestReportBadInput(t *testing.T) {
	dir := t.TempDir()
	scenario := harness.WriteText(t, filepath.Join(dir, "solo.yaml"), strings.Replace(harness.SoloScenario, "duration: 24h", "duration: 10m", 1))
	db := filepath.Join(dir, "solo.db")
	if _, stderr, code := harness.RunCLI(t, nil, "simulate", "--scenario", scenario, "--db", db); code != 0 {
		t.Fatalf("simulate exited %d: %s", code, stderr)
	}
	text := harness.WriteText(t, filepath.Join(dir, "notes.db"), textNotLedger)
	foreign := filepath.Join(dir, "crm.db")
	foreignSQLite(t, foreign)
	wrongPrice := harness.WriteText(t, filepath.Join(dir, "wrong-price.yaml"),
		"cost:\n  gpu_hour:\n    default: 1\n    NVIDIA H100 80GB HBM3: 3\n    NVIDIA H100 80GB: 2.5\n")
	rightPrice := harness.WriteText(t, filepath.Join(dir, "price.yaml"),
		"cost:\n  gpu_hour:\n    default: 1\n    NVIDIA H100 80GB HBM3: 3\n")
	badPrice := harness.WriteText(t, filepath.Join(dir, "bad-price.yaml"), "cost:\n  gpu_hour:\n    default: -1\n")
	window := []string{"--from", "2026-01-01", "--to", "2026-01-02"}
	reportDB := func(args ...string) []string { return append([]string{"report", "--db", db}, args...) }

	runFailing(t, []cliCase{
		{name: "from after to", args: reportDB("--from", "2026-11-02", "--to", "2026-11-01"),
			want: []string{"from 2026-11-02T00:00:00Z is not before to 2026-11-01T00:00:00Z"}},
		{name: "bad from", args: reportDB("--from", "last tuesday"),
			want: []string{"--from", `"last tuesday"`, "RFC 3339"}},
		{name: "since and from", args: reportDB("--since", "1h", "--from", "2026-11-01"),
			want: []string{"since and from exclude each other"}},
		{name: "unknown grouping", args: reportDB("--by", "nobody"),
			want: []string{`--by: "nobody" is not one of user, team, project, container, image, gpu, node`}},
		{name: "unknown format", args: reportDB("--format", "xml"),
			want: []string{`--format: "xml" is not one of table, csv, json, focus`}},
		{name: "garbage since", args: reportDB("--since", "garbage"),
			want: []string{`--since: "garbage" is not a duration`}},
		{name: "negative since", args: reportDB("--since", "-1h"),
			want: []string{"--since", "negative"}},
		{name: "zero since", args: reportDB("--since", "0"),
			want: []string{"--since: must be more than 0"}},
		{name: "label without =", args: reportDB("--label", "team"),
			want: []string{"--label: want key=value", `"team"`}},
		{name: "db and dsn", args: reportDB("--dsn", unreachableDSN),
			want: []string{"--db and --dsn exclude each other"}},
		{name: "missing db", args: []string{"report", "--db", filepath.Join(dir, "nope.db")},
			want: []string{filepath.Join(dir, "nope.db"), "no such file", "gpumeter simulate"},
			after: func(t *testing.T) {
				if _, err := os.Stat(filepath.Join(dir, "nope.db")); err == nil {
					t.Error("report created the ledger it was asked to read")
				}
			}},
		{name: "db is a directory", args: []string{"report", "--db", dir},
			want: []string{dir, "is a directory"}},
		{name: "db is a text file", args: []string{"report", "--db", text},
			want:  []string{text, "not a gpumeter ledger", "not an SQLite database"},
			after: unchangedText(text, textNotLedger)},
		{name: "db is someone else's SQLite", args: []string{"report", "--db", foreign},
			want:  []string{foreign, "not a gpumeter ledger", "customers"},
			after: unchangedForeign(foreign)},
		{name: "unreachable PostgreSQL", args: []string{"report", "--dsn", unreachableDSN},
			want: []string{"127.0.0.1:1", "connect"}},
		{name: "price for a model the ledger does not know", args: reportDB(append(window, "--config", wrongPrice)...),
			want: []string{"config cost", `unknown GPU model "NVIDIA H100 80GB"`, "known: NVIDIA H100 80GB HBM3"}},
		{name: "negative price", args: reportDB(append(window, "--config", badPrice)...),
			want: []string{"cost.gpu_hour", "-1"}},
	})

	// The same ledger with prices for the models it knows reports, and
	// charges them.
	out, stderr, code := harness.RunCLI(t, nil, reportDB(append(window, "--config", rightPrice, "--by", "container", "--format", "json")...)...)
	if code != 0 {
		t.Fatalf("report with a price for every known model exited %d: %s", code, stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Rows) != 1 || !harness.CloseTo(rep.Rows[0].GPUHoursAllocated, 10.0/60, 1e-6) || !harness.CloseTo(rep.Rows[0].Cost, 3*10.0/60, 1e-6) {
		t.Errorf("report rows %+v, want solo with 1/6 GPU-hour at 3 USD", rep.Rows)
	}
}

// TestSimulateBadInput runs `gpumeter simulate` on scenarios it cannot
// play and ledgers it cannot or must not write.
func TestSimulateBadInput(t *testing.T) {
	dir := t.TempDir()
	scenario := harness.WriteText(t, filepath.Join(dir, "solo.yaml"), strings.Replace(harness.SoloScenario, "duration: 24h", "duration: 10m", 1))
	withPID := harness.WriteText(t, filepath.Join(dir, "pid.yaml"), `version: 1
duration: 10m
gpus:
  - model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    idle_power: 100W
    max_power: 500W
containers:
  - name: real
    pid: 1
    gpus: [0]
`)
	text := harness.WriteText(t, filepath.Join(dir, "notes.db"), textNotLedger)
	foreign := filepath.Join(dir, "crm.db")
	foreignSQLite(t, foreign)
	pidDB := filepath.Join(dir, "pid.db")

	runFailing(t, []cliCase{
		{name: "no scenario", args: []string{"simulate", "--db", filepath.Join(dir, "x.db")},
			want: []string{"--scenario"}},
		{name: "missing scenario", args: []string{"simulate", "--scenario", filepath.Join(dir, "nope.yaml"), "--db", filepath.Join(dir, "x.db")},
			want: []string{"nope.yaml"}},
		{name: "scenario with pid entries", args: []string{"simulate", "--scenario", withPID, "--db", pidDB},
			want: []string{withPID, "container real has pid: 1", "serve --sim"},
			after: func(t *testing.T) {
				if _, err := os.Stat(pidDB); err == nil {
					t.Errorf("simulate created %s for a scenario it refused", pidDB)
				}
			}},
		{name: "db and dsn", args: []string{"simulate", "--scenario", scenario, "--db", filepath.Join(dir, "x.db"), "--dsn", unreachableDSN},
			want: []string{"--db and --dsn exclude each other"}},
		{name: "db is a text file", args: []string{"simulate", "--scenario", scenario, "--db", text},
			want:  []string{text, "not a gpumeter ledger"},
			after: unchangedText(text, textNotLedger)},
		{name: "db is someone else's SQLite", args: []string{"simulate", "--scenario", scenario, "--db", foreign},
			want:  []string{foreign, "not a gpumeter ledger", "customers"},
			after: unchangedForeign(foreign)},
		{name: "unreachable PostgreSQL", args: []string{"simulate", "--scenario", scenario, "--dsn", unreachableDSN},
			want: []string{"127.0.0.1:1", "connect"}},
	})
}

// TestCommandArgs: a missing or extra argument is named, verbatim, before
// any agent is asked.
func TestCommandArgs(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"stop"}, "gpumeter: stop needs a container name or id (`gpumeter ps` lists them)\n"},
		{[]string{"stop", "a", "b"}, "gpumeter: stop takes one container name or id, got 2; stop them one by one\n"},
		{[]string{"ps", "alice"}, "gpumeter: ps takes no arguments, got \"alice\"\n"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			// An agent that cannot be reached: only the arguments can fail.
			_, stderr, code := harness.RunCLI(t, []string{"GPUMETER_URL=http://127.0.0.1:1"}, tt.args...)
			if code != 1 || stderr != tt.want {
				t.Errorf("exit status %d, stderr %q; want 1, %q", code, stderr, tt.want)
			}
		})
	}
}

// TestWasteBadInput: rules that make no sense are config errors, named
// by their keys, wherever they come from.
func TestWasteBadInput(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	if _, stderr, code := harness.RunCLI(t, nil, "simulate", "--scenario", harness.Testdata("accuracy/exclusive.yaml"), "--db", db); code != 0 {
		t.Fatalf("simulate exited %d: %s", code, stderr)
	}
	badConfig := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badConfig, []byte("waste:\n  idle:\n    window: 1h\n    grace: 2h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wasteDB := func(args ...string) []string { return append([]string{"waste", "--db", db, "--since", "7d"}, args...) }
	runFailing(t, []cliCase{
		{name: "negative threshold", args: wasteDB("--waste-idle-sm-percent", "-1"), want: []string{"waste.idle.sm_percent: -1 is negative"}},
		{name: "negative efficiency", args: wasteDB("--waste-low-efficiency-threshold", "-0.5"), want: []string{"waste.low_efficiency.threshold: -0.5 is negative"}},
		{name: "grace over window", args: wasteDB("--waste-stalled-grace", "1h"), want: []string{"waste.stalled.grace: 1h0m0s is longer than the window, 30m0s"}},
		{name: "grace over window in a file", args: wasteDB("--config", badConfig), want: []string{"waste.idle.grace: 2h0m0s is longer than the window, 1h0m0s"}},
		{name: "negative window", args: wasteDB("--waste-idle-window", "-1h"), want: []string{"--waste-idle-window", "negative"}},
		{name: "not a number", args: wasteDB("--waste-idle-cpu-cores", "lots"), want: []string{`"lots" is not a number`}},
		{name: "bad format", args: wasteDB("--format", "focus"), want: []string{`--format: "focus" is not one of table, csv, json`}},
		{name: "since and from", args: wasteDB("--from", "2026-11-01"), want: []string{"since and from exclude each other"}},
		{name: "missing ledger", args: []string{"waste", "--db", filepath.Join(dir, "nope.db")}, want: []string{"nope.db"}},
	})
	// serve refuses the same.
	_, stderr, code := harness.RunCLI(t, []string{"GPUMETER_WASTE_OUTSIDE_GRACE=1m"}, "serve", "--demo", "--listen", "127.0.0.1:0")
	if code == 0 || !strings.Contains(stderr, "waste.outside.grace: 1m0s is longer than the window, 0s") {
		t.Errorf("serve with a grace over its window: status %d, stderr:\n%s", code, stderr)
	}
}
