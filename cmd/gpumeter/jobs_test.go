package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue/run"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// startQueueAgent serves the agent's API with a real queue over a real
// SQLite ledger, without an engine (jobs stay queued), and points the
// commands at it with alice's token. It returns the secret of an admin's
// token the agent also accepts.
func startQueueAgent(t testing.TB) (adminSecret string) {
	t.Helper()
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	q, err := run.New(run.Config{
		Store: store, Node: "n1", EnvDir: filepath.Join(t.TempDir(), "env"),
		Identity: func(user string) (spec.Identity, error) {
			if user != "alice" {
				return spec.Identity{}, errors.New("no such user")
			}
			return spec.Identity{UID: 4242, GID: 4242}, nil
		},
		Rules: spec.Rules{Images: []string{"gpumeter/sleeper:*"}, MaxTimeLimit: 24 * time.Hour, MaxGPUMemory: 40 << 30},
	})
	if err != nil {
		t.Fatal(err)
	}
	secret, tok, err := auth.NewToken("alice-laptop", "alice", config.RoleUser, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	adminSecret, admin, err := auth.NewToken("ops-1", "ops", config.RoleAdmin, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	authn, err := auth.New(auth.Config{Tokens: []config.Token{tok, admin}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(server.Config{
		Jobs: q, Node: "n1",
		Auth:    func() *auth.Authenticator { return authn },
		Limiter: func() *auth.Limiter { return nil },
	}))
	t.Cleanup(srv.Close)
	clientEnvironment(t, srv.URL)
	t.Setenv("GPUMETER_TOKEN", secret)
	return adminSecret
}

var submitArgs = []string{"submit", "--gpus", "1", "--time-limit", "4h", "--image", "gpumeter/sleeper:1", "--name", "train", "--env", "SEED=7", "--memory", "8GiB", "--", "sleep", "60"}

// exitStatus is the status the command's error makes main exit with.
func exitStatus(err error) int {
	var ee exitError
	switch {
	case errors.As(err, &ee):
		return int(ee)
	case err != nil:
		return 1
	}
	return 0
}

func TestJobCommands(t *testing.T) {
	startQueueAgent(t)

	out, _, err := runCmd(t, submitArgs...)
	if err != nil || out != "j-000001\n" {
		t.Fatalf("submit printed %q (%v), want the job id alone", out, err)
	}
	out, _, err = runCmd(t, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^ID +NAME +USER +STATE +GPUS +PRI +POS +AGE +REASON\nj-000001 +train +alice +queued +1 +- +- +\d+s +\S`).MatchString(out) {
		t.Errorf("jobs:\n%s", out)
	}

	out, _, err = runCmd(t, "job", "j-000001", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("job --format json: %v\n%s", err, out)
	}
	for _, k := range []string{"id", "name", "user", "team", "state", "reason", "reason_text", "gpus_requested", "gpus", "image", "command",
		"env_keys", "time_limit", "submitted_at", "started_at", "ended_at", "exit_code", "container_id", "estimated_start", "held",
		"gpu_memory_requested", "class", "priority", "position", "placement"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("job --format json has no %s:\n%s", k, out)
		}
	}
	var keys []string
	if err := json.Unmarshal(raw["env_keys"], &keys); err != nil || !slices.Equal(keys, []string{"SEED"}) || strings.Contains(out, "SEED=") {
		t.Errorf("job --format json shows env %s; want the names only", raw["env_keys"])
	}
	out, _, err = runCmd(t, "job", "j-000001")
	if err != nil || !regexp.MustCompile(`(?m)^state: +queued\n`).MatchString(out) || !regexp.MustCompile(`(?m)^command: +sleep 60\n`).MatchString(out) {
		t.Errorf("job: %v\n%s", err, out)
	}

	if out, _, err = runCmd(t, "hold", "j-000001"); err != nil || out != "held j-000001\n" {
		t.Errorf("hold: %q %v", out, err)
	}
	if out, _, _ = runCmd(t, "jobs"); !strings.Contains(out, "queued (held)") {
		t.Errorf("jobs after hold does not say held:\n%s", out)
	}
	if out, _, err = runCmd(t, "release", "j-000001"); err != nil || out != "released j-000001\n" {
		t.Errorf("release: %q %v", out, err)
	}

	// A job that never ran has no logs yet; the error says what it is.
	if out, _, err = runCmd(t, "logs", "j-000001"); out != "" || err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "queued") {
		t.Errorf("logs of a queued job: %q %v, want a 409 naming its state", out, err)
	}

	// Every id is tried; the ones that fail are named.
	out, stderr, err := runCmd(t, "cancel", "j-000001", "j-999999")
	if out != "j-000001 cancelled\n" || err == nil || !strings.Contains(err.Error(), "could not cancel 1 of 2 jobs: j-999999") || !strings.Contains(stderr, "cancel j-999999") {
		t.Errorf("cancel: out %q stderr %q err %v", out, stderr, err)
	}
	if out, _, _ = runCmd(t, "jobs"); strings.Contains(out, "j-000001") {
		t.Errorf("jobs lists a cancelled job without -a:\n%s", out)
	}
	if out, _, _ = runCmd(t, "jobs", "-a", "--state", "cancelled"); !strings.Contains(out, "j-000001") {
		t.Errorf("jobs -a --state cancelled does not list it:\n%s", out)
	}
	e := func() error { _, _, err := runCmd(t, "cancel", "j-000001"); return err }()
	if e == nil || !strings.Contains(e.Error(), "could not cancel 1 of 1") {
		t.Errorf("cancel of a cancelled job: %v", e)
	}

	_, stderr, err = runCmd(t, "wait", "j-000001")
	if got := exitStatus(err); got != exitCancelled || !strings.Contains(stderr, "j-000001 cancelled") {
		t.Errorf("wait on a cancelled job: status %d, stderr %q; want 125 and the final state", got, stderr)
	}
	_, stderr, err = runCmd(t, "wait", "j-999999")
	if got := exitStatus(err); got != exitWaitError || !strings.Contains(stderr, "404") {
		t.Errorf("wait on an unknown job: status %d, stderr %q; want 2 and why", got, stderr)
	}
	_, _, err = runCmd(t, "wait")
	if got := exitStatus(err); got != exitWaitError {
		t.Errorf("wait without an id: status %d, want 2", got)
	}
}

// TestWaitEndsWithTheJob: wait returns once the job ends while it waits.
func TestWaitEndsWithTheJob(t *testing.T) {
	startQueueAgent(t)
	if _, _, err := runCmd(t, submitArgs...); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := runCmd(t, "wait", "j-000001"); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("wait returned while the job was queued: %v", err)
	case <-time.After(time.Second):
	}
	if _, _, err := runCmd(t, "cancel", "j-000001"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if got := exitStatus(err); got != exitCancelled {
			t.Errorf("wait: status %d, want 125", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wait did not return after the job was cancelled")
	}
}

func TestSubmitErrors(t *testing.T) {
	startQueueAgent(t)
	without := func(flag string) []string {
		i := slices.Index(submitArgs, flag)
		return slices.Delete(slices.Clone(submitArgs), i, i+2)
	}
	with := func(flag, value string) []string {
		out := slices.Clone(submitArgs)
		out[slices.Index(out, flag)+1] = value
		return out
	}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"no time limit", without("--time-limit"), []string{"--time-limit", "queue.default_time_limit"}},
		{"bad memory", with("--memory", "lots"), []string{"--memory:"}},
		{"zero time limit", with("--time-limit", "0s"), []string{"--time-limit:", "above 0"}},
		{"no gpus", without("--gpus"), []string{"--gpus: a job asks for at least 1 GPU"}},
		{"image refused", with("--image", "evil/miner:1"), []string{"--image: refused (image_not_allowed)", "queue.images"}},
		{"too long", with("--time-limit", "3d"), []string{"--time-limit: refused (time_limit_too_long)"}},
		{"nvidia env", with("--env", "NVIDIA_VISIBLE_DEVICES=all"), []string{"--env: refused (env_not_allowed)"}},
		{"no command", submitArgs[:len(submitArgs)-3], []string{"after --"}},
		{"command without --", append(slices.Clone(submitArgs[:len(submitArgs)-3]), "sleep", "60"), []string{"after --", `"sleep"`}},
		{"bad notify", append([]string{"submit", "--notify", "always"}, submitArgs[1:]...), []string{"--notify:", "start or end"}},
		{"gpus and gpu memory", append([]string{"submit", "--gpu-memory", "20GiB"}, submitArgs[1:]...), []string{"--gpus and --gpu-memory together"}},
		{"gpu memory too big", append([]string{"submit", "--gpu-memory", "41GiB"}, without("--gpus")[1:]...), []string{"--gpu-memory: refused (too_big)", "40GiB"}},
		{"gpu memory not a size", append([]string{"submit", "--gpu-memory", "20G"}, without("--gpus")[1:]...), []string{"--gpu-memory:"}},
		{"high for a user", append([]string{"submit", "--priority", "high"}, submitArgs[1:]...), []string{"--priority: refused (priority_not_allowed)"}},
		{"unknown class", append([]string{"submit", "--priority", "urgent"}, submitArgs[1:]...), []string{"--priority:", "not a priority class"}},
		{"label refused", append([]string{"submit", "--label", "gpumeter.project=vision"}, submitArgs[1:]...), []string{"--label: refused (label_not_allowed)", "queue.labels is empty"}},
		{"label not K=V", append([]string{"submit", "--label", "gpumeter.project"}, submitArgs[1:]...), []string{"--label:", "KEY=VALUE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runCmd(t, tt.args...)
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err %v, want one saying %q", err, w)
				}
			}
			if out != "" {
				t.Errorf("printed %q", out)
			}
		})
	}
	if out, _, _ := runCmd(t, "jobs", "-a"); strings.Contains(out, "j-") {
		t.Errorf("a refused submit was queued:\n%s", out)
	}
}

// TestMemoryJobCommands: a memory job's GPUS column is its memory, and
// job shows its memory and class.
func TestMemoryJobCommands(t *testing.T) {
	startQueueAgent(t)
	i := slices.Index(submitArgs, "--gpus")
	wholeGPUs := slices.Delete(slices.Clone(submitArgs), i, i+2)
	args := append([]string{"submit", "--gpu-memory", "20GiB", "--priority", "low"}, wholeGPUs[1:]...)
	if out, _, err := runCmd(t, args...); err != nil || out != "j-000001\n" {
		t.Fatalf("submit %q: %q %v", args, out, err)
	}
	out, _, err := runCmd(t, "jobs")
	if err != nil || !regexp.MustCompile(`(?m)^j-000001 +train +alice +queued +20GiB +- +- `).MatchString(out) {
		t.Errorf("jobs: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, "job", "j-000001")
	if err != nil || !regexp.MustCompile(`(?m)^gpus: +20GiB on one shared GPU asked; held: -\n`).MatchString(out) || !regexp.MustCompile(`(?m)^class: +low\n`).MatchString(out) {
		t.Errorf("job: %v\n%s", err, out)
	}
}
