package run

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/ledger/postgres"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// takeover is long enough that no lease taken in a test ages past it:
// a node is lost here only because its lease was released or never
// taken, never because the test was slow.
const takeover = time.Hour

// fleetBackends open a real ledger of each backend: SQLite, the one
// host's, and PostgreSQL, the fleet's (skipped where there is none).
var fleetBackends = []struct {
	name string
	open func(t *testing.T) ledger.Ledger
}{
	{"sqlite", func(t *testing.T) ledger.Ledger {
		store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		return store
	}},
	{"postgres", func(t *testing.T) ledger.Ledger {
		store, err := postgres.Open(context.Background(), pgtest.DSN(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		return store
	}},
}

// fleetStore is store with three nodes registered: gpu-a (four GPUs, one
// held by a container outside the queue, one with 10 GiB of its 80 used
// outside it), gpu-b (two GPUs, one shared for memory jobs) and gpu-c
// (none); gpu-a and gpu-b hold their ledger leases.
func fleetStore(t *testing.T, store ledger.Ledger) ledger.Ledger {
	t.Helper()
	ctx := context.Background()
	gpu := func(uuid string, i int, util float64) ledger.NodeGPU {
		return ledger.NodeGPU{UUID: uuid, Index: i, Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, Util: util}
	}
	a := ledger.NodeInfo{Node: "gpu-a", AgentVersion: "1.4.0", GPUs: []ledger.NodeGPU{
		gpu("GPU-a0", 0, 0.9), gpu("GPU-a1", 1, 0.9), gpu("GPU-a2", 2, 0.5), gpu("GPU-a3", 3, 0.1)}}
	a.GPUs[2].OutsideContainer = "notebook"
	a.GPUs[3].MemoryUsedOutside = 10 << 30
	b := ledger.NodeInfo{Node: "gpu-b", AgentVersion: "1.4.1", GPUs: []ledger.NodeGPU{gpu("GPU-b0", 0, 0.7), gpu("GPU-b1", 1, 0.7)}}
	b.GPUs[1].Shared = true
	// Memory below the threshold outside the queue leaves a GPU free.
	b.GPUs[0].MemoryUsedOutside = 1 << 30
	for _, n := range []ledger.NodeInfo{a, b, {Node: "gpu-c", AgentVersion: "1.3.0"}} {
		if err := store.RegisterNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range []string{"gpu-a", "gpu-b"} {
		if _, err := store.Acquire(ctx, ledger.Lease{Node: node, Instance: node + "-1", Host: node, PID: os.Getpid()}, takeover); err != nil {
			t.Fatal(err)
		}
	}
	return store
}

// startOn submits a job of node's and moves it to running on gpus, as
// a node's launcher does.
func startOn(t *testing.T, store ledger.Ledger, node string, gpus []string, memory uint64) queue.Job {
	t.Helper()
	ctx := context.Background()
	j := queue.Job{Node: node, State: queue.Queued, User: "alice", Image: "localhost/sleeper:1", GPUsRequested: len(gpus), TimeLimit: time.Hour, Request: &queue.Request{}}
	if memory > 0 {
		j.GPUsRequested, j.Request.GPUMemory = 0, memory
	}
	j, err := store.SubmitJob(ctx, j, audit.Event{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.UpdateJob(ctx, j.ID, queue.Queued, func(j *queue.Job) { j.State, j.GPUs = queue.Starting, gpus }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	j, err = store.UpdateJob(ctx, j.ID, queue.Starting, func(j *queue.Job) { j.State, j.ContainerID = queue.Running, "c-"+j.ID }, audit.Event{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// states is each node's state and its GPUs' by UUID.
func states(t *testing.T, n *Nodes) (map[string]queue.NodeState, map[string]queue.GPUState) {
	t.Helper()
	views, err := n.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	nodes, gpus := map[string]queue.NodeState{}, map[string]queue.GPUState{}
	for _, v := range views {
		nodes[v.Node] = v.State
		for _, g := range v.GPUs {
			gpus[g.UUID] = g.State
		}
	}
	return nodes, gpus
}

// TestNodesView: over each real store, each node's state follows its
// lease and its drain, each GPU's the jobs that hold it and the use
// outside the queue, and the score the nodes' utilisation against the
// target.
func TestNodesView(t *testing.T) {
	for _, b := range fleetBackends {
		t.Run(b.name, func(t *testing.T) { testNodesView(t, fleetStore(t, b.open(t))) })
	}
}

func testNodesView(t *testing.T, store ledger.Ledger) {
	ctx := context.Background()
	n := &Nodes{Fleet: store, Jobs: store, Takeover: takeover}

	views, err := n.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Node, Version string
		State         queue.NodeState
		SMUtil, Score float64
		GPUs          int
	}
	var got []row
	for _, v := range views {
		got = append(got, row{v.Node, v.AgentVersion, v.State, v.SMUtil, v.Score, len(v.GPUs)})
		if v.LeaseAge < 0 {
			t.Errorf("%s: lease age %v", v.Node, v.LeaseAge)
		}
	}
	// gpu-a's mean is 0.6 (score 90 at the default target 0.7), gpu-b's
	// 0.7 (100); gpu-c has no GPUs and never took a lease.
	want := []row{
		{"gpu-a", "1.4.0", queue.NodeUp, 0.6, 90, 4},
		{"gpu-b", "1.4.1", queue.NodeUp, 0.7, 100, 2},
		{"gpu-c", "1.3.0", queue.NodeLost, 0, 30, 0},
	}
	if diff := gocmp.Diff(want, got, approx); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if g := views[0].GPUs[1]; g != (queue.NodeGPUView{UUID: "GPU-a1", Index: 1, Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, State: queue.GPUFree}) {
		t.Errorf("gpu-a's GPU 1: %+v", g)
	}

	// A whole-GPU job on gpu-a and a memory job on gpu-b's shared GPU,
	// which holds no exclusive allocation: both GPUs are held.
	whole := startOn(t, store, "gpu-a", []string{"GPU-a0", "GPU-a1"}, 0)
	mem := startOn(t, store, "gpu-b", []string{"GPU-b1"}, 8<<30)
	_, gpus := states(t, n)
	wantGPUs := map[string]queue.GPUState{
		"GPU-a0": queue.GPUHeld, "GPU-a1": queue.GPUHeld, "GPU-a2": queue.GPUOutside, "GPU-a3": queue.GPUOutside,
		"GPU-b0": queue.GPUFree, "GPU-b1": queue.GPUHeld,
	}
	if diff := gocmp.Diff(wantGPUs, gpus); diff != "" {
		t.Errorf("GPUs with two jobs running (-want +got):\n%s", diff)
	}
	views, err = n.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if views[0].GPUs[0].Job != whole.ID || views[1].GPUs[1].Job != mem.ID {
		t.Errorf("held by %q and %q, want %s and %s", views[0].GPUs[0].Job, views[1].GPUs[1].Job, whole.ID, mem.ID)
	}
	allocs, err := store.Allocations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := allocs[ledger.NodeGPUKey{Node: "gpu-b", UUID: "GPU-b1"}]; ok {
		t.Errorf("the memory job holds an exclusive allocation: %v", allocs)
	}

	// A job that ends gives its GPUs back.
	if _, err := store.UpdateJob(ctx, whole.ID, queue.Running, func(j *queue.Job) { j.State = queue.Succeeded }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	if _, gpus := states(t, n); gpus["GPU-a0"] != queue.GPUFree || gpus["GPU-a1"] != queue.GPUFree {
		t.Errorf("after the job ended: %v, want GPU-a0 and GPU-a1 free", gpus)
	}

	// A drain shows as draining while the lease lives; a lost node is
	// lost, drained or not; an undrain makes a live node up again.
	if err := n.SetDrained(ctx, "gpu-a", true, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	if err := n.SetDrained(ctx, "gpu-c", true, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	nodes, _ := states(t, n)
	if diff := gocmp.Diff(map[string]queue.NodeState{"gpu-a": queue.NodeDraining, "gpu-b": queue.NodeUp, "gpu-c": queue.NodeLost}, nodes); diff != "" {
		t.Errorf("after drains of gpu-a and gpu-c (-want +got):\n%s", diff)
	}
	if err := store.Release(ctx, ledger.Lease{Node: "gpu-b", Instance: "gpu-b-1", Host: "gpu-b", PID: os.Getpid()}); err != nil {
		t.Fatal(err)
	}
	if err := n.SetDrained(ctx, "gpu-a", false, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	nodes, _ = states(t, n)
	if diff := gocmp.Diff(map[string]queue.NodeState{"gpu-a": queue.NodeUp, "gpu-b": queue.NodeLost, "gpu-c": queue.NodeLost}, nodes); diff != "" {
		t.Errorf("after gpu-b let its lease go and gpu-a was undrained (-want +got):\n%s", diff)
	}

	// An unknown node is the store's ErrNodeNotFound.
	if err := n.SetDrained(ctx, "gpu-z", true, audit.Event{}); !errors.Is(err, ledger.ErrNodeNotFound) {
		t.Errorf("drain of an unknown node: %v, want ErrNodeNotFound", err)
	}
}

// TestNodesScoreTarget: the score is around queue.target_utilization
// when one is set, and the outside-memory threshold is the queue's.
func TestNodesScoreTarget(t *testing.T) {
	store := fleetStore(t, fleetBackends[0].open(t))
	n := &Nodes{Fleet: store, Jobs: store, Takeover: takeover, Target: 0.9, OutsideThreshold: 0.2}
	views, err := n.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// gpu-a's mean 0.6 is 0.3 from 0.9; 10 GiB of 80 is under a 20%
	// threshold.
	if !gocmp.Equal(views[0].Score, 70.0, approx) || views[0].GPUs[3].State != queue.GPUFree {
		t.Errorf("gpu-a at target 0.9: score %v, GPU 3 %s; want 70 and free", views[0].Score, views[0].GPUs[3].State)
	}
}

// approx compares float64s to a millionth, as the means are sums.
var approx = gocmp.Comparer(func(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 })

// TestNodesConsolidate: over a real store, the least loaded node, whose
// one running job fits on another node at the target, is advised to
// drain, with the move, and the node it gives to is kept; a lost node is
// left out of the advice.
func TestNodesConsolidate(t *testing.T) {
	for _, b := range fleetBackends {
		t.Run(b.name, func(t *testing.T) {
			store := b.open(t)
			ctx := context.Background()
			gpus := func(node string) []ledger.NodeGPU {
				var out []ledger.NodeGPU
				for i := range 4 {
					out = append(out, ledger.NodeGPU{UUID: node + "-g" + string(rune('0'+i)), Index: i, Model: "H100", MemoryBytes: 80 << 30, Util: 0.1})
				}
				return out
			}
			for _, n := range []string{"x", "y", "gone"} {
				if err := store.RegisterNode(ctx, ledger.NodeInfo{Node: n, GPUs: gpus(n), Images: []string{"img"}}); err != nil {
					t.Fatal(err)
				}
				l, err := store.Acquire(ctx, ledger.Lease{Node: n, Instance: n + "-1", Host: n, PID: os.Getpid()}, takeover)
				if err != nil {
					t.Fatal(err)
				}
				if n == "gone" {
					if err := store.Release(ctx, l); err != nil {
						t.Fatal(err)
					}
				}
			}
			running := func(node, gpu string) string {
				j, err := store.SubmitJob(ctx, queue.Job{Node: node, Name: "train", User: "alice", State: queue.Queued, GPUsRequested: 1,
					Image: "img", Command: []string{"run"}, Request: &queue.Request{}}, audit.Event{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := store.UpdateJob(ctx, j.ID, queue.Queued, func(j *queue.Job) {
					j.State, j.GPUs, j.StartedAt = queue.Running, []string{gpu}, time.Now()
				}, audit.Event{}); err != nil {
					t.Fatal(err)
				}
				return j.ID
			}
			moved := running("x", "x-g0")
			for _, g := range []string{"y-g0", "y-g1", "y-g2"} {
				running("y", g)
			}
			n := &Nodes{Fleet: store, Jobs: store, Takeover: takeover}
			advice, err := n.Consolidate(ctx)
			if err != nil {
				t.Fatal(err)
			}
			byNode := map[string]queue.ConsolidateAdvice{}
			for _, a := range advice {
				byNode[a.Node] = a
			}
			if _, ok := byNode["gone"]; ok {
				t.Errorf("the lost node is advised on: %+v", byNode["gone"])
			}
			// The least loaded node gives; the one it gives to keeps.
			if x := byNode["x"]; !x.Drain || len(x.Moves) != 1 || x.Moves[0] != (queue.Move{JobID: moved, Node: "y"}) {
				t.Errorf("x, running %s on one of its four GPUs, beside y running three: %+v, want drain with the job moved to y", moved, x)
			}
			if y := byNode["y"]; y.Drain || len(y.Jobs) != 3 {
				t.Errorf("y, running three jobs and taking x's: %+v, want it kept", y)
			}
		})
	}
}
