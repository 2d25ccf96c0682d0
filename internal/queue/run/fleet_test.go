package run

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// TestSubmitInAFleet: a fleet's job waits on no node until placed, keeps
// its --node and --model patterns, and a bad pattern is refused naming
// its field; a job with --env values is pinned to the node it was
// submitted to, whose env store keeps them, and one whose --node leaves
// that node out is refused. One host refuses --node and --model: there is
// no choice to make.
func TestSubmitInAFleet(t *testing.T) {
	fleet := newEnv(t, func(c *Config) {
		c.Fleet = &FleetConfig{Store: c.Store.(*sqlite.Store), Instance: "i-1", Takeover: time.Minute}
	})
	ctx := context.Background()
	submit := func(e *env, s Submission) (queue.Job, error) {
		s.User = "alice"
		if s.Request.Image == "" {
			s.Request = request()
		}
		return e.q.Submit(ctx, s)
	}
	j, err := submit(fleet, Submission{Node: "gpu-[12]", Model: "*H100*"})
	if err != nil {
		t.Fatal(err)
	}
	if j.Node != "" || j.Request.Node != "gpu-[12]" || j.Request.Model != "*H100*" {
		t.Errorf("a fleet's job: node %q, constraints %q %q; want no node yet and the patterns kept", j.Node, j.Request.Node, j.Request.Model)
	}
	var br *BadRequest
	if _, err := submit(fleet, Submission{Node: "gpu-["}); !errors.As(err, &br) || br.Field != "node" {
		t.Errorf("--node gpu-[: %v, want a bad request on node", err)
	}
	withEnv := request()
	withEnv.Env = []string{"TOKEN=s3cret"}
	j, err = submit(fleet, Submission{Request: withEnv})
	if err != nil || j.Request.Node != "node1" {
		t.Errorf("a job with --env: %v, node constraint %q; want it pinned to node1", err, j.Request.Node)
	}
	if _, err := submit(fleet, Submission{Request: withEnv, Node: "node1"}); err != nil {
		t.Errorf("--env with --node naming this node: %v", err)
	}
	if _, err := submit(fleet, Submission{Request: withEnv, Node: "gpu-2"}); !errors.As(err, &br) || br.Field != "node" {
		t.Errorf("--env with --node gpu-2, submitted on node1: %v, want a bad request on node", err)
	}

	// A memory job may ask for what another node's shared GPU gives,
	// though this node shares none.
	if err := fleet.store.RegisterNode(ctx, ledger.NodeInfo{Node: "gpu-9", GPUs: []ledger.NodeGPU{{UUID: "GPU-9", MemoryBytes: 80 << 30, Shared: true}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.store.Acquire(ctx, ledger.Lease{Node: "gpu-9", Instance: "gpu-9-1", Host: "gpu-9", PID: 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	mem := request()
	mem.GPUs, mem.GPUMemory = 0, 10<<30
	if _, err := submit(fleet, Submission{Request: mem}); err != nil {
		t.Errorf("a 10 GiB memory job, gpu-9 sharing an 80 GiB GPU: %v", err)
	}
	mem.GPUMemory = 79 << 30
	var rf *spec.Refusal
	if _, err := submit(fleet, Submission{Request: mem}); !errors.As(err, &rf) || rf.Reason != spec.TooBig {
		t.Errorf("a 79 GiB memory job, over the shared fraction of gpu-9's 80 GiB: %v, want too_big", err)
	}

	one := newEnv(t, nil)
	for _, s := range []Submission{{Node: "gpu-1"}, {Model: "*H100*"}} {
		if _, err := submit(one, s); !errors.As(err, &br) || (br.Field != "node" && br.Field != "model") {
			t.Errorf("one host, %+v: %v, want a bad request", s, err)
		}
	}
}

// TestSubmittedWakesOnlyTheScheduler: a job queued through an agent of a
// fleet wakes its loop only while it is the fleet's scheduler (the others
// have nothing to do with a queued job); one host's always.
func TestSubmittedWakesOnlyTheScheduler(t *testing.T) {
	woke := func(q *Queue) bool {
		select {
		case <-q.Launcher.wake:
			return true
		default:
			return false
		}
	}
	fleet := newEnv(t, func(c *Config) {
		c.Fleet = &FleetConfig{Store: c.Store.(*sqlite.Store), Instance: "i-1", Takeover: time.Minute}
	})
	woke(fleet.q) // whatever New sent
	fleet.submit(t, "alice", request())
	if woke(fleet.q) {
		t.Error("a submission woke an agent of the fleet that does not schedule")
	}
	if leader, err := fleet.q.lead(context.Background()); !leader || err != nil {
		t.Fatalf("lead: %t, %v", leader, err)
	}
	fleet.submit(t, "alice", request())
	if !woke(fleet.q) {
		t.Error("a submission did not wake the fleet's scheduler")
	}
	one := newEnv(t, nil)
	woke(one.q)
	one.submit(t, "alice", request())
	if !woke(one.q) {
		t.Error("a submission did not wake one host's loop")
	}
}

// TestSpacedPasses: in a fleet a wake-up for the queue's changes within
// queuePassGap of the last pass waits for the gap's end, bringing the
// loop's timer forward to it, and one after it passes at once; one host
// always passes at once.
func TestSpacedPasses(t *testing.T) {
	at := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	now := at
	fleet := newEnv(t, func(c *Config) {
		c.Now = func() time.Time { return now }
		c.Fleet = &FleetConfig{Store: c.Store.(*sqlite.Store), Instance: "i-1", Takeover: time.Minute}
	})
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	next := at.Add(2 * time.Second)
	now = at.Add(queuePassGap / 4)
	if !fleet.q.spaced(at, &next, timer) || !next.Equal(at.Add(queuePassGap)) {
		t.Errorf("a wake-up %v after a pass: spaced to %v, want %v", queuePassGap/4, next, at.Add(queuePassGap))
	}
	next = at.Add(queuePassGap / 2) // a pass due sooner stays
	if !fleet.q.spaced(at, &next, timer) || !next.Equal(at.Add(queuePassGap/2)) {
		t.Errorf("a pass due sooner moved to %v", next)
	}
	now = at.Add(queuePassGap)
	if fleet.q.spaced(at, &next, timer) {
		t.Error("a wake-up the gap after a pass waited")
	}
	one := newEnv(t, func(c *Config) { c.Now = func() time.Time { return at } })
	if one.q.spaced(at, &next, timer) {
		t.Error("one host's wake-up waited")
	}
}
