package ledger

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestServeSecondAgentOnOneDataDir starts a second agent on the data
// directory of a running one, with the socket (which would have stopped
// it) turned off: the ledger's lock refuses it before it writes anything,
// naming the first; the first goes on writing.
func TestServeSecondAgentOnOneDataDir(t *testing.T) {
	dir := t.TempDir()
	scenario := harness.WriteText(t, filepath.Join(dir, "solo.yaml"), harness.SoloScenario)
	data := filepath.Join(dir, "data")
	args := []string{"--sim", scenario, "--interval", harness.SampleInterval.String(), "--ledger-flush-interval", harness.FlushInterval.String(), "--api-socket", "none"}
	first := harness.Launch(t, data, args...)
	first.NextFlush(t)

	_, stderr, code := harness.RunCLI(t, []string{"GPUMETER_DATA_DIR=" + data},
		append([]string{"serve", "--listen", "127.0.0.1:0", "--hostname", "other-node"}, args...)...)
	if code == 0 || strings.Contains(stderr, "serving on") {
		t.Fatalf("second agent exited %d, stderr:\n%s\nwant a refusal before it serves", code, stderr)
	}
	want := fmt.Sprintf(`is written by another agent (node "crash-1", pid %d on `, first.Cmd.Process.Pid)
	if !strings.Contains(stderr, want) || !strings.Contains(stderr, "stop it") {
		t.Errorf("second agent says:\n%s\nwant it to name the first (%q) and what to do", stderr, want)
	}
	// Readers take no lock: they read while the agent writes.
	db := filepath.Join(data, "ledger.db")
	for _, args := range [][]string{{"report", "--db", db, "--since", "1h"}, {"waste", "--db", db, "--since", "1h"}} {
		if out, stderr, code := harness.RunCLI(t, nil, args...); code != 0 || out == "" {
			t.Errorf("%s while the agent writes: exit %d, stderr %s", strings.Join(args, " "), code, stderr)
		}
	}
	before := first.NextFlush(t).Sum("gpumeter_ledger_flushes_total")
	m := first.NextFlush(t)
	if m.Sum("gpumeter_ledger_flushes_total") <= before || m.Sum("gpumeter_ledger_up") != 1 {
		t.Errorf("the first agent stopped writing after the refusal")
	}
	first.Stop(t)
	// With the first gone, the next one starts at once.
	harness.Launch(t, data, args...).Stop(t)
}

// TestServeSameNodeOnePostgres starts two agents with one node name on one
// PostgreSQL ledger: the second is refused while the first lives, and
// starts at once after the first stopped cleanly (it released its lease).
func TestServeSameNodeOnePostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	scenario := harness.WriteText(t, filepath.Join(dir, "solo.yaml"), harness.SoloScenario)
	args := []string{"--sim", scenario, "--interval", harness.SampleInterval.String(), "--ledger-flush-interval", harness.FlushInterval.String(),
		"--ledger-dsn", dsn, "--hostname", "gpu1"}
	first := harness.Launch(t, filepath.Join(dir, "a"), args...)
	first.NextFlush(t)

	_, stderr, code := harness.RunCLI(t, []string{"GPUMETER_DATA_DIR=" + filepath.Join(dir, "b")},
		append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	want := fmt.Sprintf(`node "gpu1" is written by another agent (pid %d on `, first.Cmd.Process.Pid)
	if code == 0 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "give this one another --hostname") {
		t.Fatalf("second agent exited %d, stderr:\n%s\nwant a refusal naming the first (%q)", code, stderr, want)
	}
	first.Stop(t)
	harness.Launch(t, filepath.Join(dir, "b"), args...).Stop(t)
}

// TestServeLostCommitReply puts a TCP proxy between the agent and a real
// PostgreSQL that forwards one batch's COMMIT and cuts the connection
// before the reply: the batch is in, the agent hears an error and sends
// it again. The ledger must hold what the agent metered, once.
func TestServeLostCommitReply(t *testing.T) {
	dsn := pgtest.DSN(t)
	proxy, via := pgtest.NewProxy(t, dsn)
	dir := t.TempDir()
	scenario := harness.WriteText(t, filepath.Join(dir, "solo.yaml"), harness.SoloScenario)
	a := harness.Launch(t, filepath.Join(dir, "data"), "--sim", scenario, "--interval", harness.SampleInterval.String(),
		"--ledger-flush-interval", harness.FlushInterval.String(), "--ledger-dsn", via)
	a.NextFlush(t)
	a.NextFlush(t)
	commits, _ := proxy.Counts()
	proxy.DropNextCommits(1)
	harness.WaitFor(t, 10*time.Second, "a flush whose COMMIT reply was cut", func() bool {
		return a.Scrape(t).Sum("gpumeter_ledger_flush_errors_total") >= 1
	})
	if after, dropped := proxy.Counts(); dropped != 1 || after <= commits {
		t.Fatalf("proxy forwarded %d COMMITs and cut %d replies; want one cut", after-commits, dropped)
	}
	a.NextFlush(t)
	a.NextFlush(t)
	metered := a.Scrape(t).Sum("gpumeter_gpu_metered_seconds_total")
	a.Stop(t)

	rep := reportOf(t, report.ByContainer, "--dsn", dsn)
	got := rep.Totals.GPUHoursAllocated * 3600
	t.Logf("metered %.3f s before the stop; the ledger holds %.3f s", metered, got)
	// The stop's final flush adds what was metered after the scrape; a
	// batch counted twice would add a whole flush interval more.
	if got < metered-0.001 || got > metered+overBooked {
		t.Errorf("ledger holds %.3f allocated GPU-seconds for %.3f metered; want it within [0, %.3f] s more: the batch behind the cut reply counted twice or not at all",
			got, metered, overBooked)
	}
}

// TestServeFencedAfterPartition cuts an agent off from PostgreSQL for
// longer than its lease takeover; a second agent of the same node takes
// the lease over. When the first is back, its next batch is refused in its
// own transaction: it exits non-zero saying what it had not written, and
// no minute of the ledger holds more GPU time than there was.
func TestServeFencedAfterPartition(t *testing.T) {
	dsn := pgtest.DSN(t)
	proxy, via := pgtest.NewProxy(t, dsn)
	dir := t.TempDir()
	scenario := harness.WriteText(t, filepath.Join(dir, "solo.yaml"), harness.SoloScenario)
	common := []string{"--sim", scenario, "--interval", harness.SampleInterval.String(), "--ledger-flush-interval", harness.FlushInterval.String(),
		"--ledger-lease-takeover", "3s", "--hostname", "gpu1"}
	first := harness.Launch(t, filepath.Join(dir, "a"), append(common, "--ledger-dsn", via)...)
	first.NextFlush(t)
	first.NextFlush(t)

	proxy.Partition()
	// The first agent's lease falls silent for longer than the takeover,
	// by the clock the takeover is judged by: the server's.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	harness.WaitFor(t, 20*time.Second, "the first agent's lease to be silent for more than 3 s", func() bool {
		var silent float64
		err := conn.QueryRow(ctx, `SELECT extract(epoch FROM clock_timestamp()) - heartbeat_us / 1e6 FROM node_leases WHERE node = 'gpu1'`).Scan(&silent)
		return err == nil && silent > 3
	})
	second := harness.Launch(t, filepath.Join(dir, "b"), append(common, "--ledger-dsn", dsn)...)
	second.NextFlush(t)
	proxy.Heal()

	select {
	case <-first.Exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the first agent still runs 20 s after the partition healed; stderr:\n%s", first.Stderr)
	}
	log := first.Stderr.String()
	if first.Err() == nil {
		t.Errorf("the fenced agent exited 0; stderr:\n%s", log)
	}
	for _, want := range []string{"no longer holds the node's lease", `node "gpu1" is held by pid ` + strconv.Itoa(second.Cmd.Process.Pid), "not written: "} {
		if !strings.Contains(log, want) {
			t.Errorf("the fenced agent's log does not say %q:\n%s", want, log)
		}
	}
	second.NextFlush(t)
	second.Stop(t)

	// One GPU: a minute holds at most 60 GPU-seconds, unless the first
	// agent's rows of the partition went in beside the second's.
	var most float64
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(seconds_us), 0) / 1e6 FROM gpu_minute").Scan(&most); err != nil {
		t.Fatal(err)
	}
	if most > 60+overBooked {
		t.Errorf("a minute holds %.3f GPU-seconds of the one GPU: the fenced agent's rows counted twice", most)
	}
}
