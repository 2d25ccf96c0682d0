package run

import (
	"testing"

	"github.com/gpumeter/gpumeter/internal/queue"
)

// TestRanksSkipStarts: a job the pass starts leaves the queue, so the
// jobs behind it move up: the API shows position 1 for the first job
// still waiting, as its sentence says "no job ahead of you".
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
