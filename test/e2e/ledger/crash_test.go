package ledger

// End-to-end tests of the ledger under the real binary: killed while it
// writes, and held off by another process that locks the SQLite file.

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// reportJSON runs `gpumeter report --format json` over the last hour.
func reportJSON(t *testing.T, db, by string) report.Report {
	t.Helper()
	return reportOf(t, by, "--db", db)
}

// reportOf runs `gpumeter report --format json` over the last hour of the
// ledger that where names (--db FILE or --dsn DSN).
func reportOf(t *testing.T, by string, where ...string) report.Report {
	t.Helper()
	out, stderr, code := harness.RunCLI(t, nil, append([]string{"report", "--since", "1h", "--by", by, "--format", "json"}, where...)...)
	if code != 0 {
		t.Fatalf("report exited %d: %s", code, stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report --format json: %v\n%s", err, out)
	}
	return rep
}

// checkLedgerFile checks the SQLite file itself: SQLite finds it sound,
// and every batch left it whole. A batch writes a minute's GPU totals, its
// owners' usage and both hour rollups in one transaction, so a torn batch
// shows as minute rows that disagree with their hour or with each other; a
// minute counted twice shows as more than 60 GPU-seconds in it.
func checkLedgerFile(t *testing.T, path string) {
	t.Helper()
	db := harness.OpenSQLite(t, path)
	var ok string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&ok); err != nil {
		t.Fatal(err)
	}
	if ok != "ok" {
		t.Errorf("PRAGMA integrity_check = %q, want ok", ok)
	}
	queries := []struct {
		what, query string
	}{
		{"GPU minutes with more than 60 s metered",
			`SELECT count(*) FROM gpu_minute WHERE seconds_us > 60000000 + 1000`},
		{"GPU minutes whose owners' allocated time differs from the GPU's",
			`SELECT count(*) FROM gpu_minute g
			 WHERE abs(g.allocated_us - coalesce((SELECT sum(u.allocated_us) FROM usage_minute u
			   WHERE u.start = g.start AND u.gpu_id = g.gpu_id), 0)) > 1000`},
		{"owner minutes without their GPU minute",
			`SELECT count(*) FROM usage_minute u
			 WHERE NOT EXISTS (SELECT 1 FROM gpu_minute g WHERE g.start = u.start AND g.gpu_id = u.gpu_id)`},
		{"GPU hours that differ from the sum of their minutes",
			`SELECT count(*) FROM gpu_hour h WHERE h.seconds_us <> (SELECT coalesce(sum(m.seconds_us), 0)
			 FROM gpu_minute m WHERE m.gpu_id = h.gpu_id AND m.start >= h.start AND m.start < h.start + 3600)
			 OR h.allocated_us <> (SELECT coalesce(sum(m.allocated_us), 0)
			 FROM gpu_minute m WHERE m.gpu_id = h.gpu_id AND m.start >= h.start AND m.start < h.start + 3600)`},
		{"owner hours that differ from the sum of their minutes",
			`SELECT count(*) FROM usage_hour h WHERE h.allocated_us <> (SELECT coalesce(sum(m.allocated_us), 0)
			 FROM usage_minute m WHERE m.gpu_id = h.gpu_id AND m.owner_id = h.owner_id
			 AND m.start >= h.start AND m.start < h.start + 3600)`},
		{"GPU minutes without their hour",
			`SELECT count(*) FROM gpu_minute m WHERE NOT EXISTS (SELECT 1 FROM gpu_hour h
			 WHERE h.gpu_id = m.gpu_id AND h.start = m.start - m.start % 3600)`},
	}
	for _, q := range queries {
		var n int
		if err := db.QueryRow(q.query).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q.what, err)
		}
		if n != 0 {
			t.Errorf("ledger has %d %s", n, q.what)
		}
	}
}

// lockLedger takes SQLite's write lock on the ledger from a connection of
// its own, as a second writer or an open sqlite3 shell would: BEGIN
// EXCLUSIVE in WAL mode keeps writers out and lets readers in. It returns
// the function that lets go, which may be called more than once.
func lockLedger(t *testing.T, path string) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := harness.OpenSQLite(t, path).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
				t.Error(err)
			}
			conn.Close()
		})
	}
}

// maxCrashLoss is the most a SIGKILL may cost the ledger: the rows of one
// flush interval, plus the samples on either side of it.
var maxCrashLoss = (harness.FlushInterval + 2*harness.SampleInterval).Seconds()

// overBooked is how far the ledger may run ahead of the last scrape before
// the agent ended: the samples taken between that scrape and the signal.
// Counting a flush twice would put it a whole flush interval ahead.
var overBooked = (2*harness.SampleInterval + 50*time.Millisecond).Seconds()

// killScrape scrapes the agent and kills it at once. It returns the scrape
// and how long after due the kill came: a flush due then that has not
// committed by the kill (a slow write, or one waiting for a lock) loses
// that much more.
func killScrape(t *testing.T, a *harness.Agent, due time.Time) (harness.Metrics, time.Duration) {
	t.Helper()
	m := a.Scrape(t)
	late := max(0, time.Since(due))
	a.Kill(t)
	return m, late
}

// nextFlushStart estimates when the flush after the one m shows begins.
func nextFlushStart(m harness.Metrics) time.Time {
	ended := m.Sum("gpumeter_ledger_last_flush_timestamp_seconds")
	took := m.Sum("gpumeter_ledger_write_duration_seconds")
	return time.Unix(0, int64((ended-took)*1e9)).Add(harness.FlushInterval)
}

// TestServeKilledWhileWriting kills the real agent with SIGKILL at
// different moments of its flush cycle, restarts it on the same ledger
// each time, and checks after every kill that the ledger lost at most one
// flush interval of what the agent had metered, never booked anything
// twice, and stayed a sound SQLite file whose minutes and hours agree.
func TestServeKilledWhileWriting(t *testing.T) {
	dir := t.TempDir()
	scenario := harness.WriteText(t, filepath.Join(dir, "solo.yaml"), harness.SoloScenario)
	data := filepath.Join(dir, "data")
	db := filepath.Join(data, "ledger.db")
	args := []string{"--sim", scenario, "--interval", harness.SampleInterval.String(), "--ledger-flush-interval", harness.FlushInterval.String()}
	metered := "gpumeter_gpu_metered_seconds_total"

	// Each kill returns what killScrape does.
	kills := []struct {
		name string
		kill func(t *testing.T, a *harness.Agent) (harness.Metrics, time.Duration)
	}{
		{"right after a flush committed", func(t *testing.T, a *harness.Agent) (harness.Metrics, time.Duration) {
			a.NextFlush(t)
			m := a.NextFlush(t)
			a.Kill(t)
			return m, 0
		}},
		{"just before a flush is due", func(t *testing.T, a *harness.Agent) (harness.Metrics, time.Duration) {
			a.NextFlush(t)
			due := nextFlushStart(a.NextFlush(t))
			time.Sleep(time.Until(due.Add(-3 * harness.SampleInterval / 4)))
			return killScrape(t, a, due)
		}},
		{"when a flush is due, aimed at its write", func(t *testing.T, a *harness.Agent) (harness.Metrics, time.Duration) {
			a.NextFlush(t)
			m := a.NextFlush(t)
			due := nextFlushStart(m)
			took := time.Duration(m.Sum("gpumeter_ledger_write_duration_seconds") * 1e9)
			begin := time.Now()
			a.Scrape(t)
			scrape := time.Since(begin)
			time.Sleep(time.Until(due.Add(took/2 - scrape)))
			return killScrape(t, a, due)
		}},
		{"while a flush waits for the write lock", func(t *testing.T, a *harness.Agent) (harness.Metrics, time.Duration) {
			a.NextFlush(t)
			due := nextFlushStart(a.NextFlush(t))
			time.Sleep(time.Until(due.Add(-harness.SampleInterval)))
			unlock := lockLedger(t, db)
			defer unlock()
			time.Sleep(time.Until(due.Add(harness.SampleInterval)))
			return killScrape(t, a, due)
		}},
	}

	var truth, booked float64 // seconds the agent metered and the ledger holds
	var allowed float64       // seconds the ledger may have lost
	for _, k := range kills {
		a := harness.Launch(t, data, args...)
		m, late := k.kill(t, a)
		run := m.Sum(metered)
		rep := reportJSON(t, db, report.ByContainer)
		got := rep.Totals.GPUHoursAllocated * 3600
		lost := run - (got - booked)
		t.Logf("killed %s: metered %.3f s, ledger gained %.3f s, lost %.3f s", k.name, run, got-booked, lost)
		if most := maxCrashLoss + late.Seconds(); lost > most {
			t.Errorf("killed %s: ledger lost %.3f s of the %.3f s metered, want at most %.3f s (one flush interval, two samples and the %s the due flush was under way)", k.name, lost, run, most, late)
		}
		allowed += late.Seconds()
		if lost < -overBooked {
			t.Errorf("killed %s: ledger gained %.3f s, more than the %.3f s metered: something was booked twice", k.name, got-booked, run)
		}
		checkLedgerFile(t, db)
		if t.Failed() {
			t.FailNow()
		}
		truth += run
		booked = got
	}

	// A last run ends with SIGTERM, whose final flush loses nothing.
	a := harness.Launch(t, data, args...)
	a.NextFlush(t)
	run := a.NextTicks(t, int(time.Second/harness.SampleInterval)).Sum(metered) // a second of samples after the flush
	a.Stop(t)
	truth += run
	checkLedgerFile(t, db)

	rep := reportJSON(t, db, report.ByContainer)
	got := rep.Totals.GPUHoursAllocated * 3600
	if d := got - booked - run; d < -0.001 || d > overBooked {
		t.Errorf("after SIGTERM the ledger gained %.3f s for the %.3f s the last run metered; want all of it and at most %.3f s more", got-booked, run, overBooked)
	}
	n := float64(len(kills))
	allowed += n * maxCrashLoss
	if got < truth-allowed || got > truth+(n+1)*overBooked {
		t.Errorf("ledger holds %.3f allocated GPU-seconds over %d runs that metered %.3f s; want within [-%.3f, +%.3f] of it",
			got, len(kills)+1, truth, allowed, (n+1)*overBooked)
	}
	t.Logf("%d runs metered %.3f s, the ledger holds %.3f s", len(kills)+1, truth, got)

	// The report is the scenario's truth: one container that holds GPU 0
	// alone and uses half of it.
	if len(rep.Rows) != 1 || rep.Rows[0].Key != "solo" || rep.Rows[0].Containers != 1 {
		t.Fatalf("report rows = %+v, want one row for container solo", rep.Rows)
	}
	row := rep.Rows[0]
	if !harness.CloseTo(row.GPUHoursUsed, row.GPUHoursAllocated/2, 1e-3) {
		t.Errorf("solo used %.9f GPU-hours of %.9f allocated, want half", row.GPUHoursUsed, row.GPUHoursAllocated)
	}
	if rep.Host.GPUs != 1 || !harness.CloseTo(rep.Host.GPUHours, rep.Totals.GPUHoursAllocated+rep.Idle.GPUHours, 1e-9) {
		t.Errorf("host %d GPUs, %.9f GPU-hours; want 1 GPU and allocated %.9f + idle %.9f", rep.Host.GPUs, rep.Host.GPUHours, rep.Totals.GPUHoursAllocated, rep.Idle.GPUHours)
	}
	if rep.Idle.GPUHours*3600 > 0.001 {
		t.Errorf("idle pool %.6f GPU-hours, want none: solo holds the only GPU", rep.Idle.GPUHours)
	}
}

// TestServeLedgerLocked takes SQLite's write lock on the agent's ledger
// from another connection, as a second writer or an open sqlite3 shell
// would, for longer than the agent's busy timeout. The agent must keep
// sampling and serving /metrics meanwhile, say in its metrics and its log
// that the ledger is down, keep the unwritten rows, and write them all
// once the lock is gone.
func TestServeLedgerLocked(t *testing.T) {
	dir := t.TempDir()
	scenario := harness.WriteText(t, filepath.Join(dir, "solo.yaml"), harness.SoloScenario)
	data := filepath.Join(dir, "data")
	path := filepath.Join(data, "ledger.db")
	a := harness.Launch(t, data, "--sim", scenario, "--interval", harness.SampleInterval.String(), "--ledger-flush-interval", harness.FlushInterval.String())

	m := a.NextFlush(t)
	if m.Sum("gpumeter_ledger_up") != 1 || m.Sum("gpumeter_ledger_flush_errors_total") != 0 {
		t.Fatalf("before the lock: ledger_up %g, flush errors %g; want 1 and 0", m.Sum("gpumeter_ledger_up"), m.Sum("gpumeter_ledger_flush_errors_total"))
	}
	// Rows are per minute: what one minute of this scenario holds.
	perMinute := math.Inf(1)
	for range 5 {
		if n := a.NextTicks(t, 1).Sum("gpumeter_ledger_pending_rows"); n > 0 {
			perMinute = min(perMinute, n)
		}
	}
	if math.IsInf(perMinute, 1) {
		t.Fatal("no rows pending between flushes")
	}

	release := lockLedger(t, path)
	locked := time.Now()
	defer release()

	before := a.Scrape(t)
	// A flush waits out the ledger's busy timeout (10 s) before it fails.
	var scraped time.Time
	harness.WaitFor(t, 20*time.Second, "a failed ledger write", func() bool {
		begin := time.Now()
		scraped = begin
		m = a.Scrape(t)
		// A scrape that waited on the ledger would wait out its busy
		// timeout (10 s): half of it tells the two apart on a machine
		// of any speed, where a figure of a quiet one would not.
		if took := time.Since(begin); took > 5*time.Second {
			t.Errorf("a scrape took %s while the ledger was locked; scrapes must not wait on the ledger", took)
		}
		return m.Sum("gpumeter_ledger_flush_errors_total") > 0
	})
	t.Logf("the first write failed %s after the lock was taken", time.Since(locked).Round(time.Millisecond))
	// The recorder retries at once, and that write waits on the lock in
	// turn; let samples arrive behind it.
	down := a.NextTicks(t, 2)
	if got := down.Sum("gpumeter_ledger_up"); got != 0 {
		t.Errorf("gpumeter_ledger_up = %g while the ledger is locked, want 0", got)
	}
	if was, got := before.Sum("gpumeter_ticks_total"), down.Sum("gpumeter_ticks_total"); got <= was+float64(5*time.Second/harness.SampleInterval) {
		t.Errorf("gpumeter_ticks_total went from %g to %g while a write waited on the lock; sampling must go on", was, got)
	}
	if was, got := before.Sum("gpumeter_gpu_metered_seconds_total"), down.Sum("gpumeter_gpu_metered_seconds_total"); !down.Has("DCGM_FI_DEV_GPU_UTIL") || got < was+5 {
		t.Errorf("while the ledger is locked the scrape shows DCGM_FI_DEV_GPU_UTIL %v and metered seconds going from %g to %g; want the GPU series and metering to go on", down.Has("DCGM_FI_DEV_GPU_UTIL"), was, got)
	}
	// Nothing is written, so everything since the last good write is
	// pending: the batch being retried, with every minute since the lock
	// that a sample before the failure fell in, and the current minute's
	// rows that arrived behind it.
	last := scraped.Add(-2 * harness.SampleInterval)
	minutes := float64(last.Truncate(time.Minute).Sub(locked.Truncate(time.Minute))/time.Minute + 1)
	if got, want := down.Sum("gpumeter_ledger_pending_rows"), perMinute*(minutes+1); got < want {
		t.Errorf("gpumeter_ledger_pending_rows = %g while the ledger is locked, want at least %g (%g rows a minute, %g minutes and the rows behind the retry)", got, want, perMinute, minutes)
	}
	if got := down.Sum("gpumeter_ledger_dropped_rows_total"); got != 0 {
		t.Errorf("gpumeter_ledger_dropped_rows_total = %g, want 0", got)
	}
	// Reports read the ledger as it was: readers do not wait on the lock.
	resp, err := harness.GetAs(a.URL+"/api/v1/usage?since=1h", harness.AdminToken())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/v1/usage while the ledger is locked: %s, want 200", resp.Status)
	}

	release()
	harness.WaitFor(t, 5*time.Second, "the ledger to come back", func() bool {
		m = a.Scrape(t)
		return m.Sum("gpumeter_ledger_up") == 1
	})
	// What is pending now arrived since the write that succeeded: a
	// minute's rows, two where a minute began meanwhile.
	if got, was := m.Sum("gpumeter_ledger_pending_rows"), down.Sum("gpumeter_ledger_pending_rows"); got > 2*perMinute {
		t.Errorf("gpumeter_ledger_pending_rows = %g after the ledger came back (was %g, %g a minute), want the backlog written", got, was, perMinute)
	}
	if m.Sum("gpumeter_ledger_flushes_total") <= down.Sum("gpumeter_ledger_flushes_total") {
		t.Errorf("no flush succeeded after the lock was released")
	}

	truth := a.NextFlush(t).Sum("gpumeter_gpu_metered_seconds_total")
	a.Stop(t)
	log := a.Stderr.String()
	for _, want := range []string{"ledger write failed; keeping rows in memory and sending them again", "database is locked", "ledger write recovered"} {
		if !strings.Contains(log, want) {
			t.Errorf("the agent's log does not say %q:\n%s", want, log)
		}
	}
	if n := strings.Count(log, "ledger write failed"); n != 1 {
		t.Errorf("the log says %d times that the write failed, want once per outage:\n%s", n, log)
	}

	// No gap: what was metered while the ledger was locked is in it.
	rep := reportJSON(t, path, report.ByUser)
	got := rep.Totals.GPUHoursAllocated * 3600
	if got < truth-0.001 || got > truth+overBooked {
		t.Errorf("ledger holds %.3f allocated GPU-seconds, the agent metered %.3f s; want all of it", got, truth)
	}
	checkLedgerFile(t, path)
}
