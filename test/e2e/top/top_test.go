package top

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/testenv"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// demo is a demo agent that takes the test admin's token and a user
// token of alice, who runs one of the demo's containers.
type demo struct {
	*harness.Agent
	admin, alice string
}

func serveDemo(t *testing.T) demo {
	t.Helper()
	secret, tok, err := auth.NewToken("alice-laptop", "alice", config.RoleUser, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	a := harness.Serve(t, []string{harness.AdminEnv() + "," + tok.ID + "=" + tok.Entry()}, "--demo", "--interval", "200ms")
	return demo{Agent: a, admin: harness.AdminToken(), alice: secret}
}

// The demo's containers (internal/sim/demo.yaml); alice owns the first.
var demoContainers = []string{"alice-llama-finetune", "carol-notebook", "dave-eval", "frank-pretrain", "erin-dev"}

// TestOnce: --once prints one plain frame with a bar per GPU and every
// container; a user's token shows their own rows only, over real HTTP.
func TestOnce(t *testing.T) {
	d := serveDemo(t)
	out, errOut, code := harness.RunCLI(t, []string{"GPUMETER_TOKEN=" + d.admin}, "top", "--once", "--url", d.URL)
	if code != 0 {
		t.Fatalf("top --once: exit %d, stderr %s", code, errOut)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("--once printed escape codes:\n%q", out)
	}
	for i := range 4 {
		if !strings.Contains(out, fmt.Sprintf("GPU %-2d NVIDIA", i)) {
			t.Errorf("no line for GPU %d:\n%s", i, out)
		}
	}
	for _, want := range append([]string{"util █", "mem █", "node demo", "NAME", "SM%"}, demoContainers...) {
		if !strings.Contains(out, want) {
			t.Errorf("the admin's frame lacks %q:\n%s", want, out)
		}
	}

	out, errOut, code = harness.RunCLI(t, []string{"GPUMETER_TOKEN=" + d.alice}, "top", "--once", "--url", d.URL, "--group", "process")
	if code != 0 {
		t.Fatalf("top --once as alice: exit %d, stderr %s", code, errOut)
	}
	if !strings.Contains(out, "alice-llama-finet") || !strings.Contains(out, "GPU 3") {
		t.Errorf("alice's frame lacks her process or the GPUs:\n%s", out)
	}
	for _, other := range demoContainers[1:] {
		if strings.Contains(out, other) {
			t.Errorf("alice sees %s:\n%s", other, out)
		}
	}
	if strings.Contains(out, "(host)") {
		t.Errorf("alice sees bob's host process:\n%s", out)
	}

	// The route itself, as alice: her container and no one else's.
	resp, err := harness.GetAs(d.URL+"/api/v1/snapshot", d.alice)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/snapshot as alice: %d %s %v", resp.StatusCode, body, err)
	}
	var snap apitype.Snapshot
	if err := json.Unmarshal(body, &snap); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range snap.Containers {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"alice-llama-finetune"}) || len(snap.HostUsers) != 0 || len(snap.GPUs) != 4 {
		t.Errorf("alice's snapshot: containers %v, host users %+v, %d GPUs; want her container alone and 4 GPUs", names, snap.HostUsers, len(snap.GPUs))
	}

	// --user keeps the rows of one user, here for the admin.
	out, errOut, code = harness.RunCLI(t, []string{"GPUMETER_TOKEN=" + d.admin}, "top", "--once", "--url", d.URL, "--user", "carol", "--sort", "name")
	if code != 0 || !strings.Contains(out, "carol-notebook") || strings.Contains(out, "alice-llama") || !strings.Contains(out, "user: carol") {
		t.Errorf("--user carol: exit %d, stderr %s, frame:\n%s", code, errOut, out)
	}
	// Without a terminal and without --once, top says what to do.
	_, errOut, code = harness.RunCLI(t, []string{"GPUMETER_TOKEN=" + d.admin}, "top", "--url", d.URL)
	if code == 0 || !strings.Contains(errOut, "--once") {
		t.Errorf("top into a pipe: exit %d, stderr %s", code, errOut)
	}

	// Bad flags are named.
	_, errOut, code = harness.RunCLI(t, []string{"GPUMETER_TOKEN=" + d.admin}, "top", "--once", "--url", d.URL, "--interval", "100ms")
	if code == 0 || !strings.Contains(errOut, "--interval") {
		t.Errorf("--interval 100ms: exit %d, stderr %s", code, errOut)
	}
	_, errOut, code = harness.RunCLI(t, nil, "top", "--once", "--url", d.URL, "--sort", "colour")
	if code == 0 || !strings.Contains(errOut, `--sort: "colour" is not a column`) {
		t.Errorf("--sort colour: exit %d, stderr %s", code, errOut)
	}
}

// terminal is a tmux server of the test's own with one 160×50 pane
// running a shell.
type terminal struct {
	t      *testing.T
	socket string
}

func newTerminal(t *testing.T, env ...string) *terminal {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		testenv.SkipUnlessCI(t, "tmux is not installed (apt-get install tmux): %v", err)
	}
	term := &terminal{t: t, socket: filepath.Join(t.TempDir(), "tmux.sock")}
	shell := append([]string{"env", "-i", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "TERM=xterm-256color", "PS1=shell$ "}, env...)
	shell = append(shell, "/bin/sh")
	term.tmux("new-session", append([]string{"-d", "-x", "160", "-y", "50"}, shell...)...)
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", term.socket, "kill-server").Run() })
	term.await("the shell's prompt", func(s string) bool { return strings.Contains(s, "shell$") })
	return term
}

func (term *terminal) tmux(verb string, args ...string) string {
	term.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", term.socket, "-f", "/dev/null", verb}, args...)...).CombinedOutput()
	if err != nil {
		term.t.Fatalf("tmux %s %v: %v: %s", verb, args, err, out)
	}
	return string(out)
}

// screen is what the pane shows now.
func (term *terminal) screen() string { return term.tmux("capture-pane", "-p", "-t", "0") }

// keys types keys into the pane, as tmux send-keys names them.
func (term *terminal) keys(keys ...string) {
	term.tmux("send-keys", append([]string{"-t", "0"}, keys...)...)
}

// await waits until the screen passes ok, and returns it.
func (term *terminal) await(what string, ok func(string) bool) string {
	term.t.Helper()
	var last string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if last = term.screen(); ok(last) {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
	term.t.Fatalf("the terminal never showed %s; it shows:\n%s", what, last)
	return ""
}

// shellBack waits until the pane's shell runs in the foreground again,
// so that what is typed next goes to it.
func (term *terminal) shellBack() {
	term.t.Helper()
	harness.WaitFor(term.t, 20*time.Second, "the shell in the foreground", func() bool {
		return strings.TrimSpace(term.tmux("display-message", "-p", "-t", "0", "#{pane_current_command}")) == "sh"
	})
}

// altScreen says whether the pane is in the alternate screen.
func (term *terminal) altScreen() bool {
	return strings.TrimSpace(term.tmux("display-message", "-p", "-t", "0", "#{alternate_on}")) == "1"
}

// TestInTerminal runs top in a real terminal: the GPU bars and a row
// show, g changes the grouping, q leaves the alternate screen with the
// shell back, and so do a SIGTERM and a SIGINT; the terminal is usable
// after each.
func TestInTerminal(t *testing.T) {
	d := serveDemo(t)
	term := newTerminal(t, "GPUMETER_TOKEN="+d.admin)
	cmdline := harness.Binary(t) + " top --url " + d.URL
	term.keys(cmdline, "Enter")
	s := term.await("the GPUs and the rows", func(s string) bool {
		return strings.Contains(s, "GPU 0") && strings.Contains(s, "util █") && strings.Contains(s, "alice-llama-finetune")
	})
	if !term.altScreen() {
		t.Errorf("top does not draw in the alternate screen:\n%s", s)
	}
	if !strings.Contains(s, "group: container") || !strings.Contains(s, "q quit") {
		t.Errorf("no status or help line:\n%s", s)
	}
	// The sparkline grows with the snapshots top takes itself.
	term.await("a sparkline of several snapshots", func(s string) bool {
		for _, l := range strings.Split(s, "\n") {
			if i := strings.Index(l, "util "); strings.HasPrefix(l, "GPU 0") && i >= 0 && strings.Count(l[i:], "▇")+strings.Count(l[i:], "█") >= 14 {
				return true
			}
		}
		return false
	})

	term.keys("g")
	s = term.await("the rows by user", func(s string) bool { return strings.Contains(s, "group: user") })
	if strings.Contains(s, "alice-llama-finetune") || !strings.Contains(s, "alice") {
		t.Errorf("by user, the rows still name containers:\n%s", s)
	}
	term.keys("q")
	term.shellBack()
	s = term.await("the shell again", func(s string) bool { return !strings.Contains(s, "group: user") })
	if term.altScreen() {
		t.Errorf("q left the terminal in the alternate screen:\n%s", s)
	}
	if !strings.Contains(s, "shell$ "+cmdline) || strings.Contains(s, "util █") {
		t.Errorf("after q the screen is not the shell's:\n%s", s)
	}
	// The terminal echoes and takes lines again.
	term.keys("echo back-$((40+2))", "Enter")
	term.await("the shell's answer", func(s string) bool { return strings.Contains(s, "back-42") })

	// A SIGTERM ends top cleanly too, with the terminal restored.
	term.keys("clear", "Enter", cmdline, "Enter")
	term.await("top again", func(s string) bool { return strings.Contains(s, "group: container") })
	pid := topPID(t, term)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	term.shellBack()
	s = term.await("the shell after SIGTERM", func(s string) bool { return !strings.Contains(s, "group: container") })
	if term.altScreen() {
		t.Errorf("SIGTERM left the terminal in the alternate screen:\n%s", s)
	}
	term.keys("echo status-$?", "Enter")
	term.await("top's exit status", func(s string) bool { return strings.Contains(s, "status-0") })

	// So does a SIGINT from outside the terminal.
	term.keys("clear", "Enter", cmdline, "Enter")
	term.await("top once more", func(s string) bool { return strings.Contains(s, "group: container") })
	if err := syscall.Kill(topPID(t, term), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	term.shellBack()
	s = term.await("the shell after SIGINT", func(s string) bool { return !strings.Contains(s, "group: container") })
	if term.altScreen() {
		t.Errorf("SIGINT left the terminal in the alternate screen:\n%s", s)
	}
	term.keys("echo status-$?", "Enter")
	term.await("top's exit status", func(s string) bool {
		return strings.Count(s, "status-0") == 1 && strings.Contains(s, "shell$ echo status-$?\nstatus-0")
	})

	// A token the agent refuses ends top with the refusal said, and the
	// terminal as it was.
	term.keys("clear", "Enter", "GPUMETER_TOKEN=gpm_"+strings.Repeat("x", 43)+" "+cmdline+"; echo status-$?", "Enter")
	s = term.await("top's refusal", func(s string) bool { return strings.Contains(s, "status-1") })
	if term.altScreen() || !strings.Contains(s, "gpumeter: ") || !strings.Contains(s, "token") {
		t.Errorf("a refused token: alternate screen %v, screen:\n%s", term.altScreen(), s)
	}
}

// TestAgentGoesAway: top says that the agent stopped answering and keeps
// trying, and a q still leaves the terminal as it was.
func TestAgentGoesAway(t *testing.T) {
	dir := t.TempDir()
	a := harness.Launch(t, dir, "--demo", "--interval", "200ms")
	term := newTerminal(t, "GPUMETER_TOKEN="+a.Token)
	term.keys(harness.Binary(t)+" top --url "+a.URL, "Enter")
	term.await("the GPUs", func(s string) bool { return strings.Contains(s, "GPU 0") })
	a.Stop(t)
	s := term.await("the agent's absence", func(s string) bool { return strings.Contains(s, "agent not answering") })
	if !strings.Contains(s, "retrying every 1s, showing the snapshot of") || !strings.Contains(s, "GPU 0") {
		t.Errorf("the absence is not said with the last snapshot kept:\n%s", s)
	}
	term.await("a count of failed tries that grows", func(s string) bool { return strings.Contains(s, "(3 failed,") })
	term.keys("q")
	term.shellBack()
	term.await("the shell again", func(s string) bool { return !strings.Contains(s, "agent not answering") })
	if term.altScreen() {
		t.Error("q left the terminal in the alternate screen")
	}
}

// topPID is the process the pane's shell runs.
func topPID(t *testing.T, term *terminal) int {
	t.Helper()
	shell := strings.TrimSpace(term.tmux("display-message", "-p", "-t", "0", "#{pane_pid}"))
	var pid int
	harness.WaitFor(t, 10*time.Second, "the shell's child", func() bool {
		b, err := os.ReadFile("/proc/" + shell + "/task/" + shell + "/children")
		if err != nil {
			return false
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return false
		}
		pid, err = strconv.Atoi(f[0])
		return err == nil
	})
	return pid
}
