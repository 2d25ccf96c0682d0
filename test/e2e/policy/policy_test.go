package policy

// The policy against the real Docker engine: real sleeper containers play
// idle and busy GPU jobs of a scenario, and serve warns through a real
// webhook, stops the idle one and audits all of it.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/policy"
	"github.com/gpumeter/gpumeter/internal/testenv"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// readAudit reads the audit log's events; a missing file has none.
func readAudit(t *testing.T, path string) []audit.Event {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []audit.Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e audit.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// hook is a real webhook receiver that keeps what it gets.
type hook struct {
	mu   sync.Mutex
	msgs []policy.Message
	srv  *httptest.Server
}

func newHook(t *testing.T) *hook {
	h := &hook{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m policy.Message
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.msgs = append(h.msgs, m)
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) messages() []policy.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]policy.Message(nil), h.msgs...)
}

func TestPolicyAgainstDocker(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.LockGPUs(t)
	start := func(name string, gpu int, labels map[string]string) harness.Sleeper {
		return harness.StartSleeper(t, cli, dockertest.Spec{Name: name, Labels: labels, Env: []string{fmt.Sprintf("NVIDIA_VISIBLE_DEVICES=%d", gpu)}})
	}
	idle := start("pol-idle", 0, map[string]string{"gpumeter.user": "alice"})
	if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", idle.PID)); err != nil || !strings.Contains(string(cg), idle.ID) {
		testenv.SkipUnlessCI(t, "container processes are not visible in /proc (/proc/%d/cgroup: %q, %v)", idle.PID, cg, err)
	}
	exempt := start("pol-exempt", 1, map[string]string{"gpumeter.user": "bob", "gpumeter.exempt": "true"})
	busy := start("pol-busy", 2, map[string]string{"gpumeter.user": "carol"})
	later := start("pol-later", 3, map[string]string{"gpumeter.user": "dave"})
	vanish := start("pol-vanish", 4, map[string]string{"gpumeter.user": "erin"})

	// Idle findings come after the 2 s window. pol-later gets busy at 5 s,
	// well inside the 6 s between its warning and its stop.
	dir := t.TempDir()
	scenario := filepath.Join(dir, "scenario.yaml")
	err := os.WriteFile(scenario, fmt.Appendf(nil, `version: 1
node: e2e-policy
duration: 1h
interval: 100ms
gpus:
  - count: 5
    model: NVIDIA A100-SXM4-80GB
    memory: 80GiB
    idle_power: 60W
    max_power: 400W
containers:
  - {name: pol-idle, pid: %d, gpus: [0], phases: [{at: 0s, util: 0, memory: 1GiB}]}
  - {name: pol-exempt, pid: %d, gpus: [1], phases: [{at: 0s, util: 0, memory: 1GiB}]}
  - {name: pol-busy, pid: %d, gpus: [2], phases: [{at: 0s, util: 80, memory: 1GiB}]}
  - {name: pol-later, pid: %d, gpus: [3], phases: [{at: 0s, util: 0, memory: 1GiB}, {at: 5s, util: 80, memory: 1GiB}]}
  - {name: pol-vanish, pid: %d, gpus: [4], phases: [{at: 0s, util: 0, memory: 1GiB}]}
`, idle.PID, exempt.PID, busy.PID, later.PID, vanish.PID), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	h := newHook(t)
	// The agent stops idle containers for real: every container on the
	// engine that is not this test's is exempted by name.
	list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var others []string
	for _, c := range list.Items {
		if c.Labels[dockertest.Label] != "1" {
			for _, n := range c.Names {
				others = append(others, strings.TrimPrefix(n, "/"))
			}
		}
	}
	env := []string{
		"GPUMETER_POLICY_EXEMPT_NAMES=" + strings.Join(others, ","),
		"GPUMETER_DATA_DIR=" + dir,
		"GPUMETER_WASTE_IDLE_WINDOW=2s",
		"GPUMETER_WASTE_STALLED_ENABLED=false", "GPUMETER_WASTE_OVER_ALLOCATED_ENABLED=false",
		"GPUMETER_WASTE_LOW_EFFICIENCY_ENABLED=false", "GPUMETER_WASTE_OUTSIDE_ENABLED=false",
		"GPUMETER_POLICY_DRY_RUN=false",
		"GPUMETER_POLICY_RULES_IDLE_ACTION=stop",
		"GPUMETER_POLICY_WEBHOOK_URL=" + h.srv.URL,
		"GPUMETER_POLICY_STOP_WARNING_WAIT=6s",
		"GPUMETER_POLICY_STOP_GRACE=1s",
	}
	begin := time.Now()
	harness.Serve(t, env, "--sim", scenario, "--interval", "100ms", "--docker-host", cli.DaemonHost())
	auditPath := filepath.Join(dir, "audit.jsonl")

	byID := func(evs []audit.Event, s harness.Sleeper) []string {
		var out []string
		for _, e := range evs {
			if e.ContainerID != "" && strings.HasPrefix(s.ID, e.ContainerID) {
				out = append(out, e.Kind+":"+e.Outcome)
			}
		}
		return out
	}
	// pol-vanish disappears between its warning and its stop.
	harness.WaitFor(t, 20*time.Second, "the warning of pol-vanish", func() bool {
		return len(byID(readAudit(t, auditPath), vanish)) > 0
	})
	dockertest.Remove(t, cli, vanish.ID)
	var evs []audit.Event
	harness.WaitFor(t, 30*time.Second, "the stops", func() bool {
		evs = readAudit(t, auditPath)
		done := 0
		for _, s := range []harness.Sleeper{idle, later, vanish} {
			if got := byID(evs, s); len(got) >= 2 {
				done++
			}
		}
		return done == 3
	})
	t.Logf("stops done after %.1fs", time.Since(begin).Seconds())
	check := func(s harness.Sleeper, want ...string) {
		t.Helper()
		got := byID(evs, s)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: audit %v, want %v", s.Name, got, want)
		}
	}
	check(idle, "warn:sent", "stop:stopped")
	check(later, "warn:sent", "stop:cancelled")
	check(exempt)
	check(busy)
	if got := byID(evs, vanish); len(got) != 2 || got[0] != "warn:sent" || (got[1] != "stop:gone" && got[1] != "stop:cancelled") {
		t.Errorf("pol-vanish: audit %v, want a warning, then the stop gone or cancelled", got)
	}
	for _, e := range evs {
		if e.Time.IsZero() || e.Rule != "idle" || e.FindingID == "" || e.Owner == "" || e.DryRun || len(e.Evidence) == 0 {
			t.Errorf("audit event lacks fields: %+v", e)
		}
	}
	if st := dockertest.Inspect(t, cli, idle.ID).State; st.Running || st.ExitCode != dockertest.SleeperExitCode {
		t.Errorf("pol-idle: running %v, exit code %d; want stopped by SIGTERM (%d)", st.Running, st.ExitCode, dockertest.SleeperExitCode)
	}
	for _, s := range []harness.Sleeper{exempt, busy, later} {
		if !dockertest.Inspect(t, cli, s.ID).State.Running {
			t.Errorf("%s was stopped", s.Name)
		}
	}
	// The ledger has the same events.
	store, err := sqlite.Open(context.Background(), filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	inLedger, err := store.AuditEvents(context.Background(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(inLedger) < len(evs) {
		t.Errorf("the ledger has %d audit events, the file %d", len(inLedger), len(evs))
	}
	// The actions of different findings run on their own workers, so
	// their lines may reach the file in another order than their times;
	// the ledger reads back by time. Both are put in one order to compare.
	order := func(t time.Time, container, kind string) string {
		return t.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano) + " " + container + " " + kind
	}
	slices.SortStableFunc(evs, func(a, b audit.Event) int {
		return strings.Compare(order(a.Time, a.ContainerID, a.Kind), order(b.Time, b.ContainerID, b.Kind))
	})
	slices.SortStableFunc(inLedger, func(a, b audit.Event) int {
		return strings.Compare(order(a.Time, a.ContainerID, a.Kind), order(b.Time, b.ContainerID, b.Kind))
	})
	for i := range min(len(evs), len(inLedger)) {
		if g, w := inLedger[i], evs[i]; g.Kind != w.Kind || g.Outcome != w.Outcome || g.ContainerID != w.ContainerID || !g.Time.Equal(w.Time.Truncate(time.Microsecond)) {
			t.Errorf("ledger audit event %d = %+v, the file's %+v", i, g, w)
		}
	}
	msgs := h.messages()
	warned := map[string]bool{}
	for _, m := range msgs {
		if m.Kind != policy.EventWarn || m.StopAt == nil || !strings.Contains(m.Text, "will be stopped") {
			t.Errorf("webhook message %+v, want a warning", m)
		}
		warned[m.Finding.Container] = true
	}
	if len(msgs) != 3 || !warned[idle.Name] || !warned[later.Name] || !warned[vanish.Name] {
		t.Errorf("webhook got warnings for %v, want %s, %s and %s", warned, idle.Name, later.Name, vanish.Name)
	}
}

// logServe runs serve with its log in a file, which the test can read
// while serve writes it, and returns the address it serves on.
func logServe(t *testing.T, env []string, args ...string) (cmd *exec.Cmd, logPath, url string) {
	t.Helper()
	logPath = filepath.Join(t.TempDir(), "serve.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(harness.Binary(t), append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), "GPUMETER_DATA_DIR="+t.TempDir(), harness.AdminEnv()), env...)
	cmd.Stderr = f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil && !t.Failed() {
				t.Errorf("serve exited with %v after SIGTERM", err)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("serve did not stop within 10s of SIGTERM")
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("serve log:\n%s", b)
		}
	})
	serving := waitLog(t, logPath, regexp.MustCompile(`serving on http://\S+`))
	return cmd, logPath, strings.TrimPrefix(serving, "serving on ")
}

func waitLog(t *testing.T, path string, re *regexp.Regexp) string {
	t.Helper()
	var line string
	harness.WaitFor(t, 20*time.Second, "a log line matching "+re.String(), func() bool {
		b, _ := os.ReadFile(path)
		line = re.FindString(string(b))
		return line != ""
	})
	return line
}

// TestServeReloadOnSIGHUP: a bad config file is rejected with a clear
// error and the old settings stay; a good one takes effect.
func TestServeReloadOnSIGHUP(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "gpumeter.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Idle after an hour: nothing is found in the test's time.
	write("waste:\n  idle:\n    window: 1h\npolicy:\n  rules:\n    idle:\n      action: stop\n")
	cmd, logPath, url := logServe(t, nil, "--config", cfgPath, "--sim", harness.Testdata("waste/live.yaml"), "--interval", "100ms")

	write("waste:\n  idle:\n    window: 2s\npolicy:\n  webhook:\n    retries: 99\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	line := waitLog(t, logPath, regexp.MustCompile(`.*config reload rejected.*`))
	if !strings.Contains(line, "policy.webhook.retries: 99 is outside 0..10") {
		t.Errorf("reload log line %q does not say what is wrong", line)
	}
	// The agent samples on for longer than the rejected window, and the
	// policy engine's step of a second besides: nothing may be found.
	since := harness.Series(harness.Get(t, url+"/metrics")).LastTick()
	harness.WaitFor(t, 30*time.Second, "3 s of samples after the rejected reload", func() bool {
		return harness.Series(harness.Get(t, url+"/metrics")).LastTick().Sub(since) >= 3*time.Second
	})
	if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "would warn") {
		t.Errorf("the rejected config took effect:\n%s", b)
	}

	write("waste:\n  idle:\n    window: 2s\npolicy:\n  rules:\n    idle:\n      action: stop\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logPath, regexp.MustCompile(`msg="config reloaded" tokens=1 waste_rules_changed=true policy_dry_run=true`))
	// The notebook of the scenario is idle: in dry run the agent says
	// what it would do.
	line = waitLog(t, logPath, regexp.MustCompile(`.*policy dry run: would warn, then stop the container.*`))
	if !strings.Contains(line, "container=notebook") || !strings.Contains(line, "rule=idle") {
		t.Errorf("dry-run line %q, want the notebook's idle finding", line)
	}
}
