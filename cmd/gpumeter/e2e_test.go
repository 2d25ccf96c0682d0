package main

// End-to-end tests: they build the real binary and run it as an operator
// would, over real HTTP.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/report"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var binary string

// adminToken is the admin token every agent the tests start accepts,
// unless a test configures tokens of its own; adminTokens is its
// auth.tokens entry. Both are made afresh for each run of the tests.
var adminToken, adminTokens string

// adminEnv gives an agent the test admin token, in the environment.
func adminEnv() string { return "GPUMETER_AUTH_TOKENS=" + adminTokens }

func TestMain(m *testing.M) {
	flag.Parse()
	secret, tok, err := auth.NewToken("e2e-admin", "e2e", auth.RoleAdmin, time.Time{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "make the test token:", err)
		os.Exit(1)
	}
	adminToken, adminTokens = secret, tok.ID+"="+tok.Entry()
	dir, err := os.MkdirTemp("", "gpumeter-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Others may run the binary too: tests run it as nobody.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "gpumeter")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build gpumeter:", err)
		os.Exit(1)
	}
	code := pgtest.Main(m) // runs the tests, then stops their PostgreSQL
	os.RemoveAll(dir)
	os.Exit(code)
}

// agentProc is a running `gpumeter serve`.
type agentProc struct {
	URL string
	// Token is an admin token the agent accepts: adminToken, or "" when
	// the test configured the agent's tokens itself.
	Token  string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	// exited closes when the agent has exited.
	exited <-chan struct{}
}

var servingRE = regexp.MustCompile(`serving on (https?://\S+)`)

// hasEnv says whether env sets the variable name.
func hasEnv(env []string, name string) bool {
	return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}

// startServe runs `gpumeter serve args...` on a free loopback port and
// waits until it has taken its first sample. The agent accepts adminToken
// unless env sets GPUMETER_AUTH_TOKENS.
func startServe(t *testing.T, env []string, args ...string) *agentProc {
	t.Helper()
	return startServeWith(t, serveOptions{env: env, args: args})
}

// serveOptions are how startServeWith runs an agent.
type serveOptions struct {
	env  []string
	args []string
	// ready says whether the agent at url has taken its first sample;
	// nil asks /healthz over plain HTTP.
	ready func(url string) bool
}

func startServeWith(t *testing.T, o serveOptions) *agentProc {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0"}, o.args...)
	cmd := exec.Command(binary, args...)
	// Each agent keeps its ledger in the test's own directory unless the
	// test says otherwise.
	cmd.Env = append(os.Environ(), "GPUMETER_DATA_DIR="+t.TempDir())
	a := &agentProc{cmd: cmd, stderr: &lockedBuffer{}}
	if !hasEnv(o.env, "GPUMETER_AUTH_TOKENS") {
		cmd.Env = append(cmd.Env, adminEnv())
		a.Token = adminToken
	}
	cmd.Env = append(cmd.Env, o.env...)
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(pw, a.stderr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	a.exited = exited
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		pw.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			if waitErr != nil && !t.Failed() {
				t.Errorf("serve exited with %v after SIGTERM; stderr:\n%s", waitErr, a.stderr)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("serve did not stop within 10s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("serve stderr:\n%s", a.stderr)
		}
	})
	a.URL = awaitReady(t, pr, exited, a.stderr, o.ready)
	return a
}

// awaitServing reads an agent's stderr for the address it serves on, then
// waits for its first sample. exited, when not nil, closes if the agent
// ends first; log is its stderr so far, for the failure message.
func awaitServing(t *testing.T, stderr io.Reader, exited <-chan struct{}, log fmt.Stringer) string {
	t.Helper()
	return awaitReady(t, stderr, exited, log, nil)
}

// awaitReady is awaitServing with the agent's own test of its first
// sample; nil asks /healthz over plain HTTP.
func awaitReady(t *testing.T, stderr io.Reader, exited <-chan struct{}, log fmt.Stringer, ready func(url string) bool) string {
	t.Helper()
	if ready == nil {
		ready = func(url string) bool {
			resp, err := http.Get(url + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	var url string
	select {
	case url = <-found:
	case <-exited:
		t.Fatalf("serve exited before listening; stderr:\n%s", log)
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not start listening; stderr:\n%s", log)
	}
	waitFor(t, 10*time.Second, "the first sample", func() bool { return ready(url) })
	return url
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// getAs GETs url with token as its bearer token ("" sends none).
func getAs(url, token string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return http.DefaultClient.Do(req)
}

// get GETs url as the test admin and returns the body of its 200 answer.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := getAs(url, adminToken)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body)
}

// cliEnv is the environment a CLI command needs to call a as its admin.
func (a *agentProc) cliEnv() []string { return []string{"GPUMETER_TOKEN=" + a.Token} }

// runCLI runs the binary to completion and returns its output and status.
func runCLI(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// series parses a text exposition into name{labels} -> value.
func series(text string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

// normalise keeps gpumeter's and the DCGM series and replaces the values
// that depend on elapsed time (counters, timings) by "*", so the rest can
// be compared with a golden file.
func normalise(text string) string {
	var keep []string
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.HasPrefix(line, "DCGM_") && !strings.HasPrefix(line, "gpumeter_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		switch {
		case strings.HasSuffix(name, "_total"), name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
			strings.HasSuffix(name, "_duration_seconds"), name == "gpumeter_last_tick_timestamp_seconds",
			name == "gpumeter_build_info", name == "gpumeter_ledger_pending_rows", name == "gpumeter_ledger_up":
			line = line[:i] + " *"
		}
		keep = append(keep, line)
	}
	slices.Sort(keep)
	return strings.Join(keep, "\n") + "\n"
}

func TestServeSimScrapeGolden(t *testing.T) {
	a := startServe(t, nil, "--sim", "../../testdata/shared.yaml", "--interval", "100ms")
	first := get(t, a.URL+"/metrics")
	got := normalise(first)
	golden := "testdata/serve-sim.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("scrape differs from %s (go test ./cmd/gpumeter -run Golden -update, then review):\n%s", golden, diffLines(string(want), got))
	}

	// The counters grow while the scenario plays.
	key := `gpumeter_gpu_metered_seconds_total{Hostname="lab-1",UUID="%s",gpu="0"}`
	var uuid string
	for s := range series(first) {
		if m := regexp.MustCompile(`gpumeter_gpu_metered_seconds_total\{Hostname="lab-1",UUID="([^"]+)",gpu="0"\}`).FindStringSubmatch(s); m != nil {
			uuid = m[1]
		}
	}
	if uuid == "" {
		t.Fatal("no gpumeter_gpu_metered_seconds_total for GPU 0")
	}
	key = fmt.Sprintf(key, uuid)
	before := series(first)[key]
	time.Sleep(300 * time.Millisecond)
	after := series(get(t, a.URL+"/metrics"))[key]
	if after <= before {
		t.Errorf("%s went from %g to %g, want it to grow", key, before, after)
	}
}

func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

func TestServeSimAPIAndPs(t *testing.T) {
	a := startServe(t, nil, "--sim", "../../testdata/shared.yaml", "--interval", "100ms")

	var gpus apitype.GPUsResponse
	if err := json.Unmarshal([]byte(get(t, a.URL+"/api/v1/gpus")), &gpus); err != nil {
		t.Fatal(err)
	}
	if gpus.Node != "lab-1" || len(gpus.GPUs) != 2 {
		t.Fatalf("gpus: node %q with %d GPUs, want lab-1 with 2", gpus.Node, len(gpus.GPUs))
	}
	if u := gpus.GPUs[0].UtilPercent; u == nil || *u != 80 {
		t.Errorf("GPU 0 utilisation = %v, want 80", u)
	}
	if n := len(gpus.GPUs[0].Processes); n != 2 {
		t.Errorf("GPU 0 has %d processes, want 2", n)
	}

	out, stderr, code := runCLI(t, a.cliEnv(), "ps", "--url", a.URL)
	if code != 0 {
		t.Fatalf("ps exited %d: %s", code, stderr)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^CONTAINER ID\s+NAME\s+USER\s+TEAM\s+GPU\s+SHARE\s+SM\s+GPU MEMORY`),
		regexp.MustCompile(`(?m)^\w{12}\s+alice-train\s+alice\s+nlp\s+0\s+0\.50\s+60%\s+20\.0 GiB`),
		regexp.MustCompile(`(?m)^\w{12}\s+bob-notebook\s+bob\s+vision\s+0\s+0\.50\s+20%\s+4\.0 GiB`),
		regexp.MustCompile(`(?m)^\w{12}\s+carol-idle\s+carol\s+-\s+1\s+1\.00\s+0%\s+0 B`),
		regexp.MustCompile(`(?m)^-\s+\(host\)\s+dave\s+-\s+1\s+-\s+50%\s+2\.0 GiB`),
	} {
		if !want.MatchString(out) {
			t.Errorf("ps output does not match %s:\n%s", want, out)
		}
	}

	out, stderr, code = runCLI(t, a.cliEnv(), "ps", "--url", a.URL, "--format", "json")
	if code != 0 {
		t.Fatalf("ps --format json exited %d: %s", code, stderr)
	}
	var resp apitype.ContainersResponse
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("ps --format json: %v\n%s", err, out)
	}
	if len(resp.Containers) != 3 || len(resp.HostUsers) != 1 || resp.HostUsers[0].User != "dave" {
		t.Errorf("ps json: %d containers and host users %+v, want 3 and dave", len(resp.Containers), resp.HostUsers)
	}

	page := get(t, a.URL+"/")
	if !strings.Contains(page, "<title>gpumeter</title>") || !strings.Contains(page, "api/v1/containers") {
		t.Errorf("/ does not serve the live page")
	}
}

func TestServeDemo(t *testing.T) {
	a := startServe(t, nil, "--demo", "--interval", "100ms")
	var resp apitype.ContainersResponse
	if err := json.Unmarshal([]byte(get(t, a.URL+"/api/v1/containers")), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Node != "demo" || len(resp.Containers) < 4 || len(resp.HostUsers) == 0 {
		t.Errorf("demo shows node %q, %d containers, %d host users; want demo, at least 4 and at least 1", resp.Node, len(resp.Containers), len(resp.HostUsers))
	}
	shared := false
	for _, c := range resp.Containers {
		for _, g := range c.GPUs {
			if g.Share > 0 && g.Share < 1 {
				shared = true
			}
		}
	}
	if !shared {
		t.Error("the demo shows no shared GPU")
	}
}

// TestServeDemoCost: the demo prices its use itself, so that its first
// report shows money, at the prices README lists.
func TestServeDemoCost(t *testing.T) {
	a := startServe(t, nil, "--demo", "--interval", "100ms", "--ledger-flush-interval", "200ms")
	var rep report.Report
	waitFor(t, 10*time.Second, "a priced report of the demo", func() bool {
		status, _, body := fetch(t, a.URL+"/api/v1/usage?by=user&since=1h")
		if status != http.StatusOK {
			t.Fatalf("usage: %d %s", status, body)
		}
		rep = report.Report{}
		if err := json.Unmarshal(body, &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Totals.GPUHoursAllocated > 0
	})
	if rep.Totals.Cost <= 0 || rep.Host.Cost <= 0 || rep.Totals.CostGPU <= 0 || rep.Totals.CostEnergy <= 0 {
		t.Errorf("demo report costs %v (GPU %v, energy %v), host %v; want money", rep.Totals.Cost, rep.Totals.CostGPU, rep.Totals.CostEnergy, rep.Host.Cost)
	}
	// 2.50 a GPU-hour: the GPU cost is exactly that times the hours held.
	if !closeTo(rep.Totals.CostGPU, 2.50*rep.Totals.GPUHoursAllocated, 1e-9) {
		t.Errorf("GPU cost %v for %v allocated GPU-hours, want 2.50 a GPU-hour", rep.Totals.CostGPU, rep.Totals.GPUHoursAllocated)
	}
	// Prices an operator sets win over the demo's.
	b := startServe(t, nil, "--demo", "--interval", "100ms", "--ledger-flush-interval", "200ms", "--cost-gpu-hour", "default=1")
	waitFor(t, 10*time.Second, "a report of the demo at the operator's price", func() bool {
		_, _, body := fetch(t, b.URL+"/api/v1/usage?by=user&since=1h")
		rep = report.Report{}
		if err := json.Unmarshal(body, &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Totals.GPUHoursAllocated > 0
	})
	if !closeTo(rep.Totals.CostGPU, rep.Totals.GPUHoursAllocated, 1e-9) || rep.Totals.CostEnergy != 0 {
		t.Errorf("with --cost-gpu-hour default=1: GPU cost %v for %v GPU-hours, energy cost %v; want 1 a GPU-hour and no demo energy price",
			rep.Totals.CostGPU, rep.Totals.GPUHoursAllocated, rep.Totals.CostEnergy)
	}
}

func TestServeErrors(t *testing.T) {
	dir := t.TempDir()
	badConfig := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badConfig, []byte("listen: :9400\ninterval: soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badScenario := filepath.Join(dir, "bad-scenario.yaml")
	if err := os.WriteFile(badScenario, []byte("version: 1\nduration: 1h\ngpus:\n  - count: 2\n    model: A100\n    memory: 40GiB\n    idle_power: 50W\n    max_power: 400W\ncontainers:\n  - name: x\n    gpus: [0, 7]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"no driver", nil, []string{"serve", "--listen", "127.0.0.1:0", "--nvml-library", "/nonexistent/libnvidia-ml.so.1"}, []string{"no NVIDIA driver found", "--demo", "--sim FILE"}},
		{"bad config", nil, []string{"serve", "--config", badConfig}, []string{badConfig + ":2: interval:", `"soon" is not a duration`}},
		{"bad env", []string{"GPUMETER_INTERVAL=-3s"}, []string{"serve", "--demo"}, []string{"GPUMETER_INTERVAL", "negative"}},
		{"bad flag value", nil, []string{"serve", "--demo", "--docker-enabled=perhaps"}, []string{"--docker-enabled", `"perhaps" is not true or false`}},
		{"bad scenario", nil, []string{"serve", "--sim", badScenario}, []string{badScenario + ":11", "GPU index 7 out of range"}},
		{"missing scenario", nil, []string{"serve", "--sim", filepath.Join(dir, "nope.yaml")}, []string{"nope.yaml"}},
		{"demo and sim", nil, []string{"serve", "--demo", "--sim", badScenario}, []string{"--demo and --sim exclude each other"}},
		{"bad listen", nil, []string{"serve", "--demo", "--listen", "nowhere"}, []string{`listen: "nowhere" is not host:port`}},
		{"ps unreachable", nil, []string{"ps", "--url", "http://127.0.0.1:1"}, []string{"is `gpumeter serve` running?"}},
		{"ps bad format", nil, []string{"ps", "--format", "xml"}, []string{`--format: "xml" is not table or json`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, tt.env, tt.args...)
			if code == 0 {
				t.Fatalf("exit status 0, want failure; stderr:\n%s", stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Errorf("stderr shows a crash:\n%s", stderr)
			}
		})
	}
}

// TestServeBusyPortLeavesNothing: a demo that cannot listen removes the
// ledger it made for itself, as a demo that stops does.
func TestServeBusyPortLeavesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tmp := t.TempDir()
	_, stderr, code := runCLI(t, []string{"TMPDIR=" + tmp}, "serve", "--demo", "--listen", ln.Addr().String())
	if code == 0 || !strings.Contains(stderr, "address already in use") {
		t.Fatalf("exit status %d, want a failure to listen; stderr:\n%s", code, stderr)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left behind in $TMPDIR: %s", e.Name())
	}
}

func TestVersion(t *testing.T) {
	out, _, code := runCLI(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "gpumeter ") {
		t.Errorf("version printed %q with status %d", out, code)
	}
}

// TestBareBoolFlag checks that a true/false setting given as a bare flag
// means true, and that =false turns it off.
func TestBareBoolFlag(t *testing.T) {
	a := startServe(t, nil, "--demo", "--interval", "100ms", "--ledger-enabled=false")
	resp, err := getAs(a.URL+"/api/v1/usage", a.Token)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("with --ledger-enabled=false /api/v1/usage answered %d, want 503", resp.StatusCode)
	}
	b := startServe(t, nil, "--demo", "--interval", "100ms", "--ledger-enabled")
	waitFor(t, 20*time.Second, "a usage report from the demo's ledger", func() bool {
		resp, err := getAs(b.URL+"/api/v1/usage?since=1h", b.Token)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
