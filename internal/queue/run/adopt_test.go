package run

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
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

// TestFleetAdoptsOnItsGPUs: node1's agent dies with a job running; the
// fleet requeues the job and places it on node1 again, but on another
// GPU, before node1's agent is back. The run that kept going is adopted
// (the fleet has not started the job elsewhere), and the job's record
// moves to the GPU its container holds; where the scheduler has placed
// another job on that GPU meanwhile, the old run is removed and the job
// starts anew where the scheduler placed it. Either way the record and
// the container agree. The restart's reconciliation leaves the container
// to the claim; the claim alone (no reconciliation before it) does the
// same.
func TestFleetAdoptsOnItsGPUs(t *testing.T) {
	for _, tc := range []struct {
		name          string
		direct, taken bool
	}{{"Restart", false, false}, {"Claim", true, false}, {"Taken", false, true}} {
		t.Run(tc.name, func(t *testing.T) { testAdoptsOnItsGPUs(t, tc.direct, tc.taken) })
	}
}

func testAdoptsOnItsGPUs(t *testing.T, direct, taken bool) {
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
	intents := []ledger.Intent{{JobID: old.ID, Node: "node1", GPUs: []string{other}}}
	if taken {
		// The scheduler placed another job on the old GPU meanwhile.
		k := e.submit(t, "bob", e.sleeper())
		intents = append(intents, ledger.Intent{JobID: k.ID, Node: "node1", GPUs: slices.Clone(old.GPUs)})
	}
	if err := e.store.WriteIntents(ctx, lease.Token, intents, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Acquire(ctx, ledger.Lease{Node: "node1", Instance: "node1-2", Host: "node1", PID: os.Getpid()}, time.Hour); err != nil {
		t.Fatal(err)
	}
	e.cfg.Fleet = &FleetConfig{Store: e.store, Instance: "node1-2", Takeover: time.Hour}
	if direct {
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
	jc, err := e.engine.Inspect(ctx, got.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(jc.GPUs.IDs, got.GPUs) {
		t.Errorf("%s's record names %v, its container %.12s holds %v", old.ID, got.GPUs, got.ContainerID, jc.GPUs.IDs)
	}
	wantGPUs := old.GPUs
	if taken {
		wantGPUs = []string{other}
		if got.ContainerID == old.ContainerID {
			t.Errorf("%s was adopted in %.12s on %v, where the scheduler placed another job", old.ID, old.ContainerID, old.GPUs)
		}
		for _, c := range e.jobContainers(t, old.ID) {
			if c.ID == old.ContainerID {
				t.Errorf("the container from before, %.12s (%s), is still there", c.ID, c.State)
			}
		}
	} else if got.ContainerID != old.ContainerID {
		t.Errorf("%s runs in %.12s, want %.12s adopted", old.ID, got.ContainerID, old.ContainerID)
	}
	if !slices.Equal(got.GPUs, wantGPUs) {
		t.Errorf("%s runs on %v, want %v", old.ID, got.GPUs, wantGPUs)
	}
}

// TestAdoptLeavesARePlacedRunToItsClaim: a reconciliation read the job
// queued, but the scheduler has since placed it on this very node: the
// adoption's compare-and-set fails, and the run that kept going stays for
// the intent's claim to adopt, rather than being stopped.
func TestAdoptLeavesARePlacedRunToItsClaim(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Fleet = &FleetConfig{Store: c.Store.(*sqlite.Store), Instance: "node1-1", Takeover: time.Hour}
	})
	ctx := context.Background()
	j := e.submit(t, "alice", request())
	stale := j // what the reconciliation read
	lease, err := e.store.AcquireScheduler(ctx, "sched", "node2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	run := container.JobContainer{ID: "c-kept", JobID: j.ID, Running: true, GPUs: container.GPURequest{IDs: []string{"GPU-a"}}}
	for _, tc := range []struct {
		node string
		want bool
	}{{"node2", false}, {"node1", true}} {
		if tc.node == "node1" {
			if _, err := e.store.UpdateJob(ctx, j.ID, queue.Starting, func(x *queue.Job) { x.State, x.GPUs, x.Node = queue.Queued, nil, "" }, audit.Event{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.store.WriteIntents(ctx, lease.Token, []ledger.Intent{{JobID: j.ID, Node: tc.node, GPUs: []string{"GPU-b"}}}, nil); err != nil {
			t.Fatal(err)
		}
		if got := e.q.Launcher.adopt(ctx, newLoop(), stale, run); got != tc.want {
			t.Errorf("placed on %s meanwhile: adopt kept the run: %t, want %t", tc.node, got, tc.want)
		}
	}
}
