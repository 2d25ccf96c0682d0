package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// bulkAudit is the one event of a bulk cancel.
func bulkAudit(count int64) audit.Event {
	return audit.Event{Time: t0.Add(time.Hour), Node: nodeA, Kind: "api", Outcome: "allowed", Caller: "alice", Role: "user",
		Action: "job.cancel_bulk", Target: "state=queued", Status: 200, Count: count}
}

// testJobCancelBulk checks CancelJobs: the queued jobs among the IDs end
// cancelled in one write with one audit row counting them; a job that is
// not queued, or not known, is left as it is.
func testJobCancelBulk(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	var js []queue.Job
	for _, u := range []string{"alice", "alice", "alice", "alice", "alice"} {
		js = append(js, submit(t, s, newJob(u)))
	}
	if _, err := s.UpdateJob(ctx, js[2].ID, jobQueued, func(x *queue.Job) { x.State, x.GPUs = jobRunning, []string{gpuA} }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateJob(ctx, js[3].ID, jobQueued, func(x *queue.Job) { x.State = jobCancelled }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	endedAt := t0.Add(time.Hour)
	c := ledger.JobCancel{Reason: "cancelled", ReasonText: "cancelled by alice", EndedAt: endedAt}
	// The count starts at 1: the caller's running job being stopped.
	got, err := s.CancelJobs(ctx, []string{js[1].ID, js[0].ID, js[2].ID, js[3].ID, "j-999999"}, c, bulkAudit(1))
	if err != nil {
		t.Fatalf("CancelJobs: %v", err)
	}
	if d := gocmp.Diff([]string{js[0].ID, js[1].ID}, ids(got)); d != "" {
		t.Fatalf("CancelJobs returned (-want +got):\n%s", d)
	}
	for _, read := range readBack(t, s, "CancelJobs", got) {
		if read.State != jobCancelled || read.Reason != "cancelled" || read.ReasonText != "cancelled by alice" ||
			!read.EndedAt.Equal(endedAt) || len(read.GPUs) != 0 || read.Image != js[0].Image || read.Request == nil {
			t.Errorf("cancelled %s: %+v", read.ID, read)
		}
	}
	for i, want := range map[int]queue.State{2: jobRunning, 3: jobCancelled, 4: jobQueued} {
		if j, err := s.Job(ctx, js[i].ID); err != nil || j.State != want {
			t.Errorf("%s after CancelJobs: %s, %v; want %s", js[i].ID, j.State, err, want)
		}
	}
	// Its revision moved: an update from queued read before is refused.
	var se *ledger.JobStateError
	if _, err := s.UpdateJob(ctx, js[0].ID, jobQueued, func(x *queue.Job) { x.State = jobStarting }, audit.Event{}); !errors.As(err, &se) || se.Actual != jobCancelled {
		t.Errorf("a start of a cancelled job: %v, want a JobStateError naming cancelled", err)
	}
	// Nothing to cancel still writes the one audit row.
	if none, err := s.CancelJobs(ctx, nil, c, bulkAudit(2)); err != nil || len(none) != 0 {
		t.Errorf("CancelJobs(nil): %v, %v; want nothing cancelled", ids(none), err)
	}
	if _, err := s.CancelJobs(ctx, []string{js[4].ID}, ledger.JobCancel{Reason: "cancelled"}, bulkAudit(0)); err == nil {
		t.Errorf("CancelJobs without an end time succeeded")
	}
	if j, _ := s.Job(ctx, js[4].ID); j.State != jobQueued {
		t.Errorf("a refused CancelJobs changed %s to %s", j.ID, j.State)
	}
	ev, err := s.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var bulk []string
	for _, e := range ev {
		if e.Action == "job.cancel_bulk" {
			bulk = append(bulk, fmt.Sprintf("%s %d", e.Target, e.Count))
		}
	}
	if d := gocmp.Diff([]string{"state=queued 3", "state=queued 2"}, bulk); d != "" {
		t.Errorf("the bulk cancels' audit rows (-want +got):\n%s", d)
	}
}

// testJobCancelBulkMany checks that CancelJobs takes more IDs than one
// statement names, all in its one transaction.
func testJobCancelBulkMany(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	var want []string
	for range 1001 {
		want = append(want, submit(t, s, newJob("bob")).ID)
	}
	got, err := s.CancelJobs(ctx, want, ledger.JobCancel{Reason: "cancelled", ReasonText: "cancelled", EndedAt: t0}, bulkAudit(0))
	if err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff(want, ids(got)); d != "" {
		t.Errorf("CancelJobs of 1001 (-want +got):\n%s", d)
	}
	if n, err := s.CountJobs(ctx, ledger.JobFilter{States: []queue.State{jobCancelled}, IncludeEnded: true}); err != nil || n != 1001 {
		t.Errorf("cancelled jobs counted: %d, %v; want 1001", n, err)
	}
}

// testJobPages checks keyset paging with After and Limit, and that
// CountJobs counts what the filter selects whatever the page.
func testJobPages(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	var all []queue.Job
	for _, u := range []string{"alice", "bob", "alice", "alice", "bob", "alice"} {
		all = append(all, submit(t, s, newJob(u)))
	}
	if _, err := s.UpdateJob(ctx, all[2].ID, jobQueued, func(x *queue.Job) { x.State = jobCancelled }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f     ledger.JobFilter
		want  []int
		total int
	}{
		{ledger.JobFilter{}, []int{0, 1, 3, 4, 5}, 5},
		{ledger.JobFilter{Limit: 2}, []int{0, 1}, 5},
		{ledger.JobFilter{Limit: 2, After: all[1].Seq}, []int{3, 4}, 5},
		{ledger.JobFilter{Limit: 2, After: all[4].Seq}, []int{5}, 5},
		{ledger.JobFilter{Limit: 2, After: all[5].Seq}, nil, 5},
		{ledger.JobFilter{User: "alice", Limit: 1, After: all[0].Seq}, []int{3}, 3},
		{ledger.JobFilter{User: "alice", IncludeEnded: true, After: all[0].Seq}, []int{2, 3, 5}, 4},
		{ledger.JobFilter{States: []queue.State{jobCancelled}, IncludeEnded: true}, []int{2}, 1},
		{ledger.JobFilter{User: "dave"}, nil, 0},
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
		n, err := s.CountJobs(ctx, tc.f)
		if err != nil || n != tc.total {
			t.Errorf("CountJobs(%+v): %d, %v; want %d", tc.f, n, err, tc.total)
		}
	}
}

// BenchCancelJobs measures a bulk cancel of n queued jobs on s: one
// CancelJobs of their IDs, as gpumeter cancel --state queued makes it; it
// reports jobs/s. Each round submits its n jobs first, off the clock.
func BenchCancelJobs(b *testing.B, s ledger.Ledger, n int) {
	ctx := context.Background()
	j := newJob("alice")
	var cancelled int
	var spent time.Duration
	for b.Loop() {
		b.StopTimer()
		ids := make([]string, 0, n)
		for range n {
			got, err := s.SubmitJob(ctx, j, submitAudit(j.User))
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, got.ID)
		}
		b.StartTimer()
		start := time.Now()
		got, err := s.CancelJobs(ctx, ids, ledger.JobCancel{Reason: "cancelled", ReasonText: "cancelled by alice", EndedAt: time.Now()}, bulkAudit(0))
		if err != nil {
			b.Fatal(err)
		}
		spent += time.Since(start)
		if len(got) != n {
			b.Fatalf("cancelled %d of %d", len(got), n)
		}
		cancelled += n
	}
	b.ReportMetric(float64(cancelled)/spent.Seconds(), "jobs/s")
}
