package ledger

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestLedgerBackupWhileServing backs the ledger up while the agent writes
// it, checks the copy, and reports from it: the copy holds what the agent
// had committed by then, and a second backup to the same file is refused.
func TestLedgerBackupWhileServing(t *testing.T) {
	dir := t.TempDir()
	scenario := harness.WriteText(t, filepath.Join(dir, "solo.yaml"), harness.SoloScenario)
	data := filepath.Join(dir, "data")
	db := filepath.Join(data, "ledger.db")
	a := harness.Launch(t, data, "--sim", scenario, "--interval", harness.SampleInterval.String(), "--ledger-flush-interval", harness.FlushInterval.String())
	a.NextFlush(t)
	a.NextFlush(t)

	backup := filepath.Join(dir, "backup.db")
	out, stderr, code := harness.RunCLI(t, nil, "ledger", "backup", backup, "--db", db)
	if code != 0 || !strings.Contains(out, "backed up "+db+" to "+backup) {
		t.Fatalf("ledger backup: exit %d, out %q, stderr %s", code, out, stderr)
	}
	if fi, err := os.Stat(backup); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("backup file: %v, mode %v; want mode 0600", err, fi.Mode().Perm())
	}
	a.NextFlush(t) // the agent goes on writing the original
	a.Stop(t)

	out, stderr, code = harness.RunCLI(t, nil, "ledger", "check", "--db", backup)
	for _, want := range []string{"integrity  ok", "schema     version", "as this gpumeter writes", "nodes      crash-1: seen ", "minutes    ", "lease      crash-1: held by pid"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("ledger check of the backup: exit %d, stderr %s; output does not say %q:\n%s", code, stderr, want, out)
		}
	}
	copied := reportJSON(t, backup, report.ByContainer)
	live := reportJSON(t, db, report.ByContainer)
	if copied.Totals.GPUHoursAllocated <= 0 || copied.Totals.GPUHoursAllocated >= live.Totals.GPUHoursAllocated {
		t.Errorf("the backup holds %.6f GPU-hours, the ledger %.6f after more flushes; want some, and less", copied.Totals.GPUHoursAllocated, live.Totals.GPUHoursAllocated)
	}
	if _, stderr, code := harness.RunCLI(t, nil, "ledger", "backup", backup, "--db", db); code == 0 || !strings.Contains(stderr, "it exists") {
		t.Errorf("a backup onto an existing file: exit %d, stderr %s; want a refusal", code, stderr)
	}
	if _, stderr, code := harness.RunCLI(t, nil, "ledger", "backup"); code == 0 || !strings.Contains(stderr, "ledger backup needs the file to write") {
		t.Errorf("ledger backup with no file: exit %d, stderr %s", code, stderr)
	}
}

// TestLedgerCheckFindsDamage: a ledger file with a page overwritten fails
// the check, exit 1, naming the faults; an old ledger is checked as it
// is, not migrated.
func TestLedgerCheckFindsDamage(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(harness.RepoFile("internal/ledger/testdata/v3/ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old.db")
	if err := os.WriteFile(old, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := harness.RunCLI(t, nil, "ledger", "check", "--db", old)
	if code != 0 || !strings.Contains(out, "version 3; this gpumeter writes") || !strings.Contains(out, "nodes      old-1") {
		t.Errorf("check of a version 3 ledger: exit %d, stderr %s, out:\n%s", code, stderr, out)
	}
	if after, _ := os.ReadFile(old); string(after) != string(b) {
		t.Error("ledger check changed the file")
	}

	// Garbage inside a data page is found by the integrity check; inside
	// the schema's page, the file does not open as a ledger at all.
	for _, tc := range []struct {
		page, margin int // garbage from margin bytes into the page to margin before its end
		says         string
	}{{8, 100, "the integrity check found 2 faults"}, {4, 0, "the file is damaged"}} {
		bad := append([]byte(nil), b...)
		for i := tc.page*4096 + tc.margin; i < (tc.page+1)*4096-tc.margin; i++ {
			bad[i] = byte(i * 7)
		}
		damaged := filepath.Join(dir, "damaged.db")
		if err := os.WriteFile(damaged, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		out, stderr, code = harness.RunCLI(t, nil, "ledger", "check", "--db", damaged)
		if code != 1 || !strings.Contains(stderr, tc.says) || !strings.Contains(stderr, "restore the last backup") {
			t.Errorf("check of a ledger with page %d damaged: exit %d, stderr %s, out:\n%s; want exit 1 saying %q", tc.page, code, stderr, out, tc.says)
		}
	}
}

// TestLedgerCheckPostgres checks a PostgreSQL ledger, and backup points
// to pg_dump.
func TestLedgerCheckPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	scenario := harness.WriteText(t, filepath.Join(dir, "short.yaml"), strings.Replace(harness.SoloScenario, "duration: 24h", "duration: 10m", 1))
	if _, stderr, code := harness.RunCLI(t, nil, "simulate", "--scenario", scenario, "--dsn", dsn); code != 0 {
		t.Fatalf("simulate: %s", stderr)
	}
	out, stderr, code := harness.RunCLI(t, nil, "ledger", "check", "--dsn", dsn)
	for _, want := range []string{"(PostgreSQL, ", "integrity  not checked here", "nodes      crash-1: seen ", "lease      crash-1: released by pid"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("ledger check --dsn: exit %d, stderr %s; output does not say %q:\n%s", code, stderr, want, out)
		}
	}
	if _, stderr, code := harness.RunCLI(t, nil, "ledger", "backup", filepath.Join(dir, "x"), "--dsn", dsn); code == 0 || !strings.Contains(stderr, "pg_dump") {
		t.Errorf("ledger backup --dsn: exit %d, stderr %s; want it to point to pg_dump", code, stderr)
	}
}
