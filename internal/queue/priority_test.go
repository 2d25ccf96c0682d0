package queue

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestQueueOrderIsTheComparisonOrder checks the radix sort against the
// rule it stands for (priority, highest first, then first submitted, then
// id) on queues full of ties, negative and zero priorities and times
// before 1970.
func TestQueueOrderIsTheComparisonOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for round := range 200 {
		n := r.IntN(300)
		in := Input{Now: t0, Queued: make([]QueuedJob, n), FairShare: map[string]float64{}}
		in.Config.Weights = Weights{FairShare: []float64{1, -1, 0.5}[round%3], Age: float64(round%2) * 0.3, Class: 0.2}
		for u := range 5 {
			in.FairShare[fmt.Sprint("u", u)] = []float64{1, 0.5, 0.25, math.SmallestNonzeroFloat64, 0}[u]
		}
		for i := range in.Queued {
			at := t0.Add(time.Duration(r.IntN(20)) * time.Minute)
			if r.IntN(10) == 0 {
				at = time.Unix(-int64(r.IntN(1000)), 0)
			}
			in.Queued[i] = QueuedJob{ID: fmt.Sprintf("j-%06d", r.IntN(1000)), User: fmt.Sprint("u", r.IntN(6)),
				Class: []Class{ClassLow, ClassNormal, ClassHigh}[r.IntN(3)], SubmittedAt: at}
		}
		p := newPass(in)
		got := make([]string, len(p.order))
		for k, key := range p.order {
			got[k] = in.Queued[key.i].ID + "@" + in.Queued[key.i].SubmittedAt.String()
		}
		want := slices.Clone(in.Queued)
		slices.SortStableFunc(want, func(a, b QueuedJob) int {
			if c := cmp.Compare(Priority(in, b), Priority(in, a)); c != 0 {
				return c
			}
			if c := a.SubmittedAt.Compare(b.SubmittedAt); c != 0 {
				return c
			}
			return strings.Compare(a.ID, b.ID)
		})
		for k, j := range want {
			if w := j.ID + "@" + j.SubmittedAt.String(); got[k] != w {
				t.Fatalf("round %d: place %d is %s, want %s", round, k+1, got[k], w)
			}
		}
	}
}
