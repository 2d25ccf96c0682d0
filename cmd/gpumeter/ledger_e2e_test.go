package main

// End-to-end tests of the ledger under the real binary: killed while it
// writes, and held off by another process that locks the SQLite file.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/gpumeter/gpumeter/internal/report"
)

// soloScenario is one container alone on GPU 0 at 50 % for a day: every
// metered GPU-second is allocated to it, half of it used.
const soloScenario = `version: 1
node: crash-1
duration: 24h
gpus:
  - count: 1
    model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    idle_power: 100W
    max_power: 500W
containers:
  - name: solo
    image: pytorch/pytorch:2.4.0-cuda12.1
    labels: {gpumeter.user: alice, gpumeter.team: nlp}
    gpus: [0]
    phases:
      - at: 0s
        util: 50
        memory: 10GiB
`

func writeText(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// lockedBuffer is a bytes.Buffer that the process's output copier and
// the test may use at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// agentRun is a `gpumeter serve` that the test ends itself, by SIGKILL or
// SIGTERM, and that keeps its ledger in a directory the test chooses.
type agentRun struct {
	URL    string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{}
	err    error // valid once done is closed
}

// launch runs `gpumeter serve args...` with GPUMETER_DATA_DIR=dataDir on a
// free loopback port and waits for its first sample. A run the test did
// not end is killed when the test ends.
func launch(t *testing.T, dataDir string, args ...string) *agentRun {
	t.Helper()
	args = append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "GPUMETER_DATA_DIR="+dataDir, adminEnv())
	pr, pw := io.Pipe()
	a := &agentRun{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = io.MultiWriter(pw, a.stderr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		a.err = cmd.Wait()
		pw.Close()
		close(a.done)
	}()
	t.Cleanup(func() {
		select {
		case <-a.done:
		default:
			_ = cmd.Process.Kill()
			<-a.done
		}
		if t.Failed() {
			t.Logf("serve %s stderr:\n%s", strings.Join(args, " "), a.stderr)
		}
	})
	a.URL = awaitServing(t, pr, a.done, a.stderr)
	return a
}

// kill ends the agent with SIGKILL: no final flush, no cleanup.
func (a *agentRun) kill(t *testing.T) {
	t.Helper()
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done
}

// stop ends the agent with SIGTERM and wants a clean exit.
func (a *agentRun) stop(t *testing.T) {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("serve did not stop within 15s of SIGTERM; stderr:\n%s", a.stderr)
	}
	if a.err != nil {
		t.Fatalf("serve exited with %v after SIGTERM; stderr:\n%s", a.err, a.stderr)
	}
}

// scrape reads the agent's /metrics.
func (a *agentRun) scrape(t *testing.T) metrics {
	t.Helper()
	return metrics(series(get(t, a.URL+"/metrics")))
}

// metrics is a parsed scrape: name{labels} -> value.
type metrics map[string]float64

// sum adds up every series of the metric name, whatever its labels.
func (m metrics) sum(name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// has reports whether the scrape holds a series of the metric name.
func (m metrics) has(name string) bool {
	for k := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			return true
		}
	}
	return false
}

// reportJSON runs `gpumeter report --format json` over the last hour.
func reportJSON(t *testing.T, db, by string) report.Report {
	t.Helper()
	return reportOf(t, by, "--db", db)
}

// reportOf runs `gpumeter report --format json` over the last hour of the
// ledger that where names (--db FILE or --dsn DSN).
func reportOf(t *testing.T, by string, where ...string) report.Report {
	t.Helper()
	out, stderr, code := runCLI(t, nil, append([]string{"report", "--since", "1h", "--by", by, "--format", "json"}, where...)...)
	if code != 0 {
		t.Fatalf("report exited %d: %s", code, stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report --format json: %v\n%s", err, out)
	}
	return rep
}

// openSQLite opens a SQLite file for the test's own queries.
func openSQLite(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// checkLedgerFile checks the SQLite file itself: SQLite finds it sound,
// and every batch left it whole. A batch writes a minute's GPU totals, its
// owners' usage and both hour rollups in one transaction, so a torn batch
// shows as minute rows that disagree with their hour or with each other; a
// minute counted twice shows as more than 60 GPU-seconds in it.
func checkLedgerFile(t *testing.T, path string) {
	t.Helper()
	db := openSQLite(t, path)
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
	conn, err := openSQLite(t, path).Conn(ctx)
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

const (
	flushInterval  = time.Second
	sampleInterval = 100 * time.Millisecond
)

// maxCrashLoss is the most a SIGKILL may cost the ledger: the rows of one
// flush interval, plus the samples on either side of it.
var maxCrashLoss = (flushInterval + 2*sampleInterval).Seconds()

// overBooked is how far the ledger may run ahead of the last scrape before
// the agent ended: the samples taken between that scrape and the signal.
// Counting a flush twice would put it a whole flush interval ahead.
var overBooked = (2*sampleInterval + 50*time.Millisecond).Seconds()

// nextFlush waits for the agent to finish a flush and returns the scrape
// that shows it; the next flush starts one interval after this one began.
func nextFlush(t *testing.T, a *agentRun) metrics {
	t.Helper()
	before := a.scrape(t).sum("gpumeter_ledger_flushes_total")
	var m metrics
	waitFor(t, 5*time.Second, "a ledger flush", func() bool {
		m = a.scrape(t)
		return m.sum("gpumeter_ledger_flushes_total") > before
	})
	return m
}

// killScrape scrapes the agent and kills it at once. It returns the scrape
// and how long after due the kill came: a flush due then that has not
// committed by the kill (a slow write, or one waiting for a lock) loses
// that much more.
func killScrape(t *testing.T, a *agentRun, due time.Time) (metrics, time.Duration) {
	t.Helper()
	m := a.scrape(t)
	late := max(0, time.Since(due))
	a.kill(t)
	return m, late
}

// nextFlushStart estimates when the flush after the one m shows begins.
func nextFlushStart(m metrics) time.Time {
	ended := m.sum("gpumeter_ledger_last_flush_timestamp_seconds")
	took := m.sum("gpumeter_ledger_write_duration_seconds")
	return time.Unix(0, int64((ended-took)*1e9)).Add(flushInterval)
}

// TestServeKilledWhileWriting kills the real agent with SIGKILL at
// different moments of its flush cycle, restarts it on the same ledger
// each time, and checks after every kill that the ledger lost at most one
// flush interval of what the agent had metered, never booked anything
// twice, and stayed a sound SQLite file whose minutes and hours agree.
func TestServeKilledWhileWriting(t *testing.T) {
	dir := t.TempDir()
	scenario := writeText(t, filepath.Join(dir, "solo.yaml"), soloScenario)
	data := filepath.Join(dir, "data")
	db := filepath.Join(data, "ledger.db")
	args := []string{"--sim", scenario, "--interval", sampleInterval.String(), "--ledger-flush-interval", flushInterval.String()}
	metered := "gpumeter_gpu_metered_seconds_total"

	// Each kill returns what killScrape does.
	kills := []struct {
		name string
		kill func(t *testing.T, a *agentRun) (metrics, time.Duration)
	}{
		{"right after a flush committed", func(t *testing.T, a *agentRun) (metrics, time.Duration) {
			nextFlush(t, a)
			m := nextFlush(t, a)
			a.kill(t)
			return m, 0
		}},
		{"just before a flush is due", func(t *testing.T, a *agentRun) (metrics, time.Duration) {
			nextFlush(t, a)
			due := nextFlushStart(nextFlush(t, a))
			time.Sleep(time.Until(due.Add(-3 * sampleInterval / 4)))
			return killScrape(t, a, due)
		}},
		{"when a flush is due, aimed at its write", func(t *testing.T, a *agentRun) (metrics, time.Duration) {
			nextFlush(t, a)
			m := nextFlush(t, a)
			due := nextFlushStart(m)
			took := time.Duration(m.sum("gpumeter_ledger_write_duration_seconds") * 1e9)
			begin := time.Now()
			a.scrape(t)
			scrape := time.Since(begin)
			time.Sleep(time.Until(due.Add(took/2 - scrape)))
			return killScrape(t, a, due)
		}},
		{"while a flush waits for the write lock", func(t *testing.T, a *agentRun) (metrics, time.Duration) {
			nextFlush(t, a)
			due := nextFlushStart(nextFlush(t, a))
			time.Sleep(time.Until(due.Add(-sampleInterval)))
			unlock := lockLedger(t, db)
			defer unlock()
			time.Sleep(time.Until(due.Add(sampleInterval)))
			return killScrape(t, a, due)
		}},
	}

	var truth, booked float64 // seconds the agent metered and the ledger holds
	var allowed float64       // seconds the ledger may have lost
	for _, k := range kills {
		a := launch(t, data, args...)
		m, late := k.kill(t, a)
		run := m.sum(metered)
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
	a := launch(t, data, args...)
	nextFlush(t, a)
	time.Sleep(time.Second)
	run := a.scrape(t).sum(metered)
	a.stop(t)
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
	if !closeTo(row.GPUHoursUsed, row.GPUHoursAllocated/2, 1e-3) {
		t.Errorf("solo used %.9f GPU-hours of %.9f allocated, want half", row.GPUHoursUsed, row.GPUHoursAllocated)
	}
	if rep.Host.GPUs != 1 || !closeTo(rep.Host.GPUHours, rep.Totals.GPUHoursAllocated+rep.Idle.GPUHours, 1e-9) {
		t.Errorf("host %d GPUs, %.9f GPU-hours; want 1 GPU and allocated %.9f + idle %.9f", rep.Host.GPUs, rep.Host.GPUHours, rep.Totals.GPUHoursAllocated, rep.Idle.GPUHours)
	}
	if rep.Idle.GPUHours*3600 > 0.001 {
		t.Errorf("idle pool %.6f GPU-hours, want none: solo holds the only GPU", rep.Idle.GPUHours)
	}
}

// closeTo reports whether got is within rel (relative) or 1e-9 of want.
func closeTo(got, want, rel float64) bool {
	d := math.Abs(got - want)
	return d <= 1e-9 || d <= rel*math.Abs(want)
}

// TestServeLedgerLocked takes SQLite's write lock on the agent's ledger
// from another connection, as a second writer or an open sqlite3 shell
// would, for longer than the agent's busy timeout. The agent must keep
// sampling and serving /metrics meanwhile, say in its metrics and its log
// that the ledger is down, keep the unwritten rows, and write them all
// once the lock is gone.
func TestServeLedgerLocked(t *testing.T) {
	dir := t.TempDir()
	scenario := writeText(t, filepath.Join(dir, "solo.yaml"), soloScenario)
	data := filepath.Join(dir, "data")
	path := filepath.Join(data, "ledger.db")
	a := launch(t, data, "--sim", scenario, "--interval", sampleInterval.String(), "--ledger-flush-interval", flushInterval.String())

	m := nextFlush(t, a)
	if m.sum("gpumeter_ledger_up") != 1 || m.sum("gpumeter_ledger_flush_errors_total") != 0 {
		t.Fatalf("before the lock: ledger_up %g, flush errors %g; want 1 and 0", m.sum("gpumeter_ledger_up"), m.sum("gpumeter_ledger_flush_errors_total"))
	}
	// Rows are per minute: what one minute of this scenario holds.
	perMinute := math.Inf(1)
	for range 5 {
		time.Sleep(sampleInterval)
		if n := a.scrape(t).sum("gpumeter_ledger_pending_rows"); n > 0 {
			perMinute = min(perMinute, n)
		}
	}
	if math.IsInf(perMinute, 1) {
		t.Fatal("no rows pending between flushes")
	}

	release := lockLedger(t, path)
	locked := time.Now()
	defer release()

	before := a.scrape(t)
	// A flush waits out the ledger's busy timeout (10 s) before it fails.
	var scraped time.Time
	waitFor(t, 20*time.Second, "a failed ledger write", func() bool {
		begin := time.Now()
		scraped = begin
		m = a.scrape(t)
		if took := time.Since(begin); took > time.Second {
			t.Errorf("a scrape took %s while the ledger was locked; scrapes must not wait on the ledger", took)
		}
		return m.sum("gpumeter_ledger_flush_errors_total") > 0
	})
	t.Logf("the first write failed %s after the lock was taken", time.Since(locked).Round(time.Millisecond))
	// The recorder retries at once, and that write waits on the lock in
	// turn; let samples arrive behind it.
	time.Sleep(2 * sampleInterval)
	down := a.scrape(t)
	if got := down.sum("gpumeter_ledger_up"); got != 0 {
		t.Errorf("gpumeter_ledger_up = %g while the ledger is locked, want 0", got)
	}
	if was, got := before.sum("gpumeter_ticks_total"), down.sum("gpumeter_ticks_total"); got <= was+float64(5*time.Second/sampleInterval) {
		t.Errorf("gpumeter_ticks_total went from %g to %g while a write waited on the lock; sampling must go on", was, got)
	}
	if was, got := before.sum("gpumeter_gpu_metered_seconds_total"), down.sum("gpumeter_gpu_metered_seconds_total"); !down.has("DCGM_FI_DEV_GPU_UTIL") || got < was+5 {
		t.Errorf("while the ledger is locked the scrape shows DCGM_FI_DEV_GPU_UTIL %v and metered seconds going from %g to %g; want the GPU series and metering to go on", down.has("DCGM_FI_DEV_GPU_UTIL"), was, got)
	}
	// Nothing is written, so everything since the last good write is
	// pending: the batch being retried, with every minute since the lock
	// that a sample before the failure fell in, and the current minute's
	// rows that arrived behind it.
	last := scraped.Add(-2 * sampleInterval)
	minutes := float64(last.Truncate(time.Minute).Sub(locked.Truncate(time.Minute))/time.Minute + 1)
	if got, want := down.sum("gpumeter_ledger_pending_rows"), perMinute*(minutes+1); got < want {
		t.Errorf("gpumeter_ledger_pending_rows = %g while the ledger is locked, want at least %g (%g rows a minute, %g minutes and the rows behind the retry)", got, want, perMinute, minutes)
	}
	if got := down.sum("gpumeter_ledger_dropped_rows_total"); got != 0 {
		t.Errorf("gpumeter_ledger_dropped_rows_total = %g, want 0", got)
	}
	// Reports read the ledger as it was: readers do not wait on the lock.
	resp, err := getAs(a.URL+"/api/v1/usage?since=1h", adminToken)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/v1/usage while the ledger is locked: %s, want 200", resp.Status)
	}

	release()
	waitFor(t, 5*time.Second, "the ledger to come back", func() bool {
		m = a.scrape(t)
		return m.sum("gpumeter_ledger_up") == 1
	})
	// What is pending now arrived since the write that succeeded: a
	// minute's rows, two where a minute began meanwhile.
	if got, was := m.sum("gpumeter_ledger_pending_rows"), down.sum("gpumeter_ledger_pending_rows"); got > 2*perMinute {
		t.Errorf("gpumeter_ledger_pending_rows = %g after the ledger came back (was %g, %g a minute), want the backlog written", got, was, perMinute)
	}
	if m.sum("gpumeter_ledger_flushes_total") <= down.sum("gpumeter_ledger_flushes_total") {
		t.Errorf("no flush succeeded after the lock was released")
	}

	time.Sleep(flushInterval)
	truth := a.scrape(t).sum("gpumeter_gpu_metered_seconds_total")
	a.stop(t)
	log := a.stderr.String()
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
