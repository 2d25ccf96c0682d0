package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
)

func open(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledger.Ledger {
		return open(t, filepath.Join(t.TempDir(), "ledger.db"))
	})
}

// rawDB opens path with no gpumeter code in between.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func rawExec(t testing.TB, path string, stmts ...string) {
	t.Helper()
	db := rawDB(t, path)
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	db.Close()
}

func TestNotLedger(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "app.db")
	rawExec(t, foreign, "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)", "INSERT INTO users (name) VALUES ('x')")
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte("these are not the tables you are looking for\n"+strings.Repeat("x", 5000)), 0o644); err != nil {
		t.Fatal(err)
	}
	wrongMagic := filepath.Join(dir, "other.db")
	rawExec(t, wrongMagic, "CREATE TABLE gpumeter_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
		"INSERT INTO gpumeter_meta VALUES ('magic', 'something else'), ('schema_version', '1')")

	for _, tc := range []struct {
		name, path, says string
	}{
		{"ForeignTables", foreign, "users"},
		{"TextFile", text, "not an SQLite database"},
		{"WrongMagic", wrongMagic, "something else"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := os.ReadFile(tc.path)
			s, err := sqlite.Open(context.Background(), tc.path)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) succeeded, want ledger.ErrNotLedger", tc.path)
			}
			if !errors.Is(err, ledger.ErrNotLedger) || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Open = %v, want ledger.ErrNotLedger naming %s and saying %q", err, tc.path, tc.says)
			}
			if after, _ := os.ReadFile(tc.path); string(after) != string(before) {
				t.Errorf("Open changed %s", tc.path)
			}
		})
	}

	t.Run("Directory", func(t *testing.T) {
		if _, err := sqlite.Open(context.Background(), dir); err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("Open(a directory) = %v, want an error naming it", err)
		}
	})
	t.Run("MissingDirectory", func(t *testing.T) {
		p := filepath.Join(dir, "no", "such", "ledger.db")
		if _, err := sqlite.Open(context.Background(), p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("Open(%s) = %v, want an error naming it", p, err)
		}
	})
}

func TestSchemaTooNew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := open(t, path)
	s.Close()
	newer := strconv.Itoa(sqlite.SchemaVersion() + 1)
	rawExec(t, path, "UPDATE gpumeter_meta SET value = '"+newer+"' WHERE key = 'schema_version'")
	_, err := sqlite.Open(context.Background(), path)
	if !errors.Is(err, ledger.ErrSchemaTooNew) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "version "+newer) {
		t.Errorf("Open = %v, want ledger.ErrSchemaTooNew naming %s and version %s", err, path, newer)
	}
}

func TestOpenSetsWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	open(t, path)
	var mode string
	if err := rawDB(t, path).QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
}

func TestOpenPathWithOddCharacters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a dir?x=1#frag%20", "ledger 1.db")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	s := open(t, path)
	if err := s.Write(context.Background(), oneMinute(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("ledger not at %s: %v", path, err)
	}
}

// oneMinute is a batch that adds v to one usage, GPU and container row.
func oneMinute(start time.Time, v float64) ledger.Batch {
	return ledger.Batch{
		Usage: []ledger.Usage{{Node: "n", Start: start, OwnerKind: ledger.KindContainer, OwnerID: "c", GPU: "GPU-0",
			Sums: ledger.Sums{UsedSeconds: v}}},
		GPUUsage:       []ledger.GPUUsage{{Node: "n", Start: start, GPU: "GPU-0", GPUSums: ledger.GPUSums{Seconds: v}}},
		ContainerUsage: []ledger.ContainerUsage{{Node: "n", Start: start, ContainerID: "c", CPUSeconds: v}},
	}
}

// totals reads what oneMinute batches added up to over all time.
func totals(t testing.TB, s ledger.Store) (used, gpu, cpu float64) {
	t.Helper()
	rows, err := s.Usage(context.Background(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		used += r.UsedSeconds
		cpu += r.CPUSeconds
	}
	gpus, err := s.GPUs(context.Background(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gpus {
		gpu += g.Seconds
	}
	return used, gpu, cpu
}

func TestReopenKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	ctx := context.Background()
	start := time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, oneMinute(start, 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	if u, g, c := totals(t, s); u != 2 || g != 2 || c != 2 {
		t.Errorf("after reopen: %v, %v, %v; want 2 each", u, g, c)
	}
	// A new process knows no ids yet and must find the same rows.
	if err := s.Write(ctx, oneMinute(start, 3)); err != nil {
		t.Fatal(err)
	}
	if u, g, c := totals(t, s); u != 5 || g != 5 || c != 5 {
		t.Errorf("after a second write: %v, %v, %v; want 5 each", u, g, c)
	}
	got, _ := s.Usage(ctx, ledger.Filter{})
	if len(got) != 1 {
		t.Errorf("Usage has %d rows, want 1: %+v", len(got), got)
	}
}

// TestFailureMidBatch makes the last statement of a batch fail inside
// SQLite and checks that nothing of the batch stays, ids included.
func TestFailureMidBatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := open(t, path)
	ctx := context.Background()
	start := time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)
	rawExec(t, path, `CREATE TRIGGER fail BEFORE INSERT ON container_hour WHEN NEW.cpu_us = 13131313
		BEGIN SELECT RAISE(ABORT, 'injected failure'); END`)
	b := oneMinute(start, 13.131313)
	b.Nodes = []ledger.Node{{Name: "n", FirstSeen: start, LastSeen: start}}
	b.GPUs = []ledger.GPU{{Node: "n", UUID: "GPU-0", Model: "X"}}
	b.Containers = []ledger.Container{{Node: "n", ID: "c", Name: "c"}}
	err := s.Write(ctx, b)
	if err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("Write = %v, want the injected failure", err)
	}
	db := rawDB(t, path)
	for _, table := range []string{"nodes", "gpus", "owners", "containers", "usage_minute", "usage_hour", "gpu_minute", "gpu_hour", "container_minute", "container_hour"} {
		var n int
		if err := db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s has %d rows after a failed batch, want 0", table, n)
		}
	}
	// The ids the failed transaction created are gone; the store must not
	// have kept them.
	rawExec(t, path, "DROP TRIGGER fail")
	if err := s.Write(ctx, oneMinute(start, 1)); err != nil {
		t.Fatal(err)
	}
	if u, g, c := totals(t, s); u != 1 || g != 1 || c != 1 {
		t.Errorf("after the failure, one write: %v, %v, %v; want 1 each", u, g, c)
	}
}

func TestConcurrentOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := sqlite.Open(context.Background(), path)
			if err == nil {
				err = s.Write(context.Background(), oneMinute(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), 1))
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
	if u, _, _ := totals(t, open(t, path)); u != 4 {
		t.Errorf("used %v, want 4", u)
	}
}

// TestKill writes from a child process, kills it with SIGKILL mid-stream,
// and checks that the file is intact and holds whole batches only.
func TestKill(t *testing.T) {
	if path := os.Getenv("GPUMETER_TEST_KILL_WRITER"); path != "" {
		killWriter(path)
		return
	}
	if testing.Short() {
		t.Skip("skipping in -short mode")
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKill$")
		cmd.Env = append(os.Environ(), "GPUMETER_TEST_KILL_WRITER="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until the child has written something, then a little more.
		buf := make([]byte, 1)
		if _, err := out.Read(buf); err != nil {
			t.Fatalf("round %d: child wrote nothing: %v", round, err)
		}
		time.Sleep(time.Duration(50+round*70) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		var check string
		if err := rawDB(t, path).QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
			t.Fatalf("round %d: integrity_check = %q, %v", round, check, err)
		}
		s, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatalf("round %d: reopen after kill: %v", round, err)
		}
		u, g, c := totals(t, s)
		s.Close()
		// Each batch adds 1 to every table of two minutes: a torn batch
		// would leave the three apart or odd.
		if u != g || g != c || u == 0 || int(u)%2 != 0 {
			t.Errorf("round %d: after kill: used %v, GPU %v, CPU %v; want equal, even and > 0", round, u, g, c)
		}
		t.Logf("round %d: %v minutes survived the kill", round, u)
	}
}

func killWriter(path string) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; ; i++ {
		b := oneMinute(start.Add(time.Duration(i%500)*time.Minute), 1)
		b2 := oneMinute(start.Add(time.Duration(i%500+600)*time.Minute), 1)
		b.Usage = append(b.Usage, b2.Usage...)
		b.GPUUsage = append(b.GPUUsage, b2.GPUUsage...)
		b.ContainerUsage = append(b.ContainerUsage, b2.ContainerUsage...)
		if err := s.Write(ctx, b); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if i == 0 {
			os.Stdout.Write([]byte("."))
		}
	}
}

// TestUpgradeFromVersion2 opens a version 2 ledger holding a policy audit
// event: the event survives the migration with the API fields empty, and
// API events can be added beside it.
func TestUpgradeFromVersion2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	var stmts []string
	for _, name := range []string{"0001_init.sql", "0002_audit.sql"} {
		b, err := os.ReadFile(filepath.Join("migrations", name))
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, string(b))
	}
	at := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	stmts = append(stmts,
		"INSERT INTO gpumeter_meta VALUES ('magic', 'gpumeter ledger'), ('schema_version', '2')",
		fmt.Sprintf(`INSERT INTO audit_events (at_us, node, kind, rule, finding_id, container_id, container, owner, evidence, dry_run, outcome, attempts, error)
			VALUES (%d, 'n1', 'stop', 'idle', 'idle-1', 'abc', 'nb', 'carol', '{}', 0, 'stopped', 0, '')`, at.UnixMicro()))
	rawExec(t, path, stmts...)

	ledgertest.AuditAfterUpgrade(t, open(t, path), at)
	var v string
	if err := rawDB(t, path).QueryRow("SELECT value FROM gpumeter_meta WHERE key = 'schema_version'").Scan(&v); err != nil || v != strconv.Itoa(sqlite.SchemaVersion()) {
		t.Errorf("schema_version = %q, %v; want %d", v, err, sqlite.SchemaVersion())
	}
}

// TestUpgradeFromV3 opens a copy of a ledger file written by the release
// at schema version 3: it migrates, and reads what that release read.
func TestUpgradeFromV3(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(ledgertest.V3Dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ledgertest.UpgradeFromV3(t, open(t, path))
	// The migration compacted every hour but the newest of the minutes
	// into chunks, rolled the hour rows up into days, and kept reports on
	// hour rows over the days that hold rows without held time.
	db := rawDB(t, path)
	var chunks, minuteHours, days int64
	var horizon string
	for q, dst := range map[string]any{
		"SELECT count(*) FROM usage_chunk":                          &chunks,
		"SELECT count(DISTINCT start / 3600) FROM usage_minute":     &minuteHours,
		"SELECT count(*) FROM usage_day":                            &days,
		"SELECT value FROM gpumeter_meta WHERE key = 'day_horizon'": &horizon,
	} {
		if err := db.QueryRow(q).Scan(dst); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if chunks == 0 || minuteHours > 1 || days == 0 || horizon == "" {
		t.Errorf("after the upgrade: %d usage chunks, minute rows in %d hours, %d day rows, day horizon %q; want chunks, at most one hour of minute rows, day rows and a horizon",
			chunks, minuteHours, days, horizon)
	}
	var v string
	if err := rawDB(t, path).QueryRow("SELECT value FROM gpumeter_meta WHERE key = 'schema_version'").Scan(&v); err != nil || v != strconv.Itoa(sqlite.SchemaVersion()) {
		t.Errorf("schema_version after the upgrade = %q (%v), want %d", v, err, sqlite.SchemaVersion())
	}
}

func TestLeases(t *testing.T) {
	ledgertest.RunLeases(t, func(t *testing.T) (ledger.Ledger, ledger.Ledger) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		return open(t, path), open(t, path)
	}, true)
}

// TestCompactClosedHours checks where minutes live: a batch of a new hour
// moves the node's closed hours from the minute tables into one chunk per
// hour and family, the open hour stays in minute rows, and a row written
// late into a compacted hour is merged into its chunk.
func TestCompactClosedHours(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := open(t, path)
	t0 := time.Date(2025, 3, 10, 8, 0, 0, 0, time.UTC)
	gpu := ledger.GPU{Node: "n", UUID: "GPU-1", Index: 0, Model: "m", MemoryTotal: 1 << 30}
	batch := func(m int) ledger.Batch {
		start := t0.Add(time.Duration(m) * time.Minute)
		return ledger.Batch{
			GPUs:           []ledger.GPU{gpu},
			Usage:          []ledger.Usage{{Node: "n", Start: start, OwnerKind: ledger.KindHost, OwnerID: "alice", GPU: "GPU-1", Sums: ledger.Sums{AllocatedSeconds: 60, UsedSeconds: float64(m%7) + 0.5}}},
			GPUUsage:       []ledger.GPUUsage{{Node: "n", Start: start, GPU: "GPU-1", GPUSums: ledger.GPUSums{Seconds: 60, UsedSeconds: float64(m % 7)}}},
			ContainerUsage: []ledger.ContainerUsage{{Node: "n", Start: start, ContainerID: "c1", CPUSeconds: 1.5, RAMByteSeconds: 4096}},
		}
	}
	ctx := context.Background()
	for m := range 150 { // 08:00 to 10:29
		if err := s.Write(ctx, batch(m)); err != nil {
			t.Fatal(err)
		}
	}
	count := func(table string) (n int64) {
		t.Helper()
		if err := rawDB(t, path).QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, f := range []string{"usage", "gpu", "container"} {
		if got := count(f + "_chunk"); got != 2 {
			t.Errorf("%s_chunk: %d rows, want 2 (08:00 and 09:00)", f, got)
		}
		if got := count(f + "_minute"); got != 30 {
			t.Errorf("%s_minute: %d rows, want 30 (10:00 to 10:29)", f, got)
		}
	}
	used := func() float64 {
		t.Helper()
		got, err := s.Usage(ctx, ledger.Filter{From: t0.Add(5 * time.Minute), To: t0.Add(2*time.Hour + 10*time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, u := range got {
			sum += u.UsedSeconds
		}
		return sum
	}
	var want float64
	for m := 5; m < 130; m++ {
		want += float64(m%7) + 0.5
	}
	if got := used(); got != want {
		t.Fatalf("used seconds 08:05–10:10 = %v, want %v", got, want)
	}
	// A late row for 08:10, a minute the chunk holds: merged at once.
	if err := s.Write(ctx, batch(10)); err != nil {
		t.Fatal(err)
	}
	want += float64(10%7) + 0.5
	if got := used(); got != want {
		t.Errorf("after a late row, used seconds = %v, want %v", got, want)
	}
	if got := count("usage_minute"); got != 30 {
		t.Errorf("after a late row, usage_minute holds %d rows, want 30", got)
	}
	if err := s.Write(ctx, batch(180)); err != nil { // 11:00
		t.Fatal(err)
	}
	if got := used(); got != want {
		t.Errorf("after the next hour's batch, used seconds = %v, want %v", got, want)
	}
	if got := count("usage_minute"); got != 1 {
		t.Errorf("after the next hour's batch, usage_minute holds %d rows, want 1", got)
	}
	if got := count("usage_chunk"); got != 3 {
		t.Errorf("after the next hour's batch, usage_chunk holds %d rows, want 3", got)
	}
}
