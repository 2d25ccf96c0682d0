package main

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/run"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// startFleetAgent serves the API with the fixed fleet of nodesTable and
// a real queue on a SQLite ledger in which alice's job runs on gpu-a and
// bob's waits, and points the commands at it with a token of role.
func startFleetAgent(t *testing.T, role config.Role) {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	q, err := run.New(run.Config{Store: store, Node: "gpu-a", EnvDir: filepath.Join(t.TempDir(), "env"),
		Identity: func(string) (spec.Identity, error) { return spec.Identity{}, errors.New("no users here") },
		Rules:    spec.Rules{Images: []string{"gpumeter/sleeper:*"}, MaxTimeLimit: 24 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, j := range []queue.Job{
		{Name: "train", User: "alice", GPUsRequested: 1},
		{Name: "eval", User: "bob", GPUsRequested: 2},
	} {
		j.State, j.Image, j.TimeLimit, j.SubmittedAt = queue.Queued, "gpumeter/sleeper:1", time.Hour, now
		sub, err := store.SubmitJob(ctx, j, audit.Event{})
		if err != nil {
			t.Fatal(err)
		}
		if j.User == "alice" {
			if _, err := store.UpdateJob(ctx, sub.ID, queue.Queued, func(j *queue.Job) {
				j.State, j.StartedAt, j.Node, j.GPUs = queue.Running, now, "gpu-a", []string{"GPU-0"}
			}, audit.Event{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	startAPIAgent(t, server.Config{Nodes: &tableNodes{views: nodesTable()}, Jobs: q, Node: "gpu-a"}, role)
}

// TestTopFleetOnce: top --fleet --once prints a row per node with its
// state, lease, score, GPUs by state and jobs running, under a title
// that counts the nodes and the jobs.
func TestTopFleetOnce(t *testing.T) {
	startFleetAgent(t, config.RoleAdmin)
	out, _, err := runCmd(t, "top", "--fleet", "--once")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^gpumeter top --fleet · \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC · 3 nodes: 1 up, 1 draining, 1 lost · jobs: 1 queued, 1 running$`),
		regexp.MustCompile(`(?m)^NODE +STATE +LEASE +SCORE +SM% +GPUS +FREE +HELD +OUT +JOBS +VERSION$`),
		regexp.MustCompile(`(?m)^gpu-a +up +2s +95 +65 +██·▒ +1 +2 +1 +1 +1\.4\.0$`),
		regexp.MustCompile(`(?m)^gpu-b +draining +4s +30 +0 +·· +2 +0 +0 +0 +1\.4\.0$`),
		regexp.MustCompile(`(?m)^gpu-c +lost +3h +30 +0 +0 +0 +0 +0 +-$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("top --fleet --once does not match %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("--once printed escape codes:\n%q", out)
	}
	// The node's own view's flags do not apply.
	if _, _, err := runCmd(t, "top", "--fleet", "--once", "--group", "user"); err == nil || !strings.Contains(err.Error(), "--group") {
		t.Errorf("--fleet --group: %v, want an error naming --group", err)
	}
}

// TestTopFleetOutsideFleet: on an agent outside a fleet, top --fleet
// exits 1 with the agent's fleet_off sentence.
func TestTopFleetOutsideFleet(t *testing.T) {
	startNodesAgent(t, nil, config.RoleAdmin)
	_, _, err := runCmd(t, "top", "--fleet", "--once")
	if err == nil || !strings.Contains(err.Error(), "this agent is not in a fleet: it needs queue.fleet: true") || exitStatus(err) != 1 {
		t.Errorf("top --fleet outside a fleet: %v (status %d), want status 1 with the fleet_off sentence", err, exitStatus(err))
	}
	if _, _, err := runCmd(t, "top", "--fleet"); err == nil || !strings.Contains(err.Error(), "not in a fleet") {
		t.Errorf("top --fleet (no --once) outside a fleet: %v, want the fleet_off sentence before the terminal is asked for", err)
	}
}
