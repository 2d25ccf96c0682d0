package run

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// countingStore counts the reads of single jobs and of job lists, the
// reads a pass must not make per waiting job.
type countingStore struct {
	ledger.JobStore
	reads atomic.Int64
}

func (s *countingStore) Job(ctx context.Context, id string) (queue.Job, error) {
	s.reads.Add(1)
	return s.JobStore.Job(ctx, id)
}

func (s *countingStore) Jobs(ctx context.Context, f ledger.JobFilter) ([]queue.Job, error) {
	s.reads.Add(1)
	return s.JobStore.Jobs(ctx, f)
}

// newLoop is the loop state Run makes.
func newLoop() *loop {
	return &loop{stopped: make(chan string, 16), retention: map[string]time.Time{}, retryAt: map[string]time.Time{},
		ping: engineBackoff, unsure: map[string]bool{}, stale: map[string]string{}, pendingEnds: map[string]container.JobContainer{},
		killChecks: map[string]killCheck{}, killVerdict: map[string]bool{}}
}

func (e *env) submitAfter(t *testing.T, user string, deps ...queue.Dependency) queue.Job {
	t.Helper()
	j, err := e.q.Submit(context.Background(), Submission{Request: request(), User: user, After: deps, Audit: audit.Event{Kind: "api", Caller: user}})
	if err != nil {
		t.Fatalf("submit for %s after %v: %v", user, deps, err)
	}
	return j
}

func (e *env) job(t *testing.T, id string) queue.Job {
	t.Helper()
	j, err := e.q.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestDependenciesInThePass: passes (no engine, no GPUs: nothing starts)
// keep jobs with unmet dependencies from the scheduler with reason
// dependency, fail those that can no longer be met, and read an ended
// job from the store once, not per pass: a new launcher over the same
// store reads it once more, and many ids it lacks in one read.
func TestDependenciesInThePass(t *testing.T) {
	ctx := context.Background()
	var cs *countingStore
	e := newEnv(t, func(c *Config) { cs = &countingStore{JobStore: c.Store}; c.Store = cs })
	l := newLoop()
	a := e.submit(t, "alice", request())
	ok := e.submitAfter(t, "alice", queue.Dependency{Type: queue.AfterOK, ID: a.ID})
	fail := e.submitAfter(t, "alice", queue.Dependency{Type: queue.AfterFail, ID: a.ID})
	anyJ := e.submitAfter(t, "alice", queue.Dependency{Type: queue.AfterAny, ID: a.ID})
	e.q.pass(ctx, l)
	for _, id := range []string{ok.ID, fail.ID, anyJ.ID} {
		if j := e.job(t, id); j.State != queue.Queued || j.Reason != queue.ReasonDependency || !strings.Contains(j.ReasonText, "waiting for "+a.ID+" to ") {
			t.Errorf("%s: %s %s %q, want queued for dependency, naming %s", id, j.State, j.Reason, j.ReasonText, a.ID)
		}
	}
	if _, err := e.q.Cancel(ctx, a.ID, audit.Event{Caller: "alice"}); err != nil {
		t.Fatal(err)
	}
	cs.reads.Store(0)
	e.q.pass(ctx, l)
	e.q.pass(ctx, l)
	if n := cs.reads.Load(); n != 0 {
		t.Errorf("two passes after %s ended read the store %d times, want 0: the launcher knew of its end", a.ID, n)
	}
	if j := e.job(t, ok.ID); j.State != queue.Failed || j.Reason != queue.ReasonDependencyNeverSatisfied || !strings.Contains(j.ReasonText, a.ID+" ended cancelled") || j.EndedAt.IsZero() {
		t.Errorf("%s (ok on the cancelled %s): %s %s %q, want failed, dependency_never_satisfied, naming it", ok.ID, a.ID, j.State, j.Reason, j.ReasonText)
	}
	for _, id := range []string{fail.ID, anyJ.ID} {
		if j := e.job(t, id); j.State != queue.Queued || j.Reason == queue.ReasonDependency {
			t.Errorf("%s: %s %s, want queued for something else than its met dependency", id, j.State, j.Reason)
		}
	}

	// A launcher that did not see the end reads it once, then knows it.
	q2, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	later := e.submitAfter(t, "alice", queue.Dependency{Type: queue.AfterOK, ID: a.ID})
	cs.reads.Store(0)
	q2.pass(ctx, newLoop())
	first := cs.reads.Load()
	l2 := newLoop()
	cs.reads.Store(0)
	q2.pass(ctx, l2)
	if first == 0 || first > 2 || cs.reads.Load() != 0 {
		t.Errorf("a new launcher read the store %d times in its first pass and %d in its second; want 1 or 2, then 0", first, cs.reads.Load())
	}
	if j := e.job(t, later.ID); j.State != queue.Failed || j.Reason != queue.ReasonDependencyNeverSatisfied {
		t.Errorf("%s: %s %s, want failed for dependency_never_satisfied", later.ID, j.State, j.Reason)
	}

	// Many ended jobs it never saw: one read for all of them.
	var deps []queue.Dependency
	for range depLookups + 4 {
		j := e.submit(t, "bob", request())
		if _, err := e.q.Cancel(ctx, j.ID, audit.Event{Caller: "bob"}); err != nil {
			t.Fatal(err)
		}
		deps = append(deps, queue.Dependency{Type: queue.AfterAny, ID: j.ID})
	}
	many := e.submitAfter(t, "bob", deps...)
	q3, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs.reads.Store(0)
	q3.pass(ctx, newLoop())
	if n := cs.reads.Load(); n != 1 {
		t.Errorf("a pass over a job waiting for %d ended jobs it never saw read the store %d times, want 1", len(deps), n)
	}
	if j := e.job(t, many.ID); j.State != queue.Queued || j.Reason == queue.ReasonDependency {
		t.Errorf("%s: %s %s, want its dependencies met", many.ID, j.State, j.Reason)
	}
}

// TestSubmitChecksDependencies: unknown and foreign ids are refused
// naming the id and the rule; an admin may name anyone's job.
func TestSubmitChecksDependencies(t *testing.T) {
	e := newEnv(t, nil)
	a := e.submit(t, "alice", request())
	for _, tc := range []struct {
		user  string
		admin bool
		deps  []queue.Dependency
		want  string // "" accepted
	}{
		{"alice", false, []queue.Dependency{{Type: queue.AfterOK, ID: a.ID}}, ""},
		{"bob", false, []queue.Dependency{{Type: queue.AfterOK, ID: a.ID}}, "is not bob's job"},
		{"bob", true, []queue.Dependency{{Type: queue.AfterOK, ID: a.ID}}, ""},
		{"alice", false, []queue.Dependency{{Type: queue.AfterOK, ID: "j-000404"}}, "no job or array j-000404"},
		{"alice", false, []queue.Dependency{{Type: "later", ID: a.ID}}, "not a dependency type"},
		{"alice", false, []queue.Dependency{{Type: queue.AfterAny, ID: "a b"}}, "is not a job id"},
		{"alice", false, []queue.Dependency{{Type: queue.AfterAny, ID: a.ID}, {Type: queue.AfterAny, ID: a.ID}}, "named twice"},
	} {
		_, err := e.q.Submit(context.Background(), Submission{Request: request(), User: tc.user, Admin: tc.admin, After: tc.deps})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s (admin %v) after %v: %v, want it accepted", tc.user, tc.admin, tc.deps, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s (admin %v) after %v: %v, want a refusal containing %q", tc.user, tc.admin, tc.deps, err, tc.want)
		}
		var bad *BadRequest
		if tc.want != "" && err != nil && (!errors.As(err, &bad) || bad.Field != "after") {
			t.Errorf("%s after %v: %T %v, want a *BadRequest on field after", tc.user, tc.deps, err, err)
		}
	}
}

// TestLostNotRequeuedWhenLeftOut: with lost left out of
// queue.requeue_on, a job whose container vanished ends failed
// (requeue_limit) at once, saying why, instead of running again.
func TestLostNotRequeuedWhenLeftOut(t *testing.T) {
	e := newEngineEnv(t, 1, func(c *Config) { c.MaxRequeue = 3; c.RequeueOn = []string{"engine_failure"} })
	j := e.waitState(t, e.submit(t, "alice", e.sleeper()).ID, queue.Running)
	e.stop()
	dockertest.Remove(t, e.cli, j.ContainerID)
	e.restart(t, 1)
	got := e.waitState(t, j.ID, queue.Failed)
	if got.Reason != queue.ReasonRequeueLimit || got.Requeues != 0 || !strings.Contains(got.ReasonText, "queue.requeue_on leaves out lost") {
		t.Errorf("lost job with lost not in requeue_on: %s %q requeues %d, want requeue_limit saying requeue_on leaves lost out, no requeue", got.Reason, got.ReasonText, got.Requeues)
	}
}

// TestRequeueCausesChecked: Config.RequeueOn names causes only.
func TestRequeueCausesChecked(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{{nil, ""}, {[]string{}, ""}, {[]string{"lost", "node_failure"}, ""}, {[]string{"failed"}, "submit --requeue"}, {[]string{"fire"}, "not a requeue cause"}} {
		_, err := requeueCauses(tc.names)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("requeueCauses(%q): %v, want %q", tc.names, err, tc.want)
		}
	}
	all, _ := requeueCauses(nil)
	none, _ := requeueCauses([]string{})
	if len(all) != 3 || len(none) != 0 {
		t.Errorf("nil gives %v, empty %v; want every cause, then none", all, none)
	}
}

// TestEngineStopFailsJobsWhenLeftOut: with engine_failure left out of
// queue.requeue_on, a job the engine killed as it stopped ends failed
// (requeue_limit) with the kill's exit code once the engine is back,
// and does not run again.
func TestEngineStopFailsJobsWhenLeftOut(t *testing.T) {
	d := newPrivateDaemon(t, false)
	e := newEngineEnvAt(t, 1, func(cli *client.Client) string {
		d.loadImage(t, cli, dockertest.SleeperImage(t, cli))
		return "unix://" + d.sock
	}, func(c *Config) { c.Rules.Network = "none"; c.RequeueOn = []string{"lost"} })
	r := e.sleeper()
	r.Command = []string{"ignore-term"}
	id := e.submit(t, "alice", r).ID
	e.waitState(t, id, queue.Running)
	d.stop(t)
	d.start(t)
	j := e.waitState(t, id, queue.Failed)
	if j.Reason != queue.ReasonRequeueLimit || j.ExitCode == nil || !strings.Contains(j.ReasonText, "leaves out engine_failure") || j.Requeues != 0 {
		t.Errorf("job %s: %s %q exit %s requeues %d; want requeue_limit with the kill's exit code, saying requeue_on leaves engine_failure out", id, j.Reason, j.ReasonText, exitCode(j), j.Requeues)
	}
	e.stop()
	machineEngineStillWorks(t, d)
}
