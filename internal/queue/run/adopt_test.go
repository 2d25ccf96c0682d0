package run

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// TestFleetAdoptsWhatKeptRunning: the agent of node1 dies with two jobs
// running; the fleet takes node1 for lost and requeues both, and starts
// one of them on node2 before node1's agent comes back. The one the
// fleet has not started elsewhere is adopted, in the container that kept
// running, on its GPUs; the container of the one that runs on node2 now
// is stopped. No job gets a second container.
func TestFleetAdoptsWhatKeptRunning(t *testing.T) {
	e := newEngineEnv(t, 2, nil)
	kept := e.waitState(t, e.submit(t, "alice", e.sleeper()).ID, queue.Running)
	moved := e.waitState(t, e.submit(t, "bob", e.sleeper()).ID, queue.Running)
	e.stop()

	// What the fleet's scheduler does once node1's lease expires, and
	// then node2's start of the moved job.
	ctx := context.Background()
	update := func(id string, from, to queue.State, change func(*queue.Job)) {
		t.Helper()
		if _, err := e.store.UpdateJob(ctx, id, from, func(j *queue.Job) { change(j); j.State = to }, audit.Event{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{kept.ID, moved.ID} {
		update(id, queue.Running, queue.Lost, func(*queue.Job) {})
		update(id, queue.Lost, queue.Queued, func(j *queue.Job) {
			j.GPUs, j.ContainerID, j.StartedAt, j.Node, j.Reason = nil, "", time.Time{}, "", queue.ReasonLostRequeued
		})
	}
	update(moved.ID, queue.Queued, queue.Starting, func(j *queue.Job) { j.Node, j.GPUs = "node2", []string{"GPU-node2-0"} })
	update(moved.ID, queue.Starting, queue.Running, func(j *queue.Job) { j.ContainerID, j.StartedAt = "c-node2", time.Now().UTC() })

	// node1's agent comes back, in the fleet, holding its node's lease.
	if _, err := e.store.Acquire(ctx, ledger.Lease{Node: "node1", Instance: "node1-2", Host: "node1", PID: os.Getpid()}, time.Hour); err != nil {
		t.Fatal(err)
	}
	e.cfg.Fleet = &FleetConfig{Store: e.store, Instance: "node1-2", Takeover: time.Hour}
	e.restart(t, 2)

	got := e.waitState(t, kept.ID, queue.Running)
	if got.ContainerID != kept.ContainerID || got.Node != "node1" || !slices.Equal(got.GPUs, kept.GPUs) ||
		got.StartedAt.After(kept.StartedAt) || got.StartedAt.Before(kept.SubmittedAt) {
		// Its start is its container's, which the engine keeps: no later
		// than the launcher's record of it, never the adoption's time.
		t.Errorf("adopted %s runs in %.12s on %s %v since %v; want its container %.12s that kept running, on node1 %v since %v",
			kept.ID, got.ContainerID, got.Node, got.GPUs, got.StartedAt, kept.ContainerID, kept.GPUs, kept.StartedAt)
	}
	for _, c := range e.jobContainers(t, moved.ID) {
		if c.State == "running" {
			t.Errorf("%s runs on node2, and its old container %.12s on node1 still runs", moved.ID, c.ID)
		}
	}
	if m, err := e.q.Job(ctx, moved.ID); err != nil || m.State != queue.Running || m.Node != "node2" || m.ContainerID != "c-node2" {
		t.Errorf("%s = %s on %s in %s (%v), want running on node2 in c-node2, untouched", moved.ID, m.State, m.Node, m.ContainerID, err)
	}

	// The adopted run is the job's: its end is the job's end.
	e.stopContainer(t, kept.ContainerID)
	if j := e.waitEnded(t, kept.ID); j.ContainerID != kept.ContainerID || j.ExitCode == nil || *j.ExitCode != 3 {
		t.Errorf("%s ended %s in %.12s, exit %s; want the end of its adopted container %.12s, exit 3", kept.ID, j.State, j.ContainerID, exitCode(j), kept.ContainerID)
	}
	if n := e.engine.createdCount(); n != 2 {
		t.Errorf("the queue created %d containers, want 2: one per job, none again", n)
	}
}

// TestFleetStartsAnewOnOtherGPUs: node1's agent dies with a job running;
// the fleet requeues the job and places it on node1 again, but on
// another GPU, before node1's agent is back. The agent claims the intent:
// the container from before, on the old GPU, is removed and the job
// starts anew on the GPU the scheduler gave it, so that the record and
// the container agree and the old GPU is not held behind the fleet's
// back.
func TestFleetStartsAnewOnOtherGPUs(t *testing.T) {
	t.Run("Restart", func(t *testing.T) { testStartsAnewOnOtherGPUs(t, false) })
	t.Run("Claim", func(t *testing.T) { testStartsAnewOnOtherGPUs(t, true) })
}

func testStartsAnewOnOtherGPUs(t *testing.T, direct bool) {
	e := newEngineEnv(t, 2, nil)
	old := e.waitState(t, e.submit(t, "alice", e.sleeper()).ID, queue.Running)
	e.stop()
	other := "GPU-test-0"
	if slices.Contains(old.GPUs, other) {
		other = "GPU-test-1"
	}

	ctx := context.Background()
	if _, err := e.store.UpdateJob(ctx, old.ID, queue.Running, func(j *queue.Job) { j.State = queue.Lost }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.UpdateJob(ctx, old.ID, queue.Lost, func(j *queue.Job) {
		j.State, j.GPUs, j.ContainerID, j.StartedAt, j.Node, j.Reason = queue.Queued, nil, "", time.Time{}, "", queue.ReasonLostRequeued
	}, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	lease, err := e.store.AcquireScheduler(ctx, "sched", "node2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.WriteIntents(ctx, lease.Token, []ledger.Intent{{JobID: old.ID, Node: "node1", GPUs: []string{other}}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Acquire(ctx, ledger.Lease{Node: "node1", Instance: "node1-2", Host: "node1", PID: os.Getpid()}, time.Hour); err != nil {
		t.Fatal(err)
	}
	e.cfg.Fleet = &FleetConfig{Store: e.store, Instance: "node1-2", Takeover: time.Hour}
	if direct {
		// The claim's own path, which a reconciliation before it
		// otherwise takes first (it removes a container whose job waits
		// for its claim): the start finds the old container.
		q, err := New(e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		e.q = q
		q.Observe(Observation{GPUs: gpus(2)})
		claimed, err := e.store.ClaimIntents(ctx, "node1", "node1-2", 0)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claim: %d intents, %v", len(claimed), err)
		}
		l := newLoop()
		q.launchIntent(ctx, l, claimed[0], l.trace.start())
		e.run(t)
	} else {
		e.restart(t, 2)
	}

	got := e.waitState(t, old.ID, queue.Running)
	if got.ContainerID == old.ContainerID || !slices.Equal(got.GPUs, []string{other}) {
		t.Errorf("%s runs in %.12s on %v; want a new container on %s, not %.12s on %v", old.ID, got.ContainerID, got.GPUs, other, old.ContainerID, old.GPUs)
	}
	for _, c := range e.jobContainers(t, old.ID) {
		if c.ID == old.ContainerID {
			t.Errorf("the container from before, %.12s (%s), is still there", c.ID, c.State)
		}
	}
	jc, err := e.engine.Inspect(ctx, got.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(jc.GPUs.IDs, []string{other}) {
		t.Errorf("the new container holds %v, want %s", jc.GPUs.IDs, other)
	}
}
