package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/ledger/postgres"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// agents opens n stores on one database, each with its own connections,
// as n agents on n hosts have.
func agents(t *testing.T, n int) []*postgres.Store {
	t.Helper()
	dsn := pgtest.DSN(t)
	out := make([]*postgres.Store, n)
	for i := range out {
		out[i] = open(t, dsn)
	}
	return out
}

// race runs fn(i) for each of n goroutines released at once, and returns
// their errors. A generous deadline guards against a hang only.
func race(t *testing.T, n int, fn func(ctx context.Context, i int) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			errs[i] = fn(ctx, i)
		})
	}
	close(gate)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the race did not finish: %v", ctx.Err())
	}
	return errs
}

const (
	fleetNode = "node-a"
	fleetGPU  = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
)

func fleetJob(user string) queue.Job {
	return queue.Job{Node: fleetNode, Name: "train", User: user, Team: "vision", State: queue.Queued, GPUsRequested: 1,
		Image: "localhost/sleeper:1", Command: []string{"/sleeper"}, Request: &queue.Request{}, SubmittedAt: time.Now()}
}

func submitJobs(t *testing.T, s ledger.JobStore, n int) []queue.Job {
	t.Helper()
	out := make([]queue.Job, n)
	for i := range out {
		j, err := s.SubmitJob(context.Background(), fleetJob(fmt.Sprintf("user%d", i)), audit.Event{Kind: "api", Action: "jobs.submit"})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = j
	}
	return out
}

// TestFleetSchedulerRace: agents on their own connections race for the
// scheduler lease, round after round; exactly one wins each round, under
// a token above the last round's, and the others are told who holds it.
func TestFleetSchedulerRace(t *testing.T) {
	const n, rounds = 8, 5
	as := agents(t, n)
	var last int64
	for round := range rounds {
		leases := make([]ledger.SchedulerLease, n)
		errs := race(t, n, func(ctx context.Context, i int) (err error) {
			leases[i], err = as[i].AcquireScheduler(ctx, fmt.Sprintf("agent-%d", i), fmt.Sprintf("node-%d", i), time.Hour)
			return err
		})
		winner := -1
		for i, err := range errs {
			var held *ledger.SchedulerHeldError
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: agents %d and %d both took the lease (tokens %d, %d)", round, winner, i, leases[winner].Token, leases[i].Token)
			case err == nil:
				winner = i
			case !errors.As(err, &held):
				t.Fatalf("round %d: agent %d: %v, want a *SchedulerHeldError", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody took the lease", round)
		}
		for i, err := range errs {
			var held *ledger.SchedulerHeldError
			if errors.As(err, &held) && held.Holder.Token != leases[winner].Token {
				t.Errorf("round %d: agent %d was refused by token %d, the winner holds %d", round, i, held.Holder.Token, leases[winner].Token)
			}
		}
		if leases[winner].Token <= last {
			t.Errorf("round %d: token %d, want above the last round's %d", round, leases[winner].Token, last)
		}
		last = leases[winner].Token
		if err := as[winner].ReleaseScheduler(context.Background(), last); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFleetIntentRace: agents race to start their own jobs on one GPU:
// by intents under the scheduler's token (which the lease row's lock
// serialises), by intents under stale tokens, and by the single-host
// start (UpdateJob, which only the unique index serialises). Exactly
// one start wins each round, and the GPU has one allocation.
func TestFleetIntentRace(t *testing.T) {
	const n, rounds = 8, 4
	as := agents(t, n)
	ctx := context.Background()
	for round := range rounds {
		t.Run(fmt.Sprintf("Round%d", round), func(t *testing.T) {
			jobs := submitJobs(t, as[0], n)
			l, err := as[0].AcquireScheduler(ctx, fmt.Sprintf("sched-%d", round), fleetNode, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			stale := l.Token - 1 // the last round's holder, or none
			errs := race(t, n, func(ctx context.Context, i int) error {
				j := jobs[i]
				switch i % 3 {
				case 0:
					_, err := as[i].UpdateJob(ctx, j.ID, queue.Queued, func(x *queue.Job) {
						x.State, x.GPUs = queue.Starting, []string{fleetGPU}
					}, audit.Event{Kind: "queue", Action: "jobs.start"})
					return err
				case 1:
					return as[i].WriteIntents(ctx, stale, []ledger.Intent{{JobID: j.ID, Node: fleetNode, GPUs: []string{fleetGPU}}}, nil)
				default:
					return as[i].WriteIntents(ctx, l.Token, []ledger.Intent{{JobID: j.ID, Node: fleetNode, GPUs: []string{fleetGPU}}}, nil)
				}
			})
			winner := -1
			for i, err := range errs {
				switch {
				case err == nil && winner >= 0:
					t.Fatalf("jobs %s and %s both started on the GPU", jobs[winner].ID, jobs[i].ID)
				case err == nil:
					winner = i
				case i%3 == 1 && !errors.Is(err, ledger.ErrStaleToken):
					t.Errorf("agent %d under a stale token: %v, want ErrStaleToken", i, err)
				case i%3 != 1 && !errors.Is(err, ledger.ErrDoubleAllocation):
					t.Errorf("agent %d: %v, want ErrDoubleAllocation", i, err)
				}
			}
			if winner < 0 {
				t.Fatal("no start won")
			}
			allocs, err := as[1].Allocations(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(allocs) != 1 || allocs[ledger.NodeGPUKey{Node: fleetNode, UUID: fleetGPU}] != jobs[winner].ID {
				t.Errorf("allocations %v, want the GPU held by %s", allocs, jobs[winner].ID)
			}
			for i, j := range jobs {
				got, err := as[0].Job(ctx, j.ID)
				if err != nil {
					t.Fatal(err)
				}
				if want := map[bool]queue.State{true: queue.Starting, false: queue.Queued}[i == winner]; got.State != want {
					t.Errorf("job %s: %s, want %s", j.ID, got.State, want)
				}
			}
			// The winner ends, and frees the GPU for the next round.
			if _, err := as[0].UpdateJob(ctx, jobs[winner].ID, queue.Starting, func(x *queue.Job) { x.State = queue.Succeeded }, audit.Event{}); err != nil {
				t.Fatal(err)
			}
			if err := as[0].ReleaseScheduler(ctx, l.Token); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFleetClaimRace: while the scheduler writes intents for one node,
// agents on their own connections claim them at once; every intent is
// claimed, and none twice.
func TestFleetClaimRace(t *testing.T) {
	const claimers, jobs, perWrite = 4, 60, 3
	as := agents(t, claimers+1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sched := as[claimers]
	all := submitJobs(t, sched, jobs)
	l, err := sched.AcquireScheduler(ctx, "sched", fleetNode, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		for k := 0; k < jobs; k += perWrite {
			var in []ledger.Intent
			for i := k; i < min(k+perWrite, jobs); i++ {
				in = append(in, ledger.Intent{JobID: all[i].ID, Node: fleetNode, GPUs: []string{fmt.Sprintf("GPU-%03d", i)}})
			}
			if err := sched.WriteIntents(ctx, l.Token, in, nil); err != nil {
				t.Errorf("WriteIntents: %v", err)
				return
			}
		}
	}()
	claimed := make([][]queue.Job, claimers)
	var wg sync.WaitGroup
	for c := range claimers {
		wg.Go(func() {
			for done := false; ; {
				select {
				case <-written:
					done = true
				default:
				}
				js, err := as[c].ClaimIntents(ctx, fleetNode, fmt.Sprintf("agent-%d", c), 0)
				if err != nil {
					t.Errorf("claimer %d: %v", c, err)
					return
				}
				claimed[c] = append(claimed[c], js...)
				if done && len(js) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	// Whatever a claim skipped while another held it is left for this one.
	rest, err := sched.ClaimIntents(ctx, fleetNode, "last", 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for c, js := range append(claimed, rest) {
		for _, j := range js {
			if prev, ok := seen[j.ID]; ok {
				t.Errorf("job %s claimed by %d and by %d", j.ID, prev, c)
			}
			seen[j.ID] = c
			if j.State != queue.Starting || j.Node != fleetNode {
				t.Errorf("claimed job %s is %s on %q, want starting on %s", j.ID, j.State, j.Node, fleetNode)
			}
		}
	}
	if len(seen) != jobs {
		t.Errorf("%d of %d intents claimed", len(seen), jobs)
	}
}

// TestFleetSharedRace: whole-GPU jobs and memory jobs race to start on
// one GPU on their own connections. Memory jobs may share it, but a job
// that holds it whole holds it alone: each round either one whole job
// or only memory jobs win.
func TestFleetSharedRace(t *testing.T) {
	const n, rounds = 8, 4
	as := agents(t, n)
	ctx := context.Background()
	for round := range rounds {
		jobs := make([]queue.Job, n)
		for i := range jobs {
			j := fleetJob(fmt.Sprintf("user%d", i))
			if i%2 == 1 {
				j.GPUsRequested, j.Request = 0, &queue.Request{GPUMemory: 4 << 30}
			}
			var err error
			if jobs[i], err = as[0].SubmitJob(ctx, j, audit.Event{}); err != nil {
				t.Fatal(err)
			}
		}
		errs := race(t, n, func(ctx context.Context, i int) error {
			_, err := as[i].UpdateJob(ctx, jobs[i].ID, queue.Queued, func(x *queue.Job) {
				x.State, x.GPUs = queue.Starting, []string{fleetGPU}
			}, audit.Event{})
			return err
		})
		var whole, shared []string
		for i, err := range errs {
			switch {
			case err == nil && i%2 == 0:
				whole = append(whole, jobs[i].ID)
			case err == nil:
				shared = append(shared, jobs[i].ID)
			case !errors.Is(err, ledger.ErrDoubleAllocation):
				t.Errorf("round %d: job %s: %v, want ErrDoubleAllocation", round, jobs[i].ID, err)
			}
		}
		if len(whole)+len(shared) == 0 || len(whole) > 1 || len(whole) == 1 && len(shared) > 0 {
			t.Fatalf("round %d: started whole %v and shared %v, want one whole job alone or memory jobs only", round, whole, shared)
		}
		for _, id := range append(whole, shared...) {
			if _, err := as[0].UpdateJob(ctx, id, queue.Starting, func(x *queue.Job) { x.State = queue.Succeeded }, audit.Event{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}
