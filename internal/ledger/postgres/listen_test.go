package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// awaitWake waits for one wake-up on ch; the deadline guards against a
// hang only.
func awaitWake(t *testing.T, ch <-chan struct{}, after string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("no wake-up after %s", after)
	}
}

// drain takes a wake-up already sent, if any.
func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// TestListenWakes: one agent's store listens; another's submission, its
// release of a held job and a job's end wake its queue's channel, start
// intents its intents' channel; a listener whose connection was cut
// listens again and says so with a wake-up on both, and hears what
// follows.
func TestListenWakes(t *testing.T) {
	dsn := pgtest.DSN(t)
	proxy, viaProxy := pgtest.NewProxy(t, dsn)
	listener, writer := open(t, viaProxy), open(t, dsn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wakes := listener.Listen(ctx)
	ch := wakes.Queue
	awaitWake(t, ch, "it began to listen")
	awaitWake(t, wakes.Intents, "it began to listen")

	j, err := writer.SubmitJob(ctx, fleetJob("alice"), audit.Event{})
	if err != nil {
		t.Fatal(err)
	}
	awaitWake(t, ch, "a submission")
	select {
	case <-wakes.Intents:
		t.Error("a submission woke the intents' channel")
	default:
	}
	if _, err := writer.SetHeld(ctx, j.ID, queue.Queued, true, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.SetHeld(ctx, j.ID, queue.Queued, false, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	awaitWake(t, ch, "a release")
	drain(ch)
	start := func(j *queue.Job) { j.State, j.GPUs = queue.Starting, []string{fleetGPU} }
	if _, err := writer.UpdateJob(ctx, j.ID, queue.Queued, start, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	end := func(j *queue.Job) { j.State, j.EndedAt = queue.Cancelled, time.Now() }
	if _, err := writer.UpdateJob(ctx, j.ID, queue.Starting, end, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	awaitWake(t, ch, "a job's end")

	lease, err := writer.AcquireScheduler(ctx, "sched", fleetNode, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	k, err := writer.SubmitJob(ctx, fleetJob("bob"), audit.Event{})
	if err != nil {
		t.Fatal(err)
	}
	if err := writer.WriteIntents(ctx, lease.Token, []ledger.Intent{{JobID: k.ID, Node: fleetNode, GPUs: []string{fleetGPU}}}, nil); err != nil {
		t.Fatal(err)
	}
	awaitWake(t, wakes.Intents, "start intents")

	drain(ch)
	drain(wakes.Intents)
	proxy.Partition()
	proxy.Heal()
	awaitWake(t, ch, "the listener's connection was cut and made again")
	awaitWake(t, wakes.Intents, "the listener's connection was cut and made again")
	if _, err := writer.SubmitJob(ctx, fleetJob("bob"), audit.Event{}); err != nil {
		t.Fatal(err)
	}
	awaitWake(t, ch, "a submission after the reconnection")
}
