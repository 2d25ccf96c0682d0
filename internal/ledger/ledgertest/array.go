package ledgertest

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// testJobArray checks that an array job takes one sequence number for
// its id and one for each task's row, that its tasks are jobs of their
// own with their array place, that ArrayID selects them and nothing
// else, and that the one audit event names the array and its count.
func testJobArray(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	plain := submit(t, s, newJob("alice"))
	tasks, err := s.SubmitArray(ctx, newJob("alice"), []int{0, 2, 5}, 2, submitAudit("alice"))
	if err != nil {
		t.Fatalf("SubmitArray: %v", err)
	}
	if got, want := ids(tasks), []string{"j-000002_0", "j-000002_2", "j-000002_5"}; !slices.Equal(got, want) {
		t.Fatalf("task IDs %v, want %v", got, want)
	}
	for k, j := range tasks {
		if a := j.Request.Array; a == nil || a.ID != "j-000002" || a.Index != []int{0, 2, 5}[k] || a.Count != 3 || a.MaxRunning != 2 {
			t.Errorf("task %s's array place: %+v", j.ID, a)
		}
		if j.Seq != int64(3+k) || j.State != jobQueued || j.User != "alice" || j.Image != plain.Image {
			t.Errorf("task %s: seq %d, state %s, user %s, image %s", j.ID, j.Seq, j.State, j.User, j.Image)
		}
		got, err := s.Job(ctx, j.ID)
		if err != nil {
			t.Fatalf("Job(%s): %v", j.ID, err)
		}
		if got.Request.Array == nil || *got.Request.Array != *j.Request.Array || got.Seq != j.Seq {
			t.Errorf("Job(%s) reads back %+v, seq %d", j.ID, got.Request.Array, got.Seq)
		}
	}
	if _, err := s.Job(ctx, "j-000002"); err == nil {
		t.Error("the array's own id is a job's")
	}
	next := submit(t, s, newJob("bob"))
	if next.ID != "j-000006" {
		t.Errorf("the next plain job is %s, want j-000006 (after the array's id and its three tasks' rows)", next.ID)
	}
	other, err := s.SubmitArray(ctx, newJob("bob"), []int{1}, 0, submitAudit("bob"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateJob(ctx, "j-000002_2", jobQueued, func(x *queue.Job) { x.State = jobCancelled }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    ledger.JobFilter
		want []string
	}{
		{ledger.JobFilter{ArrayID: "j-000002"}, []string{"j-000002_0", "j-000002_5"}},
		{ledger.JobFilter{ArrayID: "j-000002", IncludeEnded: true}, []string{"j-000002_0", "j-000002_2", "j-000002_5"}},
		{ledger.JobFilter{ArrayID: "j-000002", States: []queue.State{jobCancelled}, IncludeEnded: true}, []string{"j-000002_2"}},
		{ledger.JobFilter{ArrayID: "j-000002", User: "bob"}, []string{}},
		{ledger.JobFilter{ArrayID: other[0].Request.Array.ID}, []string{"j-000007_1"}},
		{ledger.JobFilter{ArrayID: "j-00000"}, []string{}},  // a prefix of an id is no array
		{ledger.JobFilter{ArrayID: "j-00000_"}, []string{}}, // LIKE's _ is taken literally
		{ledger.JobFilter{ArrayID: "j-%"}, []string{}},
		{ledger.JobFilter{ArrayID: "j-000001"}, []string{}}, // a plain job has no tasks
	} {
		got, err := s.Jobs(ctx, tc.f)
		if err != nil {
			t.Fatalf("Jobs(%+v): %v", tc.f, err)
		}
		if !slices.Equal(ids(got), tc.want) {
			t.Errorf("Jobs(%+v) = %v, want %v", tc.f, ids(got), tc.want)
		}
	}
	evs, err := s.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var arrays []audit.Event
	for _, e := range evs {
		if e.Target == "j-000002" || e.Target == "j-000007" {
			arrays = append(arrays, e)
		}
	}
	if len(evs) != 4 || len(arrays) != 2 || arrays[0].Evidence["tasks"] != 3 || arrays[0].Action != "jobs.submit" {
		t.Errorf("audit events %+v, want one a submission, the array's with tasks 3", evs)
	}
}

// testJobArrayAtomic checks that an array whose audit row cannot be
// written leaves no task, no event and no gap in the sequence, and that
// a bad template or index list is refused.
func testJobArrayAtomic(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	bad := submitAudit("alice")
	bad.Evidence = map[string]float64{"x": math.NaN()}
	if _, err := s.SubmitArray(ctx, newJob("alice"), []int{0, 1}, 0, bad); err == nil {
		t.Fatal("SubmitArray with an audit row that cannot be written succeeded")
	}
	for _, tc := range []struct {
		name    string
		indices []int
		max     int
	}{{"no index", nil, 0}, {"a repeat", []int{1, 1}, 0}, {"a negative index", []int{-1}, 0}, {"a negative cap", []int{0}, -1}} {
		if _, err := s.SubmitArray(ctx, newJob("alice"), tc.indices, tc.max, submitAudit("alice")); err == nil {
			t.Errorf("SubmitArray with %s succeeded", tc.name)
		}
	}
	all, err := s.Jobs(ctx, ledger.JobFilter{IncludeEnded: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 0 {
		t.Errorf("jobs after failed array submissions: %v, want none", ids(all))
	}
	if ev, _ := s.AuditEvents(ctx, audit.Filter{}); len(ev) != 0 {
		t.Errorf("audit rows after failed array submissions: %+v", ev)
	}
	if j := submit(t, s, newJob("alice")); j.ID != "j-000001" {
		t.Errorf("ID after failed array submissions: %s, want j-000001", j.ID)
	}
}
