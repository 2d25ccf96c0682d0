package harness

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Agent is a running `gpumeter serve`.
type Agent struct {
	URL string
	// Token is an admin token the agent accepts: AdminToken(), or ""
	// when the test configured the agent's tokens itself.
	Token  string
	Cmd    *exec.Cmd
	Stderr *LockedBuffer
	// Exited closes when the agent has exited; Err is valid then.
	Exited <-chan struct{}
	err    error
}

// Err is how the agent exited, once Exited is closed.
func (a *Agent) Err() error { return a.err }

// CLIEnv is the environment a CLI command needs to call a as its admin.
func (a *Agent) CLIEnv() []string { return []string{"GPUMETER_TOKEN=" + a.Token} }

var servingRE = regexp.MustCompile(`serving on (https?://\S+)`)

// hasEnv says whether env sets the variable name.
func hasEnv(env []string, name string) bool {
	return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}

// Serve runs `gpumeter serve args...` on a free loopback port, with its
// ledger in a directory of the test's unless env sets GPUMETER_DATA_DIR,
// and waits until it has taken its first sample. The agent accepts
// AdminToken() unless env sets GPUMETER_AUTH_TOKENS. When the test ends
// the agent gets SIGTERM and must exit cleanly within 10 s.
func Serve(t *testing.T, env []string, args ...string) *Agent {
	t.Helper()
	return ServeWith(t, ServeOptions{Env: env, Args: args})
}

// ServeOptions are how ServeWith runs an agent.
type ServeOptions struct {
	Env  []string
	Args []string
	// Ready says whether the agent at url has taken its first sample;
	// nil asks /healthz over plain HTTP.
	Ready func(url string) bool
}

// ServeWith is Serve with the options o.
func ServeWith(t *testing.T, o ServeOptions) *Agent {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0"}, o.Args...)
	cmd := exec.Command(Binary(t), args...)
	// Each agent keeps its ledger in the test's own directory unless the
	// test says otherwise.
	cmd.Env = append(Environ(), "GPUMETER_DATA_DIR="+t.TempDir())
	a := &Agent{Cmd: cmd, Stderr: &LockedBuffer{}}
	if !hasEnv(o.Env, "GPUMETER_AUTH_TOKENS") {
		cmd.Env = append(cmd.Env, AdminEnv())
		a.Token = adminToken
	}
	cmd.Env = append(cmd.Env, o.Env...)
	pr := a.start(t)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.Exited:
			if a.err != nil && !t.Failed() {
				t.Errorf("serve exited with %v after SIGTERM; stderr:\n%s", a.err, a.Stderr)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-a.Exited
			t.Errorf("serve did not stop within 10s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("serve stderr:\n%s", a.Stderr)
		}
	})
	a.URL = awaitReady(t, pr, a.Exited, a.Stderr, o.Ready)
	return a
}

// Launch runs `gpumeter serve args...` with GPUMETER_DATA_DIR=dataDir on a
// free loopback port and waits for its first sample: an agent that the
// test ends itself, by Kill or Stop, and that keeps its ledger where the
// test chooses. One the test did not end is killed when the test ends.
func Launch(t *testing.T, dataDir string, args ...string) *Agent {
	t.Helper()
	args = append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)
	cmd := exec.Command(Binary(t), args...)
	cmd.Env = append(Environ(), "GPUMETER_DATA_DIR="+dataDir, AdminEnv())
	a := &Agent{Token: adminToken, Cmd: cmd, Stderr: &LockedBuffer{}}
	pr := a.start(t)
	t.Cleanup(func() {
		select {
		case <-a.Exited:
		default:
			_ = cmd.Process.Kill()
			<-a.Exited
		}
		if t.Failed() {
			t.Logf("serve %s stderr:\n%s", strings.Join(args, " "), a.Stderr)
		}
	})
	a.URL = AwaitServing(t, pr, a.Exited, a.Stderr)
	return a
}

// start starts a's command with its stderr kept in a.Stderr and copied
// to the reader it returns.
func (a *Agent) start(t *testing.T) io.Reader {
	t.Helper()
	pr, pw := io.Pipe()
	a.Cmd.Stderr = io.MultiWriter(pw, a.Stderr)
	if err := a.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	a.Exited = exited
	go func() {
		a.err = a.Cmd.Wait()
		pw.Close()
		close(exited)
	}()
	return pr
}

// Kill ends the agent with SIGKILL: no final flush, no cleanup.
func (a *Agent) Kill(t *testing.T) {
	t.Helper()
	if err := a.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.Exited
}

// Stop ends the agent with SIGTERM and wants a clean exit within 15 s.
func (a *Agent) Stop(t *testing.T) {
	t.Helper()
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("serve did not stop within 15s of SIGTERM; stderr:\n%s", a.Stderr)
	}
	if a.err != nil {
		t.Fatalf("serve exited with %v after SIGTERM; stderr:\n%s", a.err, a.Stderr)
	}
}

// AwaitServing reads an agent's stderr for the address it serves on, then
// waits for its first sample, asking /healthz over plain HTTP. exited,
// when not nil, closes if the agent ends first; log is its stderr so far,
// for the failure message.
func AwaitServing(t *testing.T, stderr io.Reader, exited <-chan struct{}, log fmt.Stringer) string {
	t.Helper()
	return awaitReady(t, stderr, exited, log, nil)
}

// awaitReady is AwaitServing with the agent's own test of its first
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
	case <-time.After(2 * time.Minute):
		// Generous: before it listens the agent runs quick_check over
		// its ledger, which over a month of history takes seconds in a
		// binary built with -race on a busy machine.
		t.Fatalf("serve did not start listening in 2 minutes; stderr:\n%s", log)
	}
	WaitFor(t, 10*time.Second, "the first sample", func() bool { return ready(url) })
	return url
}

// minWait is the least WaitFor waits before it fails a test.
const minWait = time.Minute

// WaitFor polls cond until it holds, or fails the test once timeout has
// passed. The timeout is a guard against a hang, never a figure: it is
// at least minWait, whatever the caller names, since a busy machine (the
// race detector's agent beside other tests on two cores) takes many times
// what a quiet one does, and a longer wait only delays a failure.
func WaitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = max(timeout, minWait)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
