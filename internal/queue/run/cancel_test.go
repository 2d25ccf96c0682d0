package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// started moves queued job id to running with container cid, as a start
// would.
func (e *env) started(t *testing.T, id, cid string) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.q.Service.update(ctx, id, queue.Queued, queue.Starting, func(j *queue.Job) { j.GPUs = []string{"GPU-0"} }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.Service.update(ctx, id, queue.Starting, queue.Running, func(j *queue.Job) { j.ContainerID = cid }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
}

// TestCancelMatching: a bulk cancel ends the caller's queued jobs that
// match its filter in one audit event counting them, asks the launcher to
// stop the running ones without waiting, and leaves everything else.
func TestCancelMatching(t *testing.T) {
	e := newEnv(t, nil)
	f := &fakeLaunch{stops: map[string]*stop{}, runsOn: true}
	e.q.Service.launch = f
	ctx := context.Background()
	sub := func(user, name string) queue.Job {
		req := request()
		req.Name = name
		return e.submit(t, user, req)
	}
	s1, s2, other, held := sub("alice", "sweep-1"), sub("alice", "sweep-2"), sub("alice", "other"), sub("alice", "sweep-held")
	bobs := sub("bob", "sweep-1")
	run := sub("alice", "sweep-run")
	e.started(t, run.ID, "c-1")
	if _, err := e.q.Hold(ctx, held.ID, audit.Event{Kind: "api", Caller: "alice"}); err != nil {
		t.Fatal(err)
	}
	state := func(id string) queue.State {
		t.Helper()
		j, err := e.q.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j.State
	}

	// Queued, by name: the held one matches too; bob's and the other do not.
	got, err := e.q.CancelMatching(ctx, CancelFilter{User: "alice", States: []queue.State{queue.Queued}, Name: "sweep-*"},
		audit.Event{Kind: "api", Caller: "alice", Action: "jobs.cancel"})
	if err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff(BulkCancel{IDs: []string{s1.ID, s2.ID, held.ID}}, got); d != "" {
		t.Errorf("bulk cancel of alice's queued sweep-* (-want +got):\n%s", d)
	}
	for id, want := range map[string]queue.State{s1.ID: queue.Cancelled, s2.ID: queue.Cancelled, held.ID: queue.Cancelled,
		other.ID: queue.Queued, bobs.ID: queue.Queued, run.ID: queue.Running} {
		if got := state(id); got != want {
			t.Errorf("%s after the bulk cancel: %s, want %s", id, got, want)
		}
	}
	if j, _ := e.q.Job(ctx, s1.ID); j.Reason != queue.ReasonCancelled || j.ReasonText != "cancelled by alice" || j.EndedAt.IsZero() {
		t.Errorf("bulk-cancelled job: %s %q ended %v", j.Reason, j.ReasonText, j.EndedAt)
	}
	if _, err := os.Stat(e.q.Launcher.env.path(s1.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("env file of a bulk-cancelled job: %v, want it removed", err)
	}
	if len(f.ended) != 3 || len(f.stops) != 0 {
		t.Errorf("the launcher was told of %d ended jobs and asked %d stops; want 3 and none", len(f.ended), len(f.stops))
	}

	// Running: asked to stop, not waited for; the job is still running.
	got, err = e.q.CancelMatching(ctx, CancelFilter{User: "alice", States: []queue.State{queue.Running, queue.Starting}},
		audit.Event{Kind: "api", Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff(BulkCancel{IDs: []string{run.ID}, Stopping: 1}, got); d != "" {
		t.Errorf("bulk cancel of alice's running jobs (-want +got):\n%s", d)
	}
	if s := f.stops[run.ID]; s == nil || s.state != queue.Cancelled || s.text != "cancelled by alice" || s.audit.Kind != "" {
		t.Errorf("the stop asked of the running job: %+v, want a cancel by alice with no audit event of its own", s)
	}
	if got := state(run.ID); got != queue.Running {
		t.Errorf("the running job, once asked to stop: %s, want still running", got)
	}

	// Held only; nothing of alice's is held now: nothing cancelled, one event.
	got, err = e.q.CancelMatching(ctx, CancelFilter{User: "alice", States: []queue.State{queue.Queued}, Held: true}, audit.Event{Kind: "api", Caller: "alice"})
	if err != nil || len(got.IDs) != 0 {
		t.Errorf("bulk cancel of alice's held jobs: %v, %v; want none", got, err)
	}
	// Every user's (the API lets admins only).
	got, err = e.q.CancelMatching(ctx, CancelFilter{States: []queue.State{queue.Queued}}, audit.Event{Kind: "api", Caller: "root"})
	if err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff([]string{other.ID, bobs.ID}, got.IDs); d != "" {
		t.Errorf("bulk cancel of everyone's queued jobs (-want +got):\n%s", d)
	}

	var bulk []string
	evs, err := e.store.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if strings.HasPrefix(ev.Action, "job") && ev.Action != "jobs.submit" && ev.Action != "jobs.hold" {
			bulk = append(bulk, fmt.Sprintf("%s %s %d", ev.Action, ev.Target, ev.Count))
		}
	}
	want := []string{
		"job.cancel_bulk state=queued name=sweep-* user=alice 3",
		"job.cancel_bulk state=running,starting user=alice 1",
		"job.cancel_bulk state=queued held user=alice 0",
		"job.cancel_bulk state=queued all_users 2",
	}
	if d := gocmp.Diff(want, bulk); d != "" {
		t.Errorf("the ledger's audit rows of the cancels (-want +got):\n%s", d)
	}
	e.mu.Lock()
	var told []string
	for _, ev := range e.audited {
		if ev.Action == ActionCancelBulk {
			told = append(told, fmt.Sprintf("%s %s %d", ev.Action, ev.Target, ev.Count))
		}
	}
	e.mu.Unlock()
	if d := gocmp.Diff(want, told); d != "" {
		t.Errorf("the audit log's events of the cancels (-want +got):\n%s", d)
	}
}

// TestCancelMatchingRefuses: a filter the bulk cancel cannot take is a
// *BadRequest naming its field, and nothing is cancelled.
func TestCancelMatchingRefuses(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, "alice", request())
	for _, tc := range []struct {
		f     CancelFilter
		field string
	}{
		{CancelFilter{User: "alice"}, "state"},
		{CancelFilter{User: "alice", States: []queue.State{queue.Succeeded}}, "state"},
		{CancelFilter{User: "alice", States: []queue.State{"bogus"}}, "state"},
		{CancelFilter{User: "alice", States: []queue.State{queue.Queued, queue.Running}, Held: true}, "held"},
		{CancelFilter{User: "alice", States: []queue.State{queue.Queued}, Name: "sweep-[a"}, "name"},
		{CancelFilter{User: "alice", States: []queue.State{queue.Queued}, Name: `x\`}, "name"},
	} {
		_, err := e.q.CancelMatching(context.Background(), tc.f, audit.Event{Kind: "api", Caller: "alice"})
		var bad *BadRequest
		if !errors.As(err, &bad) || bad.Field != tc.field {
			t.Errorf("CancelMatching(%+v): %v, want a bad request naming %s", tc.f, err, tc.field)
		}
	}
	if got, _ := e.q.Job(context.Background(), j.ID); got.State != queue.Queued {
		t.Errorf("after the refusals: %s, want queued", got.State)
	}
	if got := e.auditActions(t); slices.Contains(got, ActionCancelBulk) {
		t.Errorf("a refused bulk cancel was audited: %q", got)
	}
}

// TestCancelAnswersAtOnce: the cancel of a running job asks for the stop
// and answers with the job still running, saying it is being stopped;
// CancelWait answers once it has ended.
func TestCancelAnswersAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	f := &fakeLaunch{stops: map[string]*stop{}, runsOn: true}
	e.q.Service.launch = f
	j := e.submit(t, "alice", request())
	e.started(t, j.ID, "c-1")
	got, err := e.q.Cancel(context.Background(), j.ID, audit.Event{Kind: "api", Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != queue.Running || !strings.HasPrefix(got.ReasonText, "being stopped (cancelled by alice)") {
		t.Errorf("cancel of a running job answered %s %q, want running and being stopped", got.State, got.ReasonText)
	}
	if f.stops[j.ID] == nil {
		t.Errorf("no stop asked")
	}
	// The fake's stop is done at once; the job is then what the store
	// says, which the fake launcher never changed.
	got, err = e.q.CancelWait(context.Background(), j.ID, audit.Event{Kind: "api", Caller: "alice"})
	if err != nil || got.State != queue.Running || strings.HasPrefix(got.ReasonText, "being stopped") {
		t.Errorf("CancelWait: %s %q, %v; want the job as stored", got.State, got.ReasonText, err)
	}
}
