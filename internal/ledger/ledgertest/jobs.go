package ledgertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// The job states the tests use; the store checks no transition.
const (
	jobQueued    = queue.Queued
	jobStarting  = queue.Starting
	jobRunning   = queue.Running
	jobSucceeded = queue.Succeeded
	jobCancelled = queue.Cancelled
)

func newJob(user string) queue.Job {
	return queue.Job{
		Node: nodeA, Name: "train", User: user, Team: "vision", State: jobQueued, Reason: "resources",
		ReasonText: "waiting for 1 free GPU", GPUsRequested: 1, Image: "localhost/sleeper:1",
		Command: []string{"/sleeper", "--for", "10s"}, EnvKeys: []string{"WANDB_API_KEY", "SEED"},
		Request: &queue.Request{Class: queue.ClassHigh, Mounts: []string{"/data/a:/data:ro"}, Memory: 32 << 30,
			Publish: []string{"8080"}, Notify: []string{"end"}},
		TimeLimit: 4 * time.Hour, SubmittedAt: t0,
	}
}

func submitAudit(user string) audit.Event {
	return audit.Event{Time: t0, Node: nodeA, Kind: "api", Outcome: "ok", Caller: user, Role: "user",
		Source: "unix uid 1000", Action: "jobs.submit", Status: 201}
}

func submit(t *testing.T, s ledger.JobStore, j queue.Job) queue.Job {
	t.Helper()
	got, err := s.SubmitJob(context.Background(), j, submitAudit(j.User))
	if err != nil {
		t.Fatalf("SubmitJob: %v", err)
	}
	return got
}

// readBack checks that each of js, as a write (what) returned it, reads
// back so through Job, and returns them as read.
func readBack(t *testing.T, s ledger.JobStore, what string, js []queue.Job) []queue.Job {
	t.Helper()
	out := make([]queue.Job, len(js))
	for i, j := range js {
		read, err := s.Job(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d := gocmp.Diff(j, read); d != "" {
			t.Errorf("%s as %s returned it and as read (-returned +read):\n%s", j.ID, what, d)
		}
		out[i] = read
	}
	return out
}

func ids(jobs []queue.Job) []string {
	out := []string{}
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

// testJobSubmit checks that submits get increasing IDs, that a job reads
// back as it was written and that its audit row names it.
func testJobSubmit(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	a := submit(t, s, newJob("alice"))
	b := submit(t, s, newJob("bob"))
	if a.ID != "j-000001" || b.ID != "j-000002" || a.Seq != 1 || b.Seq != 2 {
		t.Errorf("IDs %s (%d), %s (%d); want j-000001 (1), j-000002 (2)", a.ID, a.Seq, b.ID, b.Seq)
	}
	if a.UpdatedAt.IsZero() || !a.SubmittedAt.Equal(t0) {
		t.Errorf("submitted %v, updated %v; want %v and set", a.SubmittedAt, a.UpdatedAt, t0)
	}
	got, err := s.Job(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff(a, got); d != "" {
		t.Errorf("Job(%s) differs from what SubmitJob returned (-submitted +read):\n%s", a.ID, d)
	}
	if _, err := s.Job(ctx, "j-999999"); !errors.Is(err, ledger.ErrJobNotFound) {
		t.Errorf("Job of an unknown ID: %v, want ErrJobNotFound", err)
	}
	ev, err := s.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 2 || ev[0].Target != a.ID || ev[1].Target != b.ID || ev[0].Action != "jobs.submit" {
		t.Errorf("audit after two submits: %+v; want two jobs.submit rows targeting %s and %s", ev, a.ID, b.ID)
	}
}

// testJobSequenceFloor checks that RaiseJobSequence moves the next ID
// above a floor and never back down.
func testJobSequenceFloor(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	submit(t, s, newJob("alice")) // j-000001
	for _, tc := range []struct {
		floor int64
		want  string
	}{
		{41, "j-000042"},
		{10, "j-000043"}, // below the sequence: no change
		{43, "j-000044"}, // equal: no change
	} {
		if err := s.RaiseJobSequence(ctx, tc.floor); err != nil {
			t.Fatalf("RaiseJobSequence(%d): %v", tc.floor, err)
		}
		if got := submit(t, s, newJob("bob")); got.ID != tc.want {
			t.Errorf("after RaiseJobSequence(%d): next ID %s, want %s", tc.floor, got.ID, tc.want)
		}
	}
}

// testJobSubmitAtomic checks that a submit whose audit row cannot be
// written leaves no job, and spends no ID.
func testJobSubmitAtomic(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	bad := submitAudit("alice")
	bad.Evidence = map[string]float64{"x": math.NaN()} // cannot be encoded
	if _, err := s.SubmitJob(ctx, newJob("alice"), bad); err == nil {
		t.Fatal("SubmitJob with an audit row that cannot be written succeeded")
	}
	all, err := s.Jobs(ctx, ledger.JobFilter{IncludeEnded: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 0 {
		t.Errorf("jobs after a failed submit: %v, want none", ids(all))
	}
	if ev, _ := s.AuditEvents(ctx, audit.Filter{}); len(ev) != 0 {
		t.Errorf("audit rows after a failed submit: %+v", ev)
	}
	if j := submit(t, s, newJob("alice")); j.ID != "j-000001" {
		t.Errorf("ID after a failed submit: %s, want j-000001", j.ID)
	}
}

// testJobCAS checks that an update applies only while the state is the
// one expected, and writes its audit row with it.
func testJobCAS(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	j := submit(t, s, newJob("alice"))
	startedAt := t0.Add(time.Minute)
	start := func(x *queue.Job) {
		x.State, x.Reason, x.ReasonText = jobStarting, "", ""
		x.GPUs, x.StartedAt, x.Attempts = []string{gpuA}, startedAt, x.Attempts+1
		x.User, x.Image = "mallory", "evil" // not the update's to change
	}
	upd := audit.Event{Time: t0.Add(time.Minute), Node: nodeA, Kind: "api", Outcome: "ok", Action: "jobs.start"}
	up, err := s.UpdateJob(ctx, j.ID, jobQueued, start, upd)
	if err != nil {
		t.Fatalf("UpdateJob queued → starting: %v", err)
	}
	if up.State != jobStarting || up.Attempts != 1 || up.User != "alice" || up.Image != j.Image || !up.StartedAt.Equal(startedAt) {
		t.Errorf("after the start: %+v", up)
	}
	got, err := s.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff(up, got); d != "" {
		t.Errorf("Job after UpdateJob (-returned +read):\n%s", d)
	}
	// A second start from queued is stale: refused, nothing written.
	_, err = s.UpdateJob(ctx, j.ID, jobQueued, start, upd)
	var se *ledger.JobStateError
	if !errors.As(err, &se) || se.Actual != jobStarting || se.Want != jobQueued || se.ID != j.ID {
		t.Fatalf("UpdateJob from a stale state: %v, want a JobStateError naming %s", err, jobStarting)
	}
	if !strings.Contains(err.Error(), string(jobStarting)) {
		t.Errorf("error %q does not name the actual state", err)
	}
	if again, _ := s.Job(ctx, j.ID); again.Attempts != 1 {
		t.Errorf("a refused update changed the job: attempts %d", again.Attempts)
	}
	code := 0
	ended, err := s.UpdateJob(ctx, j.ID, jobStarting, func(x *queue.Job) {
		x.State, x.ExitCode, x.EndedAt, x.ContainerID = jobSucceeded, &code, t0.Add(time.Hour), ctr1
	}, audit.Event{})
	if err != nil {
		t.Fatal(err)
	}
	if ended.ExitCode == nil || *ended.ExitCode != 0 || ended.ContainerID != ctr1 {
		t.Errorf("ended: %+v", ended)
	}
	if _, err := s.UpdateJob(ctx, "j-999999", jobQueued, start, upd); !errors.Is(err, ledger.ErrJobNotFound) {
		t.Errorf("UpdateJob of an unknown job: %v", err)
	}
	ev, err := s.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range ev {
		actions = append(actions, e.Action+" "+e.Target)
	}
	want := []string{"jobs.submit " + j.ID, "jobs.start " + j.ID}
	if d := gocmp.Diff(want, actions); d != "" {
		t.Errorf("audit rows (-want +got):\n%s", d)
	}
}

// testJobHeld checks SetHeld, itself a compare-and-set on the state.
func testJobHeld(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	j := submit(t, s, newJob("alice"))
	h, err := s.SetHeld(ctx, j.ID, jobQueued, true, audit.Event{Kind: "api", Action: "jobs.hold"})
	if err != nil || !h.Held {
		t.Fatalf("SetHeld: %+v, %v", h, err)
	}
	if got, _ := s.Job(ctx, j.ID); !got.Held || got.State != jobQueued {
		t.Errorf("held job reads %+v", got)
	}
	var se *ledger.JobStateError
	if _, err := s.SetHeld(ctx, j.ID, jobRunning, false, audit.Event{}); !errors.As(err, &se) {
		t.Errorf("SetHeld from a stale state: %v", err)
	}
	if h, err := s.SetHeld(ctx, j.ID, jobQueued, false, audit.Event{}); err != nil || h.Held {
		t.Errorf("release: %+v, %v", h, err)
	}
}

// testJobFilters checks Jobs' filters, that ended jobs are listed only
// when asked, and ActiveJobs.
func testJobFilters(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	var all []queue.Job
	for _, u := range []string{"alice", "bob", "alice", "carol", "alice"} {
		all = append(all, submit(t, s, newJob(u)))
	}
	move := func(j queue.Job, states ...queue.State) {
		t.Helper()
		for i := 1; i < len(states); i++ {
			to := states[i]
			if _, err := s.UpdateJob(ctx, j.ID, states[i-1], func(x *queue.Job) { x.State = to }, audit.Event{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	move(all[0], jobQueued, jobStarting, jobRunning)
	move(all[1], jobQueued, jobStarting)
	move(all[2], jobQueued, jobCancelled)
	for _, tc := range []struct {
		f    ledger.JobFilter
		want []int
	}{
		{ledger.JobFilter{}, []int{0, 1, 3, 4}},
		{ledger.JobFilter{IncludeEnded: true}, []int{0, 1, 2, 3, 4}},
		{ledger.JobFilter{User: "alice"}, []int{0, 4}},
		{ledger.JobFilter{User: "alice", IncludeEnded: true}, []int{0, 2, 4}},
		{ledger.JobFilter{States: []queue.State{jobQueued}}, []int{3, 4}},
		{ledger.JobFilter{States: []queue.State{jobCancelled}}, nil},
		{ledger.JobFilter{States: []queue.State{jobCancelled}, IncludeEnded: true}, []int{2}},
		{ledger.JobFilter{Limit: 2}, []int{0, 1}},
		{ledger.JobFilter{User: "dave"}, nil},
	} {
		got, err := s.Jobs(ctx, tc.f)
		if err != nil {
			t.Fatalf("Jobs(%+v): %v", tc.f, err)
		}
		want := []string{}
		for _, i := range tc.want {
			want = append(want, all[i].ID)
		}
		if d := gocmp.Diff(want, ids(got)); d != "" {
			t.Errorf("Jobs(%+v) (-want +got):\n%s", tc.f, d)
		}
	}
	active, err := s.ActiveJobs(ctx, jobStarting, jobRunning)
	if err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff([]string{all[0].ID, all[1].ID}, ids(active)); d != "" {
		t.Errorf("ActiveJobs(starting, running) (-want +got):\n%s", d)
	}
}

// testJobEnvKeys checks that a job keeps its environment's names and
// nothing that holds a value.
func testJobEnvKeys(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	j := submit(t, s, newJob("alice"))
	got, err := s.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff([]string{"WANDB_API_KEY", "SEED"}, got.EnvKeys); d != "" {
		t.Errorf("EnvKeys (-want +got):\n%s", d)
	}
	b, _ := json.Marshal(got)
	if strings.Contains(string(b), "=") {
		t.Errorf("the stored job holds a K=V pair: %s", b)
	}
}

// testJobConcurrentSubmits checks that submits at once get distinct,
// gap-free IDs.
func testJobConcurrentSubmits(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	const n, each = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, n*each)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := s.SubmitJob(ctx, newJob(fmt.Sprintf("user%d", w)), submitAudit("u")); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all, err := s.Jobs(ctx, ledger.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n*each {
		t.Fatalf("%d jobs after %d submits", len(all), n*each)
	}
	for i, j := range all {
		if want := ledger.JobID(int64(i + 1)); j.ID != want {
			t.Errorf("job %d: ID %s, want %s", i, j.ID, want)
		}
	}
}

// testJobSubmitTogether checks submissions at once, some of them with an
// audit row that cannot be written, as a store that writes concurrent
// submissions in one transaction gets them: each good one is stored with
// its own audit row naming it, each bad one fails alone and spends no ID,
// and the IDs run without a gap.
func testJobSubmitTogether(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	const n = 48
	var wg sync.WaitGroup
	got := make([]queue.Job, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev := submitAudit(fmt.Sprintf("user%d", i))
			if i%7 == 3 {
				ev.Evidence = map[string]float64{"x": math.NaN()} // cannot be encoded
			}
			got[i], errs[i] = s.SubmitJob(ctx, newJob(fmt.Sprintf("user%d", i)), ev)
		}()
	}
	wg.Wait()
	byID := map[string]string{}
	good := 0
	for i := range n {
		user := fmt.Sprintf("user%d", i)
		if i%7 == 3 {
			if errs[i] == nil || !strings.Contains(errs[i].Error(), "audit") {
				t.Errorf("submit %d with a bad audit row: %v, want an error naming the audit", i, errs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Errorf("submit %d: %v", i, errs[i])
			continue
		}
		if got[i].User != user {
			t.Errorf("submit %d returned %s of %s, want its own job", i, got[i].ID, got[i].User)
		}
		if prev, dup := byID[got[i].ID]; dup {
			t.Errorf("ID %s given to %s and %s", got[i].ID, prev, user)
		}
		byID[got[i].ID] = user
		good++
	}
	all, err := s.Jobs(ctx, ledger.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != good {
		t.Fatalf("%d jobs stored after %d good submits", len(all), good)
	}
	for i, j := range all {
		if want := ledger.JobID(int64(i + 1)); j.ID != want {
			t.Errorf("job %d: ID %s, want %s (no gap)", i, j.ID, want)
		}
		if byID[j.ID] != j.User {
			t.Errorf("job %s stored for %s, returned to %s", j.ID, j.User, byID[j.ID])
		}
	}
	evs, err := s.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]string{}
	for _, e := range evs {
		if _, dup := targets[e.Target]; dup {
			t.Errorf("two audit rows name %s", e.Target)
		}
		targets[e.Target] = e.Caller
	}
	if len(evs) != good {
		t.Errorf("%d audit rows after %d good submits", len(evs), good)
	}
	for id, user := range byID {
		if targets[id] != user {
			t.Errorf("job %s of %s: audit row's caller %q", id, user, targets[id])
		}
	}
}

// testJobConcurrentStarts checks that of many writers that start the
// same queued job at once exactly one wins, and the others are told the
// state it is in: a job never starts twice.
func testJobConcurrentStarts(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	j := submit(t, s, newJob("alice"))
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[w] = s.UpdateJob(ctx, j.ID, jobQueued, func(x *queue.Job) {
				x.State, x.Attempts = jobStarting, x.Attempts+1
			}, audit.Event{Kind: "api", Action: "jobs.start"})
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		var se *ledger.JobStateError
		switch {
		case err == nil:
			won++
		case errors.As(err, &se) && se.Actual == jobStarting:
		default:
			t.Errorf("a losing start: %v, want a JobStateError naming %s", err, jobStarting)
		}
	}
	if got, _ := s.Job(ctx, j.ID); won != 1 || got.Attempts != 1 {
		t.Errorf("%d of %d starts won, attempts %d; want exactly one", won, n, got.Attempts)
	}
}

// UpgradedJobs checks that a ledger migrated from an older release keeps
// jobs: its first job is j-000001.
func UpgradedJobs(t *testing.T, s ledger.Ledger) {
	t.Helper()
	if j := submit(t, s, newJob("alice")); j.ID != "j-000001" {
		t.Errorf("first job after the upgrade: %s, want j-000001", j.ID)
	}
}

// BenchSubmitJob measures SubmitJob on s: one job and its audit row, one
// transaction each, as the API will submit them; it reports jobs/s.
func BenchSubmitJob(b *testing.B, s ledger.Ledger) {
	ctx := context.Background()
	j := newJob("alice")
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		if _, err := s.SubmitJob(ctx, j, submitAudit(j.User)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}

// BenchSubmitJobParallel measures SubmitJob on s from 16 goroutines at
// once, as the API's clients submit together; it reports jobs/s.
func BenchSubmitJobParallel(b *testing.B, s ledger.Ledger) {
	ctx := context.Background()
	j := newJob("alice")
	b.SetParallelism(16 / max(1, runtime.GOMAXPROCS(0)))
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.SubmitJob(ctx, j, submitAudit(j.User)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}

// BenchActiveJobs10k reads 10,000 queued jobs as a launcher's pass does,
// every pass.
func BenchActiveJobs10k(b *testing.B, s ledger.Ledger) {
	ctx := context.Background()
	j := newJob("alice")
	for range 10000 {
		if _, err := s.SubmitJob(ctx, j, submitAudit(j.User)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		js, err := s.ActiveJobs(ctx, queue.Queued, queue.Starting, queue.Running, queue.Lost)
		if err != nil || len(js) != 10000 {
			b.Fatalf("%d jobs, %v", len(js), err)
		}
	}
}
