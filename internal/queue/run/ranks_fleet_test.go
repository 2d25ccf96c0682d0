package run

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// TestFollowersRankAsTheScheduler: in a fleet only the scheduler ranks
// the queue, but every agent's API says where a queued job stands: the
// scheduler publishes its ranking through the ledger (at most every
// publishEvery when it changes) and the others read it, positions,
// estimates and reasons as the scheduler gave them. A ranking that does
// not read leaves a follower with none, not with a crash.
func TestFollowersRankAsTheScheduler(t *testing.T) {
	var mu sync.Mutex
	clock := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	sched := newEnv(t, func(c *Config) {
		c.Now = now
		c.Fleet = &FleetConfig{Store: c.Store.(*sqlite.Store), Instance: "i-1", Takeover: time.Minute}
	})
	follower := newEnv(t, func(c *Config) {
		c.Now, c.Node, c.Store = now, "node2", sched.store
		c.Fleet = &FleetConfig{Store: sched.store, Instance: "i-2", Takeover: time.Minute}
	})
	ctx := context.Background()
	var in queue.Input
	in.GPUs = []queue.GPU{{UUID: "GPU-a", Node: "node1"}}
	in.Now = now()
	for range 3 {
		j := sched.submit(t, "alice", request())
		in.Queued = append(in.Queued, queue.QueuedJob{ID: j.ID, User: j.User, Team: j.Team, GPUs: 1, SubmittedAt: j.SubmittedAt, TimeLimit: j.TimeLimit})
	}
	plan := queue.Schedule(in)
	if len(plan.Starts) != 1 || len(plan.Waits) != 2 {
		t.Fatalf("plan: %d starts, %d waits; want 1 and 2", len(plan.Starts), len(plan.Waits))
	}
	last := plan.Waits[1]
	before, err := follower.q.Job(ctx, last.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if before.ReasonText != submittedText {
		t.Fatalf("before any ranking: %q, want %q", before.ReasonText, submittedText)
	}

	if leader, err := sched.q.lead(ctx); !leader || err != nil {
		t.Fatalf("the scheduler's agent does not lead: %v", err)
	}
	if due := sched.q.shareRanks(ctx, true, plan); !due.IsZero() {
		t.Fatalf("the first ranking was held back until %v", due)
	}
	if due := follower.q.shareRanks(ctx, false, queue.Plan{}); !due.IsZero() {
		t.Errorf("a follower's read asks for a pass at %v", due)
	}
	_, wpos, west, wok := sched.q.Rank(last.JobID)
	if !wok || wpos != 2 {
		t.Fatalf("the scheduler ranks %s at %d (%t), want 2", last.JobID, wpos, wok)
	}
	check := func(when string, want queue.Wait) {
		t.Helper()
		_, pos, est, ok := follower.q.Rank(want.JobID)
		if !ok || pos != wpos || !est.Equal(west) {
			t.Errorf("%s: the follower ranks %s at %d (%v, %t); the scheduler at %d (%v)", when, want.JobID, pos, est, ok, wpos, west)
		}
		got, err := follower.q.Job(ctx, want.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Reason != want.Reason || got.ReasonText != want.Text() {
			t.Errorf("%s: the follower says %s %q; the scheduler %s %q", when, got.Reason, got.ReasonText, want.Reason, want.Text())
		}
	}
	check("after the first ranking", last)
	if last.EstimatedStart.IsZero() {
		t.Error("the last job has no estimated start: the test does not cover estimates")
	}

	// A job held since: the plan's next ranking says so, but only once
	// publishEvery has passed since the last.
	held := in
	held.Queued = append([]queue.QueuedJob(nil), in.Queued...)
	held.Queued[2].Held = true
	plan2 := queue.Schedule(held)
	due := sched.q.shareRanks(ctx, true, plan2)
	if due.IsZero() {
		t.Fatal("a second ranking within publishEvery was published at once")
	}
	follower.q.shareRanks(ctx, false, queue.Plan{})
	check("while the second waits to be published", last)
	if _, err := follower.q.Hold(ctx, last.JobID, audit.Event{Kind: "api", Caller: "alice"}); err != nil {
		t.Fatal(err)
	}
	advance(due.Sub(now()))
	if due := sched.q.shareRanks(ctx, true, plan2); !due.IsZero() {
		t.Fatalf("the held-back ranking was held again, until %v", due)
	}
	follower.q.shareRanks(ctx, false, queue.Plan{})
	var heldWait queue.Wait
	for _, w := range plan2.Waits {
		if w.JobID == last.JobID {
			heldWait = w
		}
	}
	if heldWait.Reason != queue.ReasonHeld {
		t.Fatalf("the second plan's wait for %s: %s, want held", last.JobID, heldWait.Reason)
	}
	_, hpos, _, _ := sched.q.Rank(last.JobID)
	if _, pos, est, ok := follower.q.Rank(last.JobID); !ok || pos != hpos || !est.IsZero() {
		t.Errorf("after the second ranking: position %d (%t), estimate %v; want %d and none (held)", pos, ok, est, hpos)
	}
	if got, err := follower.q.Job(ctx, last.JobID); err != nil || got.ReasonText != heldWait.Text() {
		t.Errorf("after the second ranking the follower says %q (%v), want %q", got.ReasonText, err, heldWait.Text())
	}

	// Only the priorities changed (the queue aged): published once
	// refreshEvery has passed, not publishEvery.
	aged := plan2
	aged.Order = append([]queue.Ranked(nil), plan2.Order...)
	for i := range aged.Order {
		aged.Order[i].Priority++
	}
	published := now()
	if due := sched.q.shareRanks(ctx, true, aged); !due.Equal(published.Add(refreshEvery)) {
		t.Errorf("a ranking whose priorities alone changed is due at %v, want %v", due, published.Add(refreshEvery))
	}
	advance(refreshEvery)
	if due := sched.q.shareRanks(ctx, true, aged); !due.IsZero() {
		t.Errorf("the aged ranking was held again, until %v", due)
	}
	follower.q.shareRanks(ctx, false, queue.Plan{})
	if prio, _, _, _ := follower.q.Rank(aged.Order[0].JobID); prio != aged.Order[0].Priority {
		t.Errorf("after the refresh the follower gives %s priority %v, want %v", aged.Order[0].JobID, prio, aged.Order[0].Priority)
	}

	// A ranking that does not read: the follower shows none.
	if _, err := sched.store.PublishRanks(ctx, sched.q.Launcher.fleet.token, []byte{9, 9, 9}); err != nil {
		t.Fatal(err)
	}
	follower.q.shareRanks(ctx, false, queue.Plan{})
	if _, _, _, ok := follower.q.Rank(last.JobID); ok {
		t.Error("a ranking that does not read still ranks the job")
	}
}
