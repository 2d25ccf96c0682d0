package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/testenv"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestCompletionOverTheAgent: the binary's __complete, which the shell
// scripts call, completes stop with the names of the running containers
// a real agent lists, and a flag value without any agent.
func TestCompletionOverTheAgent(t *testing.T) {
	a := harness.Serve(t, nil, "--demo", "--interval", "100ms")
	resp, err := harness.GetAs(a.URL+"/api/v1/containers", a.Token)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Containers []struct {
			Name     string `json:"name"`
			Running  bool   `json:"running"`
			Resolved bool   `json:"resolved"`
		} `json:"containers"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, c := range body.Containers {
		if c.Running && c.Resolved {
			want = append(want, c.Name)
		}
	}
	if len(want) == 0 {
		t.Fatal("the demo lists no running container")
	}
	env := []string{"GPUMETER_URL=" + a.URL, "GPUMETER_TOKEN=" + a.Token, "GPUMETER_CLIENT_CONFIG=", "XDG_CONFIG_HOME=" + t.TempDir()}
	out, stderr, code := harness.RunCLI(t, env, "__complete", "stop", "")
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, ":") {
			name, _, _ := strings.Cut(l, "\t")
			got = append(got, name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if code != 0 || !slices.Equal(got, want) || !strings.HasSuffix(strings.TrimSpace(out), "\n:4") {
		t.Errorf("__complete stop: status %d, got %q, want %q and the no-files directive; stdout:\n%s\nstderr: %s", code, got, want, out, stderr)
	}

	out, _, code = harness.RunCLI(t, []string{"GPUMETER_URL=http://127.0.0.1:1"}, "__complete", "jobs", "--format", "")
	if code != 0 || out != "table\njson\n:4\n" {
		t.Errorf("__complete jobs --format: status %d, %q", code, out)
	}
}

// TestCompletionScriptLoads: the bash script `completion bash` prints
// loads in a real bash and registers the completion function.
func TestCompletionScriptLoads(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	bin := harness.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bash, "--norc", "-c", `source <("$0" completion bash) && complete -p gpumeter`, bin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "__start_gpumeter gpumeter") {
		t.Errorf("bash could not load the script: %v\n%s", err, out)
	}
}

// TestBashCompletesWithoutThePackage types Tab in a real bash in a tmux
// pane, without the bash-completion package loaded (--norc): the script
// brings its own _get_comp_words_by_ref, so a command and a flag
// complete and nothing prints "command not found".
func TestBashCompletesWithoutThePackage(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		testenv.SkipUnlessCI(t, "tmux is not installed (apt-get install tmux): %v", err)
	}
	dir := t.TempDir()
	if err := os.Symlink(harness.Binary(t), filepath.Join(dir, "gpumeter")); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "tmux.sock")
	tmux := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("tmux", append([]string{"-S", socket, "-f", "/dev/null"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	tmux("new-session", "-d", "-x", "160", "-y", "30", "env", "-i", "PATH="+dir+":/usr/bin:/bin", "HOME="+t.TempDir(),
		"TERM=xterm-256color", "PS1=bash$ ", bash, "--norc", "--noprofile")
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", socket, "kill-server").Run() })
	screen := func() string { return tmux("capture-pane", "-p", "-t", "0") }
	await := func(what string, ok func(string) bool) string {
		t.Helper()
		var last string
		harness.WaitFor(t, 20*time.Second, what, func() bool { last = screen(); return ok(last) })
		return last
	}
	await("the prompt", func(s string) bool { return strings.Contains(s, "bash$") })
	tmux("send-keys", "-t", "0", "source <(gpumeter completion bash) && echo loaded", "Enter")
	await("the script loaded", func(s string) bool { return strings.Contains(s, "\nloaded") })
	tmux("send-keys", "-t", "0", "gpumeter rep", "Tab")
	// The pane's lines come without their trailing blanks: the space
	// the completion adds shows once the next word is typed.
	await("gpumeter rep completed to report", func(s string) bool { return strings.Contains(s, "bash$ gpumeter report") })
	tmux("send-keys", "-t", "0", "-l", "--", "--for")
	tmux("send-keys", "-t", "0", "Tab")
	s := await("--for completed to --format", func(s string) bool { return strings.Contains(s, "bash$ gpumeter report --format") })
	if strings.Contains(s, "command not found") {
		t.Errorf("the terminal shows an error:\n%s", s)
	}
}
