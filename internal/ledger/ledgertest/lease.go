package ledgertest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Pair opens one new, empty ledger twice, as two agents would (two
// processes' worth of connections), and closes both when the test ends.
type Pair func(t *testing.T) (a, b ledger.Ledger)

// RunLeases runs the lease and fencing suite. fileLock is true for a
// backend whose second writer is refused by a lock for as long as the
// first lives (SQLite), false for one whose lease is taken over after
// silence (PostgreSQL).
func RunLeases(t *testing.T, pair Pair, fileLock bool) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b ledger.Ledger, fileLock bool)
	}{
		{"RefusedBeforeAnyWrite", testLeaseRefused},
		{"BatchOnce", testBatchOnce},
		{"Heartbeat", testLeaseHeartbeat},
		{"Release", testLeaseRelease},
		{"Takeover", testLeaseTakeover},
		{"FencedAfterTakeover", testFenced},
		{"OtherNodes", testLeaseOtherNodes},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t)
			tc.fn(t, a, b, fileLock)
		})
	}
}

func agentLease(node, instance string, pid int) ledger.Lease {
	return ledger.Lease{Node: node, Instance: instance, Host: "host-" + instance, PID: pid}
}

func acquire(t *testing.T, s ledger.Ledger, want ledger.Lease, takeover time.Duration) ledger.Lease {
	t.Helper()
	l, err := s.Acquire(context.Background(), want, takeover)
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", want.Node, want.Instance, err)
	}
	if l.Node != want.Node || l.Instance != want.Instance || l.Seq != 0 || l.Started.IsZero() || l.Heartbeat.IsZero() {
		t.Fatalf("Acquire = %+v, want the lease of %s for %s with a start and sequence 0", l, want.Node, want.Instance)
	}
	return l
}

// leaseBatch is one minute of one GPU's use on node, under id.
func leaseBatch(id ledger.BatchID, minute int) ledger.Batch {
	b := nodeBatch(id.Node, minute)
	b.ID = id
	return b
}

// nodeBatch is one minute of one GPU's use on node, without a lease.
func nodeBatch(node string, minute int) ledger.Batch {
	return ledger.Batch{
		Usage:    []ledger.Usage{usage(node, at(0, minute), ledger.KindHost, "ivan", gpuA, ledger.Sums{AllocatedSeconds: 60, UsedSeconds: 30})},
		GPUUsage: []ledger.GPUUsage{{Node: node, Start: at(0, minute), GPU: gpuA, GPUSums: ledger.GPUSums{Seconds: 60, AllocatedSeconds: 60, UsedSeconds: 30}}},
	}
}

// usedSeconds is node's used GPU-seconds in the ledger.
func usedSeconds(t *testing.T, s ledger.Ledger, node string) float64 {
	t.Helper()
	var sum float64
	for _, u := range readUsage(t, s, ledger.Filter{Node: node}) {
		sum += u.UsedSeconds
	}
	return sum
}

func testLeaseRefused(t *testing.T, a, b ledger.Ledger, fileLock bool) {
	ctx := context.Background()
	l := acquire(t, a, agentLease(nodeA, "first", 4121), time.Hour)
	write(t, a, leaseBatch(ledger.BatchID{Node: nodeA, Instance: l.Instance, Seq: 1}, 0))

	_, err := b.Acquire(ctx, agentLease(nodeA, "second", 977), time.Hour)
	var held *ledger.LeaseHeldError
	if !errors.As(err, &held) {
		t.Fatalf("second Acquire = %v, want a *LeaseHeldError", err)
	}
	if held.Holder.PID != 4121 || held.Holder.Host != "host-first" {
		t.Errorf("refusal names %+v, want pid 4121 on host-first", held.Holder)
	}
	for _, want := range []string{"pid 4121 on host-first", "since ", "last seen ", "stop it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if !fileLock && !strings.Contains(err.Error(), `node "node-a" is written by another agent`) {
		t.Errorf("refusal %q does not name the node", err)
	}
	// The first agent's lease stands: its next batch goes in.
	write(t, a, leaseBatch(ledger.BatchID{Node: nodeA, Instance: l.Instance, Seq: 2}, 1))
	if got := usedSeconds(t, b, nodeA); got != 60 {
		t.Errorf("used %v seconds, want 60 (two batches of the first agent)", got)
	}
}

func testBatchOnce(t *testing.T, a, _ ledger.Ledger, _ bool) {
	l := acquire(t, a, agentLease(nodeA, "one", 1), time.Hour)
	id := ledger.BatchID{Node: nodeA, Instance: l.Instance, Seq: 1}
	write(t, a, leaseBatch(id, 0))
	// The same batch again (a retry after a lost COMMIT reply) adds
	// nothing, and neither does an older one.
	write(t, a, leaseBatch(id, 0))
	if got := usedSeconds(t, a, nodeA); got != 30 {
		t.Fatalf("after writing batch 1 twice, used %v seconds, want 30", got)
	}
	id.Seq = 2
	write(t, a, leaseBatch(id, 1))
	id.Seq = 1
	write(t, a, leaseBatch(id, 2))
	if got := usedSeconds(t, a, nodeA); got != 60 {
		t.Fatalf("after batches 1, 2, 1, used %v seconds, want 60", got)
	}
	gpus := readGPUs(t, a, ledger.Filter{Node: nodeA})
	if len(gpus) != 1 || gpus[0].Seconds != 120 {
		t.Errorf("GPU totals %+v, want 120 seconds", gpus)
	}
	// A batch of another node under this lease is refused whole.
	bad := leaseBatch(ledger.BatchID{Node: nodeA, Instance: l.Instance, Seq: 3}, 3)
	bad.Usage[0].Node = nodeB
	if err := a.Write(context.Background(), bad); !errors.Is(err, ledger.ErrInvalidBatch) {
		t.Errorf("a batch of node-a holding node-b's rows: Write = %v, want ErrInvalidBatch", err)
	}
}

func testLeaseHeartbeat(t *testing.T, a, b ledger.Ledger, fileLock bool) {
	if fileLock {
		t.Skip("a file lock does not go silent")
	}
	l := acquire(t, a, agentLease(nodeA, "one", 1), time.Hour)
	// Silent for longer than the takeover, then renewed by an empty
	// batch with an ID: the lease stands again.
	const takeover = time.Second
	time.Sleep(takeover + 500*time.Millisecond)
	write(t, a, ledger.Batch{ID: ledger.BatchID{Node: nodeA, Instance: l.Instance, Seq: 1}})
	_, err := b.Acquire(context.Background(), agentLease(nodeA, "two", 2), takeover)
	var held *ledger.LeaseHeldError
	if !errors.As(err, &held) {
		t.Fatalf("Acquire after a heartbeat = %v, want a *LeaseHeldError", err)
	}
	if held.Silent >= takeover || held.Takeover != takeover {
		t.Errorf("refusal says silent %s, takeover %s; want under %s after the heartbeat", held.Silent, held.Takeover, takeover)
	}
}

func testLeaseRelease(t *testing.T, a, b ledger.Ledger, _ bool) {
	ctx := context.Background()
	l := acquire(t, a, agentLease(nodeA, "one", 1), time.Hour)
	write(t, a, leaseBatch(ledger.BatchID{Node: nodeA, Instance: l.Instance, Seq: 1}, 0))
	if err := a.Release(ctx, l); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// Released: the next agent takes it at once, however long the
	// takeover, and the old instance cannot write any more.
	l2 := acquire(t, b, agentLease(nodeA, "two", 2), time.Hour)
	err := a.Write(ctx, leaseBatch(ledger.BatchID{Node: nodeA, Instance: l.Instance, Seq: 2}, 1))
	if !errors.Is(err, ledger.ErrFenced) {
		t.Errorf("a write after Release = %v, want ErrFenced", err)
	}
	write(t, b, leaseBatch(ledger.BatchID{Node: nodeA, Instance: l2.Instance, Seq: 1}, 2))
	if got := usedSeconds(t, b, nodeA); got != 60 {
		t.Errorf("used %v seconds, want 60", got)
	}
}

func testLeaseTakeover(t *testing.T, a, b ledger.Ledger, fileLock bool) {
	ctx := context.Background()
	acquire(t, a, agentLease(nodeA, "one", 1), time.Hour)
	if fileLock {
		// While the first lives, its lock refuses the second whatever
		// the takeover; once it is gone (closed, as by a crash, without
		// a release), the second takes over at once.
		if _, err := b.Acquire(ctx, agentLease(nodeA, "two", 2), 0); err == nil {
			t.Fatal("Acquire with takeover 0 while the lock is held succeeded")
		}
		a.Close()
		acquire(t, b, agentLease(nodeA, "two", 2), time.Hour)
		return
	}
	time.Sleep(50 * time.Millisecond)
	acquire(t, b, agentLease(nodeA, "two", 2), 10*time.Millisecond)
}

func testFenced(t *testing.T, a, b ledger.Ledger, fileLock bool) {
	ctx := context.Background()
	l := acquire(t, a, agentLease(nodeA, "one", 1), time.Hour)
	write(t, a, leaseBatch(ledger.BatchID{Node: nodeA, Instance: l.Instance, Seq: 1}, 0))
	old := ledger.BatchID{Node: nodeA, Instance: l.Instance, Seq: 2}
	writer := a
	if fileLock {
		// The first agent dies; its pending batch reaches the file
		// through some other handle, after the second took over.
		a.Close()
		writer = b
	} else {
		time.Sleep(50 * time.Millisecond)
	}
	l2 := acquire(t, b, agentLease(nodeA, "two", 2), 10*time.Millisecond)
	err := writer.Write(ctx, leaseBatch(old, 1))
	var fe *ledger.FencedError
	if !errors.As(err, &fe) || !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("the old agent's batch after a takeover: Write = %v, want a *FencedError", err)
	}
	if fe.Holder.Instance != "two" || fe.Holder.PID != 2 {
		t.Errorf("fenced error names %+v, want instance two, pid 2", fe.Holder)
	}
	write(t, b, leaseBatch(ledger.BatchID{Node: nodeA, Instance: l2.Instance, Seq: 1}, 2))
	if got := usedSeconds(t, b, nodeA); got != 60 {
		t.Errorf("used %v seconds, want 60: the fenced batch must add nothing", got)
	}
}

func testLeaseOtherNodes(t *testing.T, a, b ledger.Ledger, fileLock bool) {
	if fileLock {
		// One file, one writer: a second node's agent is refused too.
		acquire(t, a, agentLease(nodeA, "one", 1), time.Hour)
		_, err := b.Acquire(context.Background(), agentLease(nodeB, "two", 2), time.Hour)
		var held *ledger.LeaseHeldError
		if !errors.As(err, &held) || !held.Locked || !strings.Contains(err.Error(), `node "node-a"`) {
			t.Fatalf("Acquire of node-b on node-a's file = %v, want a lock refusal naming node-a", err)
		}
		return
	}
	// Many nodes share one PostgreSQL ledger: leases of different nodes
	// are independent, and both agents write at once.
	la := acquire(t, a, agentLease(nodeA, "one", 1), time.Hour)
	lb := acquire(t, b, agentLease(nodeB, "two", 2), time.Hour)
	var wg sync.WaitGroup
	for i, pair := range []struct {
		s ledger.Ledger
		l ledger.Lease
	}{{a, la}, {b, lb}} {
		wg.Go(func() {
			for seq := uint64(1); seq <= 10; seq++ {
				if err := pair.s.Write(context.Background(), leaseBatch(ledger.BatchID{Node: pair.l.Node, Instance: pair.l.Instance, Seq: seq}, int(seq))); err != nil {
					t.Errorf("agent %d batch %d: %v", i, seq, err)
				}
			}
		})
	}
	wg.Wait()
	for _, n := range []string{nodeA, nodeB} {
		if got := usedSeconds(t, a, n); got != 300 {
			t.Errorf("%s used %v seconds, want 300", n, got)
		}
	}
}

// testRetainOneNode: on a ledger that nodes share, an agent's retention
// deletes its own node's old rows and nobody else's.
func testRetainOneNode(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	for _, n := range []string{nodeA, nodeB} {
		for _, h := range []int{0, 5} {
			b := nodeBatch(n, 0)
			b.Usage[0].Start, b.GPUUsage[0].Start = at(h, 10), at(h, 10)
			b.ContainerUsage = []ledger.ContainerUsage{{Node: n, Start: at(h, 10), ContainerID: ctr1, CPUSeconds: 7}}
			write(t, s, b)
		}
	}
	if err := s.Audit(ctx, []audit.Event{{Time: at(0, 10), Node: nodeA, Kind: "api"}, {Time: at(0, 10), Node: nodeB, Kind: "api"}}); err != nil {
		t.Fatal(err)
	}
	// Minute and hour rows before 12:00 of node-a go.
	if err := s.Retain(ctx, nodeA, at(6, 0), 2*time.Hour, 2*time.Hour); err != nil {
		t.Fatalf("Retain(node-a): %v", err)
	}
	cpu := func(node string) (sum float64) {
		for _, u := range readUsage(t, s, ledger.Filter{Node: node}) {
			sum += u.CPUSeconds
		}
		return sum
	}
	if got, gpus := usedSeconds(t, s, nodeA), readGPUs(t, s, ledger.Filter{Node: nodeA}); got != 30 || len(gpus) != 1 || gpus[0].Seconds != 60 || cpu(nodeA) != 7 {
		t.Errorf("node-a after its Retain: used %v, GPUs %+v, CPU %v; want only the recent minute (30, 60 s, 7)", got, gpus, cpu(nodeA))
	}
	if got, gpus := usedSeconds(t, s, nodeB), readGPUs(t, s, ledger.Filter{Node: nodeB}); got != 60 || len(gpus) != 1 || gpus[0].Seconds != 120 || cpu(nodeB) != 14 {
		t.Errorf("node-b after node-a's Retain: used %v, GPUs %+v, CPU %v; want all of it (60, 120 s, 14)", got, gpus, cpu(nodeB))
	}
	ev, err := s.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 1 || ev[0].Node != nodeB {
		t.Errorf("audit events after node-a's Retain: %+v, want node-b's alone", ev)
	}
}

// testTotalsSnapshot: while batches go in, every Totals read sees owners'
// rows and GPU totals of the same batches, so that rows plus idle pool
// equal the GPUs' time.
func testTotalsSnapshot(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	const batches = 150
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range batches {
			b := nodeBatch(nodeA, i%30)
			if err := s.Write(ctx, b); err != nil {
				t.Errorf("batch %d: %v", i, err)
				return
			}
		}
	}()
	defer func() { <-done }() // no write may outlive the test's store
	reads := 0
	for finished := false; !finished; reads++ {
		select {
		case <-done:
			finished = true
		default:
		}
		rows, gpus, err := s.Totals(ctx, ledger.Filter{From: at(0, 0), To: at(1, 0)})
		if err != nil {
			t.Fatalf("Totals: %v", err)
		}
		var owners, gpu float64
		for _, r := range rows {
			owners += r.AllocatedSeconds
		}
		for _, g := range gpus {
			gpu += g.AllocatedSeconds
		}
		if owners != gpu {
			t.Fatalf("read %d: owners hold %v allocated seconds, the GPUs %v: not one snapshot", reads, owners, gpu)
		}
	}
	if reads < 2 {
		t.Logf("only %d reads overlapped the writes", reads)
	}
}
