package run

import (
	"testing"

	"github.com/gpumeter/gpumeter/internal/queue"
)

// TestRanksSkipStarts: a job the pass starts leaves the queue, so the
// jobs behind it move up: the API shows position 1 for the first job
// still waiting, as its sentence says "no job ahead of you waits for GPUs".
func TestRanksSkipStarts(t *testing.T) {
	q := newRanking()
	q.set(queue.Plan{
		Order:  []queue.Ranked{{JobID: "j-1", Priority: 2, Position: 1}, {JobID: "j-2", Priority: 1.5, Position: 2}, {JobID: "j-3", Priority: 1, Position: 3}},
		Starts: []queue.Start{{JobID: "j-1", GPUs: []string{"GPU-a"}}},
		Waits:  []queue.Wait{{JobID: "j-2", Position: 2}, {JobID: "j-3", Position: 3}},
	})
	for _, w := range []struct {
		id       string
		priority float64
		position int
	}{{"j-1", 2, 0}, {"j-2", 1.5, 1}, {"j-3", 1, 2}} {
		prio, pos, _, ok := q.rank(w.id)
		if !ok || prio != w.priority || pos != w.position {
			t.Errorf("Rank(%s) = %v, %d, %v; want %v, %d", w.id, prio, pos, ok, w.priority, w.position)
		}
	}
}

// TestWaitingFillsFromThePass: a queued job's reason comes from the last
// pass, but a start failure's error stays while the pass finds it waits
// only for GPUs, and a hold or release since the pass keeps the store's.
func TestWaitingFillsFromThePass(t *testing.T) {
	q := newRanking()
	q.set(queue.Plan{Waits: []queue.Wait{
		{JobID: "j-1", Reason: queue.ReasonUserGPULimit},
		{JobID: "j-2", Reason: queue.ReasonResources},
		{JobID: "j-3", Reason: queue.ReasonResources},
		{JobID: "j-4", Reason: queue.ReasonHeld},
	}})
	stored := func(id string, r queue.Reason, held bool) queue.Job {
		return queue.Job{ID: id, State: queue.Queued, Reason: r, ReasonText: "stored", Held: held}
	}
	for _, tc := range []struct {
		job  queue.Job
		want queue.Reason
	}{
		{stored("j-1", queue.ReasonResources, false), queue.ReasonUserGPULimit},
		{stored("j-2", queue.ReasonStartFailed, false), queue.ReasonStartFailed},
		{stored("j-3", queue.ReasonHeld, true), queue.ReasonHeld},
		{stored("j-4", queue.ReasonResources, false), queue.ReasonResources},
		{stored("j-5", queue.ReasonResources, false), queue.ReasonResources},
		{queue.Job{ID: "j-1", State: queue.Running, Reason: ""}, ""},
	} {
		if got := q.waiting(tc.job); got.Reason != tc.want {
			t.Errorf("waiting(%s %s, held %v) = %s, want %s", tc.job.ID, tc.job.Reason, tc.job.Held, got.Reason, tc.want)
		}
	}
}
