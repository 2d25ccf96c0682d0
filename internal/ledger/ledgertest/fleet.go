package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// The fleet's tests age a lease as the lease suite does: they wait for
// longer than a short takeover (aged), and judge with a long one
// (fresh) what must still count as live.
const (
	aged      = 50 * time.Millisecond
	shortWait = 10 * time.Millisecond
	fresh     = time.Hour
)

func nodeInfo(node, version string, gpus ...string) ledger.NodeInfo {
	n := ledger.NodeInfo{Node: node, AgentVersion: version, Images: []string{"localhost/sleeper:1"}, API: "https://" + node + ":9450"}
	for i, g := range gpus {
		n.GPUs = append(n.GPUs, ledger.NodeGPU{UUID: g, Index: i, Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30,
			NVLink: []string{"GPU-peer"}, Util: 0.25, MemoryUsedOutside: 1 << 20})
	}
	return n
}

func nodes(t *testing.T, s ledger.Ledger, takeover time.Duration) map[string]ledger.NodeStatus {
	t.Helper()
	ns, err := s.Nodes(context.Background(), takeover)
	if err != nil {
		t.Fatalf("Nodes: %v", err)
	}
	out := map[string]ledger.NodeStatus{}
	for i, n := range ns {
		if i > 0 && ns[i-1].Node >= n.Node {
			t.Errorf("Nodes lists %q after %q, want them by name", n.Node, ns[i-1].Node)
		}
		out[n.Node] = n
	}
	return out
}

// testFleetNodes checks registration, the Drained flag kept across a
// registration, and Lost read from the node's ledger lease.
func testFleetNodes(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	a := nodeInfo(nodeA, "1.0.0", gpuA, gpuB)
	a.GPUs[1].Shared, a.GPUs[1].OutsideContainer = true, "notebook"
	for _, n := range []ledger.NodeInfo{a, nodeInfo(nodeB, "1.0.0")} {
		if err := s.RegisterNode(ctx, n); err != nil {
			t.Fatalf("RegisterNode(%s): %v", n.Node, err)
		}
	}
	got := nodes(t, s, fresh)
	if len(got) != 2 {
		t.Fatalf("Nodes = %+v, want node-a and node-b", got)
	}
	ignoreTimes := cmpopts.IgnoreFields(ledger.NodeStatus{}, "Registered", "Updated")
	want := ledger.NodeStatus{NodeInfo: a, Lost: true} // no lease taken yet
	if d := gocmp.Diff(want, got[nodeA], ignoreTimes, equateEmpty); d != "" {
		t.Errorf("node-a as registered (-want +got):\n%s", d)
	}
	first := got[nodeA]
	if first.Registered.IsZero() || first.Updated.Before(first.Registered) {
		t.Errorf("node-a registered %v, updated %v; want both set, in that order", first.Registered, first.Updated)
	}

	drain := audit.Event{Time: t0, Node: nodeB, Kind: "api", Outcome: "ok", Caller: "root", Role: "admin", Action: "nodes.drain", Status: 200}
	if err := s.SetDrained(ctx, nodeA, true, drain); err != nil {
		t.Fatalf("SetDrained: %v", err)
	}
	if err := s.SetDrained(ctx, "node-z", true, drain); !errors.Is(err, ledger.ErrNodeNotFound) {
		t.Errorf("SetDrained of an unknown node = %v, want ErrNodeNotFound", err)
	}
	ev, err := s.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 1 || ev[0].Action != "nodes.drain" || ev[0].Target != nodeA {
		t.Errorf("audit after a drain and a refused one: %+v, want one nodes.drain of node-a", ev)
	}
	// The agent registers again (a restart, a new release): the admin's
	// drain and the first registration's time stand.
	a.AgentVersion, a.Images = "1.1.0", []string{"localhost/sleeper:2"}
	if err := s.RegisterNode(ctx, a); err != nil {
		t.Fatal(err)
	}
	again := nodes(t, s, fresh)[nodeA]
	if !again.Drained || again.AgentVersion != "1.1.0" || again.Images[0] != "localhost/sleeper:2" {
		t.Errorf("node-a after it registered again: %+v, want drained, version 1.1.0, the new image", again)
	}
	if !again.Registered.Equal(first.Registered) || again.Updated.Before(first.Updated) {
		t.Errorf("registered %v → %v, updated %v → %v; want the first kept and the update moved on",
			first.Registered, again.Registered, first.Updated, again.Updated)
	}
	if err := s.SetDrained(ctx, nodeA, false, audit.Event{}); err != nil || nodes(t, s, fresh)[nodeA].Drained {
		t.Errorf("undrain: %v, drained %t", err, nodes(t, s, fresh)[nodeA].Drained)
	}

	// A node is lost exactly when its ledger lease may be taken over.
	la := acquire(t, s, agentLease(nodeA, "agent-a", 11), fresh)
	if n := nodes(t, s, fresh)[nodeA]; n.Lost || n.Heartbeat.IsZero() || n.LeaseAge < 0 || n.LeaseAge > fresh {
		t.Errorf("node-a holding its lease: %+v, want live with a heartbeat", n)
	}
	if n := nodes(t, s, fresh)[nodeB]; !n.Lost || !n.Heartbeat.IsZero() || n.LeaseAge != 0 {
		t.Errorf("node-b that never took a lease: lost %t, heartbeat %v, age %v; want lost, zero, 0", n.Lost, n.Heartbeat, n.LeaseAge)
	}
	time.Sleep(aged)
	if n := nodes(t, s, shortWait)[nodeA]; !n.Lost || n.LeaseAge < aged {
		t.Errorf("node-a silent for %v judged with takeover %v: lost %t, age %v; want lost, at least %v", aged, shortWait, n.Lost, n.LeaseAge, aged)
	}
	if n := nodes(t, s, fresh)[nodeA]; n.Lost {
		t.Errorf("node-a judged with takeover %v is lost", fresh)
	}
	if err := s.Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	if n := nodes(t, s, fresh)[nodeA]; !n.Lost {
		t.Errorf("node-a after its lease was released: %+v, want lost", n)
	}
	lb := acquire(t, s, agentLease(nodeB, "agent-b", 12), fresh)
	if n := nodes(t, s, fresh)[nodeB]; n.Lost {
		t.Errorf("node-b holding its lease is lost: %+v", n)
	}
	if err := s.Release(ctx, lb); err != nil {
		t.Fatal(err)
	}
}

func acquireScheduler(t testing.TB, s ledger.Ledger, instance, node string, takeover time.Duration) ledger.SchedulerLease {
	t.Helper()
	l, err := s.AcquireScheduler(context.Background(), instance, node, takeover)
	if err != nil {
		t.Fatalf("AcquireScheduler(%s): %v", instance, err)
	}
	if l.Instance != instance || l.Node != node || l.Token <= 0 || l.Acquired.IsZero() || l.Heartbeat.Before(l.Acquired) || l.Released {
		t.Fatalf("AcquireScheduler(%s) = %+v, want the lease of %s on %s with a token and times", instance, l, instance, node)
	}
	return l
}

func scheduler(t *testing.T, s ledger.Ledger) ledger.SchedulerLease {
	t.Helper()
	l, err := s.Scheduler(context.Background())
	if err != nil {
		t.Fatalf("Scheduler: %v", err)
	}
	return l
}

// testSchedulerLease checks the scheduler lease's life: taken, renewed
// under the same token, refused to another instance, taken over after
// silence and taken after a release, each time under a higher token.
func testSchedulerLease(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	if l := scheduler(t, s); l != (ledger.SchedulerLease{}) {
		t.Errorf("Scheduler of a new ledger = %+v, want zero", l)
	}
	one := acquireScheduler(t, s, "one", nodeA, fresh)
	if got := scheduler(t, s); got != one {
		t.Errorf("Scheduler = %+v, want %+v", got, one)
	}
	renewed := acquireScheduler(t, s, "one", nodeA, fresh)
	if renewed.Token != one.Token || !renewed.Acquired.Equal(one.Acquired) || renewed.Heartbeat.Before(one.Heartbeat) {
		t.Errorf("renewal = %+v, want token %d and the acquisition kept, the heartbeat moved on", renewed, one.Token)
	}
	_, err := s.AcquireScheduler(ctx, "two", nodeB, fresh)
	var held *ledger.SchedulerHeldError
	if !errors.As(err, &held) || held.Holder.Instance != "one" || held.Holder.Node != nodeA || held.Holder.Token != one.Token {
		t.Fatalf("AcquireScheduler of another instance = %v, want a *SchedulerHeldError naming one", err)
	}
	if held.Silent < 0 || held.Silent > fresh {
		t.Errorf("refusal says the holder was silent %v", held.Silent)
	}

	time.Sleep(aged)
	two := acquireScheduler(t, s, "two", nodeB, shortWait)
	if two.Token <= one.Token {
		t.Errorf("takeover after silence: token %d, want above %d", two.Token, one.Token)
	}
	if _, err := s.AcquireScheduler(ctx, "one", nodeA, fresh); !errors.As(err, &held) || held.Holder.Instance != "two" {
		t.Errorf("the old holder's renewal after the takeover = %v, want a refusal naming two", err)
	}
	// A release under the old token gives nothing up.
	if err := s.ReleaseScheduler(ctx, one.Token); err != nil {
		t.Fatal(err)
	}
	if got := scheduler(t, s); got.Instance != "two" || got.Released {
		t.Errorf("after a release under a stale token: %+v, want two's lease standing", got)
	}
	if err := s.ReleaseScheduler(ctx, two.Token); err != nil {
		t.Fatal(err)
	}
	if got := scheduler(t, s); !got.Released || got.Token != two.Token {
		t.Errorf("after two's release: %+v, want released under token %d", got, two.Token)
	}
	three := acquireScheduler(t, s, "three", nodeA, fresh)
	if three.Token <= two.Token {
		t.Errorf("acquire after a release: token %d, want above %d", three.Token, two.Token)
	}
	// Its holder coming back after a release is a change of hands too.
	if err := s.ReleaseScheduler(ctx, three.Token); err != nil {
		t.Fatal(err)
	}
	if back := acquireScheduler(t, s, "three", nodeA, fresh); back.Token <= three.Token {
		t.Errorf("the same instance after its release: token %d, want above %d", back.Token, three.Token)
	}
}

// memJob is a memory job: 10 GiB on one shared GPU.
func memJob(user string) queue.Job {
	j := newJob(user)
	j.GPUsRequested = 0
	r := *j.Request
	r.GPUMemory = 10 << 30
	j.Request = &r
	return j
}

// placement is a fleet's record of a job placed on node's gpus.
func placement(node string, gpus ...string) *queue.PlacementRecord {
	p := &queue.PlacementRecord{Policy: queue.Target,
		Nodes: []queue.NodeCandidate{{Node: node, Score: 95, Util: 0.65, Chosen: true}, {Node: "node-z", Score: 20, Util: 0.9}}}
	for i, g := range gpus {
		p.Candidates = append(p.Candidates, queue.Candidate{UUID: g, Index: i, Node: node, Score: 95, Util: 0.65, Chosen: true})
	}
	return p
}

func intent(j queue.Job, node string, gpus ...string) ledger.Intent {
	return ledger.Intent{JobID: j.ID, Node: node, GPUs: gpus, Shared: j.Request != nil && j.Request.GPUMemory > 0, Placement: placement(node, gpus...)}
}

func startAudit(id string) audit.Event {
	return audit.Event{Time: t0, Node: nodeA, Kind: "queue", Outcome: "ok", Action: "jobs.start", Target: id}
}

func allocations(t *testing.T, s ledger.Ledger) map[ledger.NodeGPUKey]string {
	t.Helper()
	got, err := s.Allocations(context.Background())
	if err != nil {
		t.Fatalf("Allocations: %v", err)
	}
	return got
}

func checkAllocations(t *testing.T, s ledger.Ledger, when string, want map[ledger.NodeGPUKey]string) {
	t.Helper()
	if d := gocmp.Diff(want, allocations(t, s), equateEmpty); d != "" {
		t.Errorf("allocations %s (-want +got):\n%s", when, d)
	}
}

func checkState(t *testing.T, s ledger.Ledger, when string, want queue.State, jobs ...queue.Job) {
	t.Helper()
	for _, j := range jobs {
		got, err := s.Job(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != want {
			t.Errorf("job %s %s: %s, want %s", j.ID, when, got.State, want)
		}
	}
}

// auditActions lists the audit log's actions and targets.
func auditActions(t *testing.T, s ledger.Ledger) []string {
	t.Helper()
	ev, err := s.AuditEvents(context.Background(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range ev {
		out = append(out, e.Action+" "+e.Target)
	}
	return out
}

func claim(t *testing.T, s ledger.Ledger, node, instance string) []queue.Job {
	t.Helper()
	js, err := s.ClaimIntents(context.Background(), node, instance, 0)
	if err != nil {
		t.Fatalf("ClaimIntents(%s, %s): %v", node, instance, err)
	}
	return js
}

// testWriteIntents checks that intents start their jobs where they say,
// with their audit, and that the jobs read back as Job reads them.
func testWriteIntents(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	constrained := newJob("alice")
	r := *constrained.Request
	r.Node, r.Model = "node-*", "*H100*"
	constrained.Request = &r
	j1, j2 := submit(t, s, constrained), submit(t, s, newJob("bob"))
	l := acquireScheduler(t, s, "sched", nodeA, fresh)
	err := s.WriteIntents(ctx, l.Token, []ledger.Intent{intent(j1, nodeB, gpuA), intent(j2, nodeA, gpuA, gpuB)},
		[]audit.Event{startAudit(j1.ID), startAudit(j2.ID)})
	if err != nil {
		t.Fatalf("WriteIntents: %v", err)
	}
	got, err := s.Job(ctx, j1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != jobStarting || got.Node != nodeB || len(got.GPUs) != 1 || got.GPUs[0] != gpuA {
		t.Errorf("job after its intent: state %s, node %s, GPUs %v; want starting on node-b's %s", got.State, got.Node, got.GPUs, gpuA)
	}
	if d := gocmp.Diff(placement(nodeB, gpuA), got.Placement); d != "" {
		t.Errorf("placement (-want +got):\n%s", d)
	}
	if got.Request == nil || got.Request.Node != "node-*" || got.Request.Model != "*H100*" {
		t.Errorf("the job's constraints read back as %+v, want node-* and *H100*", got.Request)
	}
	checkAllocations(t, s, "after two intents", map[ledger.NodeGPUKey]string{
		{Node: nodeB, UUID: gpuA}: j1.ID, {Node: nodeA, UUID: gpuA}: j2.ID, {Node: nodeA, UUID: gpuB}: j2.ID})
	want := []string{"jobs.submit " + j1.ID, "jobs.submit " + j2.ID, "jobs.start " + j1.ID, "jobs.start " + j2.ID}
	if d := gocmp.Diff(want, auditActions(t, s)); d != "" {
		t.Errorf("audit (-want +got):\n%s", d)
	}
	if hb := scheduler(t, s).Heartbeat; hb.Before(l.Heartbeat) {
		t.Errorf("lease heartbeat %v after the write, want at least %v", hb, l.Heartbeat)
	}
	// An intent for a job that is no longer queued fails the write.
	j3 := submit(t, s, newJob("carol"))
	err = s.WriteIntents(ctx, l.Token, []ledger.Intent{intent(j3, nodeB, gpuB), intent(j1, nodeB, gpuB)}, nil)
	var se *ledger.JobStateError
	if !errors.As(err, &se) || se.ID != j1.ID || se.Actual != jobStarting {
		t.Fatalf("WriteIntents with a started job = %v, want a *JobStateError naming %s", err, j1.ID)
	}
	checkState(t, s, "after a refused write", jobQueued, j3)
	if err := s.WriteIntents(ctx, l.Token, []ledger.Intent{{JobID: "j-999999", Node: nodeB, GPUs: []string{gpuB}}}, nil); !errors.Is(err, ledger.ErrJobNotFound) {
		t.Errorf("WriteIntents for an unknown job = %v, want ErrJobNotFound", err)
	}
}

// testIntentsStaleToken checks that intents under a token that is no
// longer the lease's, or of a released lease, are refused whole.
func testIntentsStaleToken(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	j := submit(t, s, newJob("alice"))
	old := acquireScheduler(t, s, "one", nodeA, fresh)
	time.Sleep(aged)
	cur := acquireScheduler(t, s, "two", nodeB, shortWait)
	for _, tc := range []struct {
		name  string
		token int64
	}{{"TakenOver", old.Token}, {"Unknown", cur.Token + 1}} {
		err := s.WriteIntents(ctx, tc.token, []ledger.Intent{intent(j, nodeA, gpuA)}, []audit.Event{startAudit(j.ID)})
		if !errors.Is(err, ledger.ErrStaleToken) {
			t.Errorf("%s: WriteIntents = %v, want ErrStaleToken", tc.name, err)
		}
	}
	if err := s.ReleaseScheduler(ctx, cur.Token); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteIntents(ctx, cur.Token, []ledger.Intent{intent(j, nodeA, gpuA)}, []audit.Event{startAudit(j.ID)}); !errors.Is(err, ledger.ErrStaleToken) {
		t.Errorf("WriteIntents after the lease's release = %v, want ErrStaleToken", err)
	}
	checkState(t, s, "after stale writes", jobQueued, j)
	checkAllocations(t, s, "after stale writes", nil)
	if js := claim(t, s, nodeA, "agent-a"); len(js) != 0 {
		t.Errorf("intents claimed after stale writes: %v", ids(js))
	}
	if d := gocmp.Diff([]string{"jobs.submit " + j.ID}, auditActions(t, s)); d != "" {
		t.Errorf("audit after stale writes (-want +got):\n%s", d)
	}
}

// testDoubleAllocation checks that a GPU held whole is never given to a
// second job: not within one write, not against a running job, not by
// the single-host start (UpdateJob); and that a refused write leaves
// everything as it was.
func testDoubleAllocation(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	var js []queue.Job
	for _, u := range []string{"alice", "bob", "carol", "dave"} {
		js = append(js, submit(t, s, newJob(u)))
	}
	l := acquireScheduler(t, s, "sched", nodeA, fresh)
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ledger.ErrDoubleAllocation) {
			t.Errorf("%s = %v, want ErrDoubleAllocation", what, err)
		}
	}
	refused("two intents for one GPU", s.WriteIntents(ctx, l.Token,
		[]ledger.Intent{intent(js[0], nodeA, gpuB), intent(js[1], nodeA, gpuA), intent(js[2], nodeA, gpuA)},
		[]audit.Event{startAudit(js[0].ID)}))
	checkState(t, s, "after a refused write", jobQueued, js...)
	checkAllocations(t, s, "after a refused write", nil)

	// js[0] starts on the single-host path and runs on GPU A.
	start := func(x *queue.Job) { x.State, x.GPUs = jobStarting, []string{gpuA} }
	if _, err := s.UpdateJob(ctx, js[0].ID, jobQueued, start, startAudit(js[0].ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateJob(ctx, js[0].ID, jobStarting, func(x *queue.Job) { x.State = jobRunning }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	held := map[ledger.NodeGPUKey]string{{Node: nodeA, UUID: gpuA}: js[0].ID}
	checkAllocations(t, s, "with one job running", held)
	refused("an intent for a running job's GPU", s.WriteIntents(ctx, l.Token,
		[]ledger.Intent{intent(js[1], nodeA, gpuB), intent(js[2], nodeA, gpuB, gpuA)}, []audit.Event{startAudit(js[1].ID)}))
	_, err := s.UpdateJob(ctx, js[3].ID, jobQueued, start, startAudit(js[3].ID))
	refused("UpdateJob starting a job on a running job's GPU", err)
	checkState(t, s, "after refused starts", jobQueued, js[1:]...)
	checkAllocations(t, s, "after refused starts", held)
	if d := gocmp.Diff([]string{"jobs.submit " + js[0].ID, "jobs.submit " + js[1].ID, "jobs.submit " + js[2].ID,
		"jobs.submit " + js[3].ID, "jobs.start " + js[0].ID}, auditActions(t, s)); d != "" {
		t.Errorf("audit after refused starts (-want +got):\n%s", d)
	}
	// Nor does a job written as running already.
	restored := newJob("frank")
	restored.State, restored.GPUs = jobRunning, []string{gpuA}
	if _, err := s.SubmitJob(ctx, restored, submitAudit("frank")); !errors.Is(err, ledger.ErrDoubleAllocation) {
		t.Errorf("SubmitJob of a job running on a running job's GPU = %v, want ErrDoubleAllocation", err)
	}
	if all, _ := s.Jobs(ctx, ledger.JobFilter{IncludeEnded: true}); len(all) != len(js) {
		t.Errorf("%d jobs after a refused submit, want %d", len(all), len(js))
	}
	// The same UUID on another node is another GPU.
	if err := s.WriteIntents(ctx, l.Token, []ledger.Intent{intent(js[1], nodeB, gpuA)}, nil); err != nil {
		t.Errorf("an intent for node-b's GPU of the same UUID: %v", err)
	}
	// A memory job may not share a GPU held whole.
	mem := submit(t, s, memJob("erin"))
	refused("a memory job on a GPU held whole", s.WriteIntents(ctx, l.Token, []ledger.Intent{intent(mem, nodeA, gpuA)}, nil))
	checkState(t, s, "refused a GPU held whole", jobQueued, mem)
}

// testSharedAllocations checks that memory jobs share a GPU, that a job
// may not take whole a GPU that they share, and that an intent must say
// what its job is.
func testSharedAllocations(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	m1, m2, whole := submit(t, s, memJob("alice")), submit(t, s, memJob("bob")), submit(t, s, newJob("carol"))
	l := acquireScheduler(t, s, "sched", nodeA, fresh)
	if err := s.WriteIntents(ctx, l.Token, []ledger.Intent{intent(m1, nodeA, gpuB), intent(m2, nodeA, gpuB)}, nil); err != nil {
		t.Fatalf("two memory jobs on one shared GPU: %v", err)
	}
	checkState(t, s, "on a shared GPU", jobStarting, m1, m2)
	checkAllocations(t, s, "with two memory jobs", nil) // shares are not exclusive
	err := s.WriteIntents(ctx, l.Token, []ledger.Intent{intent(whole, nodeA, gpuB)}, nil)
	if !errors.Is(err, ledger.ErrDoubleAllocation) {
		t.Errorf("a whole-GPU job on a GPU memory jobs share = %v, want ErrDoubleAllocation", err)
	}
	lie := intent(whole, nodeA, gpuA)
	lie.Shared = true
	if err := s.WriteIntents(ctx, l.Token, []ledger.Intent{lie}, nil); err == nil {
		t.Error("an intent that calls a whole-GPU job shared was written")
	}
	checkState(t, s, "after refused intents", jobQueued, whole)
	// Once the memory jobs end, the GPU is free to take whole.
	for _, m := range []queue.Job{m1, m2} {
		if _, err := s.UpdateJob(ctx, m.ID, jobStarting, func(x *queue.Job) { x.State = jobSucceeded }, audit.Event{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WriteIntents(ctx, l.Token, []ledger.Intent{intent(whole, nodeA, gpuB)}, nil); err != nil {
		t.Errorf("a whole-GPU job once the memory jobs ended: %v", err)
	}
}

// testAllocationsFollowState checks that a job's allocations and intent
// go when it leaves starting and running, however it leaves, so that the
// GPU can be given again.
func testAllocationsFollowState(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	l := acquireScheduler(t, s, "sched", nodeA, fresh)
	key := ledger.NodeGPUKey{Node: nodeA, UUID: gpuA}
	for _, tc := range []struct {
		name string
		path []queue.State // from starting
	}{
		{"Requeued", []queue.State{jobQueued}},
		{"Succeeded", []queue.State{jobRunning, jobSucceeded}},
		{"Preempted", []queue.State{jobRunning, jobQueued}},
		{"Lost", []queue.State{jobRunning, queue.Lost}},
		{"Cancelled", []queue.State{jobCancelled}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := submit(t, s, newJob("alice"))
			if err := s.WriteIntents(ctx, l.Token, []ledger.Intent{intent(j, nodeA, gpuA)}, nil); err != nil {
				t.Fatalf("WriteIntents: %v", err)
			}
			checkAllocations(t, s, "after the intent", map[ledger.NodeGPUKey]string{key: j.ID})
			from := jobStarting
			for _, to := range tc.path {
				if _, err := s.UpdateJob(ctx, j.ID, from, func(x *queue.Job) {
					x.State = to
					if to == jobQueued {
						x.GPUs = nil
					}
				}, audit.Event{}); err != nil {
					t.Fatalf("%s → %s: %v", from, to, err)
				}
				from = to
				if to == jobRunning {
					checkAllocations(t, s, "while it runs", map[ledger.NodeGPUKey]string{key: j.ID})
				}
			}
			checkAllocations(t, s, "once it is "+string(from), nil)
			if js := claim(t, s, nodeA, "agent-a"); len(js) != 0 {
				t.Errorf("intents left once the job is %s: %v", from, ids(js))
			}
		})
	}
	// A requeued job may start again, on the GPU it had.
	js, err := s.Jobs(ctx, ledger.JobFilter{States: []queue.State{jobQueued}})
	if err != nil || len(js) == 0 {
		t.Fatalf("queued jobs: %v, %v", ids(js), err)
	}
	if err := s.WriteIntents(ctx, l.Token, []ledger.Intent{intent(js[0], nodeA, gpuA)}, nil); err != nil {
		t.Errorf("a requeued job's second start: %v", err)
	}
}

// testClaimIntents checks that a node claims its own intents, each once,
// and that Unclaimed names them until then.
func testClaimIntents(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	a1, b1, a2 := submit(t, s, newJob("alice")), submit(t, s, newJob("bob")), submit(t, s, newJob("carol"))
	l := acquireScheduler(t, s, "sched", nodeA, fresh)
	if err := s.WriteIntents(ctx, l.Token, []ledger.Intent{intent(a2, nodeA, gpuB), intent(b1, nodeB, gpuA), intent(a1, nodeA, gpuA)}, nil); err != nil {
		t.Fatal(err)
	}
	unclaimed := func(node string) map[string]bool {
		t.Helper()
		u, err := s.Unclaimed(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	if d := gocmp.Diff(map[string]bool{a1.ID: true, a2.ID: true}, unclaimed(nodeA)); d != "" {
		t.Errorf("node-a's unclaimed intents before its claim (-want +got):\n%s", d)
	}
	got := claim(t, s, nodeA, "agent-a")
	if d := gocmp.Diff([]string{a1.ID, a2.ID}, ids(got)); d != "" {
		t.Fatalf("node-a's claim (-want +got):\n%s", d)
	}
	if u := unclaimed(nodeA); len(u) != 0 {
		t.Errorf("node-a's unclaimed intents after its claim: %v, want none", u)
	}
	if u := unclaimed(nodeB); !u[b1.ID] || len(u) != 1 {
		t.Errorf("node-b's unclaimed intents: %v, want %s", u, b1.ID)
	}
	readBack(t, s, "ClaimIntents", got)
	if again := claim(t, s, nodeA, "agent-a2"); len(again) != 0 {
		t.Errorf("node-a's second claim: %v, want none", ids(again))
	}
	if got := claim(t, s, nodeB, "agent-b"); len(got) != 1 || got[0].ID != b1.ID || got[0].Node != nodeB {
		t.Errorf("node-b's claim: %+v, want %s", got, b1.ID)
	}
	if got := claim(t, s, "node-c", "agent-c"); len(got) != 0 {
		t.Errorf("node-c's claim: %v, want none", ids(got))
	}
	if _, err := s.ClaimIntents(ctx, nodeA, "", 0); err == nil {
		t.Error("a claim without an instance succeeded")
	}
	// A job requeued and placed again is claimed again.
	if _, err := s.UpdateJob(ctx, a1.ID, jobStarting, func(x *queue.Job) { x.State, x.GPUs = jobQueued, nil }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteIntents(ctx, l.Token, []ledger.Intent{intent(a1, nodeA, gpuA)}, nil); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, s, nodeA, "agent-a"); len(got) != 1 || got[0].ID != a1.ID {
		t.Errorf("claim after a second placement: %v, want %s", ids(got), a1.ID)
	}
	if _, err := s.ClaimIntents(ctx, nodeA, "agent-a", -1); err == nil {
		t.Error("a claim with a limit of -1 succeeded")
	}

	// A limited claim takes the oldest intents first, and the next the
	// rest.
	c1, c2, c3 := submit(t, s, newJob("alice")), submit(t, s, newJob("bob")), submit(t, s, newJob("carol"))
	if err := s.WriteIntents(ctx, l.Token, []ledger.Intent{intent(c3, "node-c", gpuA), intent(c1, "node-c", gpuB), intent(c2, "node-c", "GPU-c3")}, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range [][]string{{c1.ID, c2.ID}, {c3.ID}, nil} {
		got, err := s.ClaimIntents(ctx, "node-c", "agent-c", 2)
		if err != nil {
			t.Fatal(err)
		}
		if d := gocmp.Diff(want, ids(got), cmpopts.EquateEmpty()); d != "" {
			t.Errorf("node-c's claims of at most 2 (-want +got):\n%s", d)
		}
	}
}

// BenchWriteIntents measures one fleet pass's write on s: 128 intents,
// one for each GPU of 16 nodes × 8, in one WriteIntents; it reports
// intents/s. Each pass's jobs are submitted (one array) with the timer
// stopped, on GPUs of their own so that no pass has to free its
// predecessor's.
func BenchWriteIntents(b *testing.B, s ledger.Ledger) {
	const nodes, gpus = 16, 8
	ctx := context.Background()
	l, err := s.AcquireScheduler(ctx, "bench", nodeA, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	indices := make([]int, nodes*gpus)
	for i := range indices {
		indices[i] = i
	}
	pass := 0
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		tasks, err := s.SubmitArray(ctx, newJob("alice"), indices, 0, submitAudit("alice"))
		if err != nil {
			b.Fatal(err)
		}
		in := make([]ledger.Intent, len(tasks))
		for i, j := range tasks {
			in[i] = intent(j, fmt.Sprintf("node-%02d", i/gpus), fmt.Sprintf("GPU-%06d-%d", pass, i%gpus))
		}
		pass++
		b.StartTimer()
		start := time.Now()
		if err := s.WriteIntents(ctx, l.Token, in, nil); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
	}
	b.ReportMetric(float64(b.N*nodes*gpus)/elapsed.Seconds(), "intents/s")
}

// BenchJobLifecycle measures a single-host job's four writes with the
// allocations they keep: queued → starting on a GPU → running →
// succeeded, each UpdateJob one transaction; it reports jobs/s.
func BenchJobLifecycle(b *testing.B, s ledger.Ledger) {
	ctx := context.Background()
	j := newJob("alice")
	start := time.Now()
	for b.Loop() {
		got, err := s.SubmitJob(ctx, j, submitAudit(j.User))
		if err != nil {
			b.Fatal(err)
		}
		for _, step := range []struct {
			from queue.State
			fn   func(*queue.Job)
		}{
			{jobQueued, func(x *queue.Job) { x.State, x.GPUs = jobStarting, []string{gpuA} }},
			{jobStarting, func(x *queue.Job) { x.State = jobRunning }},
			{jobRunning, func(x *queue.Job) { x.State = jobSucceeded }},
		} {
			if _, err := s.UpdateJob(ctx, got.ID, step.from, step.fn, audit.Event{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}

// BenchNodes measures the fleet scheduler's read of every node at the top
// of its pass: n nodes of 8 GPUs registered, each holding its node lease,
// as that many agents would leave them; it reports nodes/s.
func BenchNodes(b *testing.B, s ledger.Ledger, n int) {
	ctx := context.Background()
	for i := range n {
		node := fmt.Sprintf("node-%03d", i)
		gpus := make([]string, 8)
		for g := range gpus {
			gpus[g] = fmt.Sprintf("GPU-%03d-%d", i, g)
		}
		if err := s.RegisterNode(ctx, nodeInfo(node, "1.0.0", gpus...)); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Acquire(ctx, ledger.Lease{Node: node, Instance: "bench-" + node, Host: node, PID: 1}, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	for b.Loop() {
		ns, err := s.Nodes(ctx, time.Minute)
		if err != nil || len(ns) != n {
			b.Fatalf("%d nodes, %v", len(ns), err)
		}
	}
	b.ReportMetric(float64(b.N*n)/time.Since(start).Seconds(), "nodes/s")
}

// testFleetRanks checks the fleet's ranking: published under the
// scheduler lease's token, read when newer, refused under a stale one.
func testFleetRanks(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	r, err := s.Ranks(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != 0 || r.Body != nil {
		t.Errorf("before any publish: version %d, body %q; want 0 and none", r.Version, r.Body)
	}
	old := acquireScheduler(t, s, "one", nodeA, fresh)
	v1, err := s.PublishRanks(ctx, old.Token, []byte("first\x00\xff"))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := s.PublishRanks(ctx, old.Token, []byte("second"))
	if err != nil {
		t.Fatal(err)
	}
	if v1 <= 0 || v2 <= v1 {
		t.Errorf("versions %d then %d: want them to rise from 1", v1, v2)
	}
	for _, tc := range []struct {
		since int64
		want  string
		body  bool
	}{{0, "second", true}, {v1, "second", true}, {v2, "", false}, {v2 + 5, "", false}} {
		r, err := s.Ranks(ctx, tc.since)
		if err != nil {
			t.Fatal(err)
		}
		if r.Version != v2 || r.Token != old.Token || (r.Body != nil) != tc.body || string(r.Body) != tc.want || r.Published.IsZero() {
			t.Errorf("Ranks(%d) = version %d, token %d, body %q (published %v); want %d, %d, %q", tc.since,
				r.Version, r.Token, r.Body, r.Published, v2, old.Token, tc.want)
		}
	}
	time.Sleep(aged)
	cur := acquireScheduler(t, s, "two", nodeB, shortWait)
	if _, err := s.PublishRanks(ctx, old.Token, []byte("stale")); !errors.Is(err, ledger.ErrStaleToken) {
		t.Errorf("PublishRanks under the old token = %v, want ErrStaleToken", err)
	}
	if r, err := s.Ranks(ctx, v2); err != nil || r.Body != nil {
		t.Errorf("after a stale publish: %q, %v; want no newer ranking", r.Body, err)
	}
	v3, err := s.PublishRanks(ctx, cur.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Ranks(ctx, v2); err != nil || r.Version != v3 || r.Body == nil || len(r.Body) != 0 {
		t.Errorf("an empty ranking reads as %q (version %d), %v; want empty, version %d", r.Body, r.Version, err, v3)
	}
	if err := s.ReleaseScheduler(ctx, cur.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PublishRanks(ctx, cur.Token, []byte("after")); !errors.Is(err, ledger.ErrStaleToken) {
		t.Errorf("PublishRanks after the lease's release = %v, want ErrStaleToken", err)
	}
}

// BenchPublishRanks measures the scheduler's publish of its ranking on s,
// and a follower's read of it, for n queued jobs waiting for GPUs: the
// body queue.PackRanking makes of them, without the sentences' figures
// (the queue's own benchmarks say how much those add). It reports the
// body's bytes.
func BenchPublishRanks(b *testing.B, s ledger.Ledger, n int) {
	ctx := context.Background()
	var p queue.Plan
	at := t0.Add(time.Hour)
	for i := range n {
		id := ledger.JobID(int64(i + 1))
		p.Order = append(p.Order, queue.Ranked{JobID: id, Priority: 1 / float64(i+1), Position: i + 1})
		p.Waits = append(p.Waits, queue.Wait{JobID: id, Reason: queue.ReasonResources, Position: i + 1,
			Priority: 1 / float64(i+1), EstimatedStart: at.Add(time.Duration(i/8) * time.Minute)})
	}
	body := queue.PackRanking(queue.AppendRanking(nil, p))
	l := acquireScheduler(b, s, "bench", nodeA, time.Hour)
	var version int64
	b.Run("Publish", func(b *testing.B) {
		for b.Loop() {
			v, err := s.PublishRanks(ctx, l.Token, body)
			if err != nil {
				b.Fatal(err)
			}
			version = v
		}
		b.ReportMetric(float64(len(body)), "bytes")
	})
	b.Run("Read", func(b *testing.B) {
		for b.Loop() {
			r, err := s.Ranks(ctx, version-1)
			if err != nil || len(r.Body) != len(body) {
				b.Fatalf("%d bytes, %v", len(r.Body), err)
			}
		}
	})
}
