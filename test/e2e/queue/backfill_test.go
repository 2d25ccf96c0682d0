package queue

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/dockertest"
)

// TestQueueBackfill: three one-GPU jobs run, the first with a 12 s time
// limit; a two-GPU job H waits for the one free GPU and that one, and
// gets a reservation at the first one's time limit, its estimated_start.
// One-GPU jobs behind it backfill onto the free GPU only while their time
// limits end before the reservation: one of 3 s starts at once, one of
// 2 s once that one ends, and one of 5 min waits. H starts at its
// reservation, not later, and the 5 min job is still waiting.
func TestQueueBackfill(t *testing.T) {
	t.Parallel()
	// Every job is alice's: one fair-share factor, so the order is the
	// submission's (the age factor keeps the older first).
	// Time limits of seconds, to see the backfill at work in a test.
	h := newHost(t, fairQueue(`  max_gpus_per_user: {default: 8}
  min_time_limit: 1s
`))
	a := h.start(t)
	first := a.submit(t, h.alice, h.request(1, "12s", long...))
	others := []string{a.submit(t, h.alice, h.request(1, "5m", long...)).ID, a.submit(t, h.alice, h.request(1, "5m", long...)).ID}
	first = a.await(t, first.ID, 30*time.Second, "running")
	var busy []string
	for _, id := range append([]string{first.ID}, others...) {
		busy = append(busy, a.await(t, id, 30*time.Second, "running").GPUs...)
	}

	head := a.submit(t, h.alice, h.request(2, "5m", long...))
	var hj apitype.Job
	// The estimate is the API's as soon as the pass has planned; the
	// sentence the pass writes just after names what it waits for.
	dockertest.WaitFor(t, 10*time.Second, head.ID+" waiting with an estimated start and "+first.ID+"'s time limit in its reason", func() (bool, string) {
		hj = a.job(t, head.ID)
		return hj.State == "queued" && hj.EstimatedStart != nil && strings.Contains(hj.ReasonText, first.ID+"'s time limit"), hj.State + " " + hj.Reason + ": " + hj.ReasonText
	})
	estimate := *hj.EstimatedStart
	limitEnd := first.StartedAt.Add(12 * time.Second)
	t.Logf("%s waits, estimated to start %s (%s's time limit ends %s): %s", head.ID, estimate.Format(time.RFC3339Nano), first.ID, limitEnd.Format(time.RFC3339Nano), hj.ReasonText)
	// The estimate is an upper bound shown to the minute: the time limit's
	// end rounded up, the same minute the sentence prints.
	if want := limitEnd.Truncate(time.Minute).Add(time.Minute); !limitEnd.Truncate(time.Minute).Equal(limitEnd) && !estimate.Equal(want) && !estimate.Equal(want.Add(time.Minute)) {
		t.Errorf("%s's estimated_start %s is not %s's time limit %s rounded up to the minute (%s)", head.ID, estimate, first.ID, limitEnd, want)
	}
	if minute := estimate.UTC().Format("15:04"); !strings.Contains(hj.ReasonText, minute) {
		t.Errorf("%s's sentence %q does not print its estimated_start's minute %s", head.ID, hj.ReasonText, minute)
	}

	// Backfill: ends before the reservation, so it may use the free GPU.
	short := a.submit(t, h.alice, h.request(1, "3s", long...))
	sj := a.await(t, short.ID, 10*time.Second, "running")
	if len(sj.GPUs) != 1 || slices.Contains(busy, sj.GPUs[0]) {
		t.Errorf("%s runs on %v, want the free GPU (busy: %v)", short.ID, sj.GPUs, busy)
	}
	long5m := a.submit(t, h.alice, h.request(1, "5m", long...))
	shorter := a.submit(t, h.alice, h.request(1, "2s", long...))
	dockertest.WaitFor(t, 10*time.Second, long5m.ID+" and "+shorter.ID+" waiting with estimates", func() (bool, string) {
		l, s := a.job(t, long5m.ID), a.job(t, shorter.ID)
		ok := l.State == "queued" && l.EstimatedStart != nil && s.EstimatedStart != nil
		return ok, l.State + ": " + l.ReasonText + "; " + s.State + ": " + s.ReasonText
	})
	// Once the 3 s job ends, the 2 s job backfills; the 5 min one never
	// does, since it would hold the GPU the reservation needs.
	a.await(t, short.ID, 15*time.Second, "timeout")
	shj := a.await(t, shorter.ID, 10*time.Second, "running", "timeout")
	if hj = a.job(t, head.ID); hj.State != "queued" {
		t.Fatalf("%s is %s before %s's time limit, want queued", head.ID, hj.State, first.ID)
	}
	if j := a.job(t, long5m.ID); j.State != "queued" {
		t.Errorf("%s (5 min) is %s on %v: it backfilled past the reservation", long5m.ID, j.State, j.GPUs)
	}

	hj = a.await(t, head.ID, 30*time.Second, "running")
	late := hj.StartedAt.Sub(estimate)
	t.Logf("%s started %s after its first estimate; the backfilled %s started %s", head.ID, late, shorter.ID, shj.StartedAt.Format(time.RFC3339Nano))
	// That the backfill kept the reservation is the 5 min job's staying
	// queued and the backfilled jobs' fitting before it; how late after
	// its estimate the head started is this machine's figure, logged.
	if hj.StartedAt.Before(*shj.StartedAt) {
		t.Errorf("%s started before the backfilled %s", head.ID, shorter.ID)
	}
	if j := a.job(t, long5m.ID); j.State != "queued" || j.StartedAt != nil {
		t.Errorf("%s: %s, want still queued behind %s", long5m.ID, j.State, head.ID)
	}
}
