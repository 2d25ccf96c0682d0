package run

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// TestEndedEnvKeptForRequeue: an ended job's environment values are set
// aside for queue.log_retention, so that gpumeter requeue makes the job
// again with them; once that has passed, a sweep removes them and a
// requeue is refused saying why. Without a retention they go at the end.
func TestEndedEnvKeptForRequeue(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	e := newEnv(t, func(c *Config) { c.LogRetention = time.Hour; c.Now = clock })
	ctx := context.Background()
	req := request()
	req.Env = []string{"TOKEN=s3cret", "MODE=fast"}
	j := e.submit(t, "alice", req)
	if _, err := e.q.Cancel(ctx, j.ID, audit.Event{Kind: "api", Caller: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.q.Launcher.env.path(j.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the live env file of the cancelled job: %v, want it set aside", err)
	}
	again, err := e.q.Requeue(ctx, j.ID, false, audit.Event{Kind: "api", Caller: "alice"})
	if err != nil {
		t.Fatalf("requeue of a cancelled job with --env: %v", err)
	}
	env, err := e.q.Launcher.env.read(again)
	if err != nil || !slices.Equal(env, req.Env) || again.Request.RequeueOf != j.ID {
		t.Errorf("the requeued job %s: env %q, %v, requeue_of %q; want %q from %s", again.ID, env, err, again.Request.RequeueOf, req.Env, j.ID)
	}

	// Within the retention the sweep keeps it, and says when it is due.
	if due := e.q.Launcher.env.sweep(); !due.Equal(now.Add(time.Hour)) {
		t.Errorf("sweep before the retention: next due %v, want %v", due, now.Add(time.Hour))
	}
	if _, err := os.Stat(e.q.Launcher.env.path(j.ID) + endedSuffix); err != nil {
		t.Errorf("the kept env file before its retention: %v", err)
	}
	now = now.Add(time.Hour + time.Second)
	if due := e.q.Launcher.env.sweep(); !due.IsZero() {
		t.Errorf("sweep after the retention: next due %v, want none", due)
	}
	if _, err := os.Stat(e.q.Launcher.env.path(j.ID) + endedSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the kept env file after its retention: %v, want it removed", err)
	}
	_, err = e.q.Requeue(ctx, j.ID, false, audit.Event{Kind: "api", Caller: "alice"})
	var bad *BadRequest
	if !errors.As(err, &bad) || bad.Field != "id" {
		t.Errorf("requeue once the values expired: %v, want a bad request on id", err)
	}

	// No retention: the values go with the end.
	f := newEnv(t, nil)
	k := f.submit(t, "alice", req)
	if _, err := f.q.Cancel(ctx, k.ID, audit.Event{Kind: "api", Caller: "alice"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.q.Launcher.env.path(k.ID), f.q.Launcher.env.path(k.ID) + endedSuffix} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s without a log retention: %v, want it removed", p, err)
		}
	}
}

// TestRequeueOfAnArrayTask: a task made again keeps its index and its
// array's cap, so it does the same work with the same values.
func TestRequeueOfAnArrayTask(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.LogRetention = time.Hour })
	ctx := context.Background()
	req := request()
	req.Env = []string{"SEED=7"}
	a, err := queue.ParseArray("3-4%1")
	if err != nil {
		t.Fatal(err)
	}
	first, err := e.q.Submit(ctx, Submission{Request: req, User: "alice", Team: "ml", Audit: audit.Event{Kind: "api", Caller: "alice"}, Array: &a})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.Cancel(ctx, first.ID, audit.Event{Kind: "api", Caller: "alice"}); err != nil {
		t.Fatal(err)
	}
	again, err := e.q.Requeue(ctx, first.ID, false, audit.Event{Kind: "api", Caller: "alice"})
	if err != nil {
		t.Fatalf("requeue of task %s: %v", first.ID, err)
	}
	if got := again.Request.Array; got == nil || *got != (queue.ArrayTask{ID: "j-000001", Index: 3, Count: 2, MaxRunning: 1}) {
		t.Errorf("the requeued task's array place %+v, want index 3 of j-000001's 2, cap 1", got)
	}
	s, err := e.q.buildSpec(again, []string{"GPU-5f3c2a7e-0b1d-4c2e-9a8f-1e2d3c4b5a61"})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []string{"SEED=7", "GPUMETER_ARRAY_INDEX=3", "GPUMETER_ARRAY_COUNT=2"} {
		if !slices.Contains(s.Config.Env, kv) {
			t.Errorf("the requeued task's env %q lacks %s", s.Config.Env, kv)
		}
	}
}
