package cli

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

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
