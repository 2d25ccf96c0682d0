package queue

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Preemption: preemptible jobs use GPUs that others' jobs wait for, and
// give them back when those have waited long enough.
//
//   - A preemptible job queues behind every job that is not (the order
//     keeps priority, then age, within each of the two), so that it takes
//     only what the others leave.
//   - It may start on GPUs the whole-GPU head job reserves, whatever its
//     time limit, until the head may preempt it: the reserved GPUs are
//     idle until the reservation, and that is the time preemptible jobs
//     are for.
//   - The head of the whole-GPU pool, when it is not preemptible and has
//     waited Config.PreemptAfter since it was submitted, preempts the
//     fewest preemptible running jobs whose GPUs, with the free ones and
//     those of preemptions already under way, let it start on one node
//     (on a fleet: the node open to it that needs the fewest, ties to the
//     first by name): of the sets
//     that few, the one that takes low-class jobs before high ones and
//     the newest before the oldest (less work is lost), ties by id. When
//     even every preemptible job's GPUs would not let it start, none is
//     preempted. From then on preemptible jobs keep off its reservation.
//   - Memory jobs on shared GPUs neither preempt nor are preempted: a
//     shared GPU is never given whole, and submit refuses a preemptible
//     memory job.

// DefaultPreemptAfter is queue.preempt_after's default.
const DefaultPreemptAfter = 10 * time.Minute

// Preemption is a running job to stop, with a grace signal, and put back
// in the queue so that a job that waited for its GPUs can start.
type Preemption struct {
	// JobID is the preemptible running job.
	JobID string
	// For is the waiting job its GPUs go to.
	For string
}

// preemptAfter returns the wait after which a job preempts.
func (c Config) preemptAfter() time.Duration {
	if c.PreemptAfter > 0 {
		return c.PreemptAfter
	}
	return DefaultPreemptAfter
}

// preemptibleLast moves the keys of preemptible jobs behind all others,
// each part in the order it had.
func preemptibleLast(in Input, keys []orderKey) []orderKey {
	n := 0
	for _, k := range keys {
		if in.Queued[k.i].Preemptible {
			n++
		}
	}
	if n == 0 {
		return keys
	}
	out := make([]orderKey, 0, len(keys))
	for _, k := range keys {
		if !in.Queued[k.i].Preemptible {
			out = append(out, k)
		}
	}
	for _, k := range keys {
		if in.Queued[k.i].Preemptible {
			out = append(out, k)
		}
	}
	return out
}

// victim is a preemptible running job and the whole GPUs its stop frees.
type victim struct {
	job *RunningJob
	n   int
}

// preempt looks for the preemptions that let head job j of the whole-GPU
// pool start, and adds them to the plan; it reports whether it found
// them. It is called once j is known not to fit now.
func (p *pass) preempt(j rankedJob) bool {
	if j.Preemptible || j.GPUMemory > 0 {
		return false
	}
	if at := j.SubmittedAt.Add(p.in.Config.preemptAfter()); p.in.Now.Before(at) {
		if slices.ContainsFunc(p.in.Running, func(r RunningJob) bool { return r.Preemptible }) {
			p.plan.PreemptAt = at
		}
		return false
	}
	var chosen []victim
	found := false
	for _, ni := range j.scope.nodes {
		if c, ok := p.nodeVictims(&p.nodes[ni], j.GPUs); ok && (!found || len(c) < len(chosen)) {
			chosen, found = c, true
		}
	}
	if !found {
		return false
	}
	ids := make([]string, len(chosen))
	for k, v := range chosen {
		p.plan.Preemptions = append(p.plan.Preemptions, Preemption{JobID: v.job.ID, For: j.ID})
		ids[k] = v.job.ID
	}
	if w := &p.plan.Waits[len(p.plan.Waits)-1]; w.JobID == j.ID && len(ids) > 0 {
		w.figures.text = preemptingText(w.figures.text, w.Reason, ids)
	}
	return len(ids) > 0
}

// nodeVictims returns the preemptible jobs on node nd whose stop lets a
// job of n GPUs start there: the preemptions under way first, by id, then
// the fewest more (pickVictims); false when even all would not do.
func (p *pass) nodeVictims(nd *fleetNode, n int) ([]victim, bool) {
	gs := nd.gpus(p.gs)
	need := n
	for i := range gs {
		if gs[i].free() {
			need--
		}
	}
	var under, cands []victim
	for i := range p.in.Running {
		r := &p.in.Running[i]
		if !r.Preemptible || r.GPUMemory > 0 {
			continue
		}
		k := 0
		for q := range gs {
			if g := &gs[q]; g.job == r && g.frees() && !g.off {
				k++
			}
		}
		if k == 0 {
			continue
		}
		if r.Preempting {
			under = append(under, victim{r, k})
		} else {
			cands = append(cands, victim{r, k})
		}
	}
	slices.SortFunc(under, func(a, b victim) int { return strings.Compare(a.job.ID, b.job.ID) })
	var chosen []victim
	for _, v := range under {
		if need <= 0 {
			break
		}
		chosen = append(chosen, v)
		need -= v.n
	}
	if need > 0 {
		more := pickVictims(cands, need)
		if more == nil {
			return nil, false
		}
		chosen = append(chosen, more...)
	}
	return chosen, true
}

// pickVictims returns the fewest of cands whose GPUs add up to need, the
// low class before the high and the newest before the oldest among sets
// that few, or nil when all of them add up to less.
func pickVictims(cands []victim, need int) []victim {
	slices.SortFunc(cands, func(a, b victim) int {
		if ca, cb := a.job.Class.Value(), b.job.Class.Value(); ca != cb {
			if ca < cb {
				return -1
			}
			return 1
		}
		if c := b.job.StartedAt.Compare(a.job.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(b.job.ID, a.job.ID)
	})
	// covers reports whether slots of the rest, the largest, add up to
	// left.
	covers := func(rest []victim, slots, left int) bool {
		if left <= 0 {
			return true
		}
		ns := make([]int, len(rest))
		for k, v := range rest {
			ns[k] = v.n
		}
		slices.Sort(ns)
		for k := len(ns) - 1; k >= 0 && slots > 0; k-- {
			left -= ns[k]
			slots--
		}
		return left <= 0
	}
	fewest := -1
	for m := 1; m <= len(cands); m++ {
		if covers(cands, m, need) {
			fewest = m
			break
		}
	}
	if fewest < 0 {
		return nil
	}
	// The first candidates in the order of preference that still leave
	// a set of fewest jobs: taking a candidate is right whenever the
	// rest can still cover what is left with the slots left.
	var out []victim
	left, slots := need, fewest
	for k, v := range cands {
		if left <= 0 || slots == 0 {
			break
		}
		if covers(cands[k+1:], slots-1, left-v.n) {
			out = append(out, v)
			left -= v.n
			slots--
		}
	}
	return out
}

// preemptingText adds to a head job's sentence the jobs preempted for it.
func preemptingText(text string, reason Reason, ids []string) string {
	if text == "" {
		text = reason.Meaning()
	}
	what := "job " + ids[0] + ", which holds"
	if len(ids) > 1 {
		what = "jobs " + strings.Join(ids, ", ") + ", which hold"
	}
	return fmt.Sprintf("%s; preempting preemptible %s GPUs it needs (queue.preempt_after)", text, what)
}

// preemptedText is the sentence of a job whose last run was preempted,
// while it waits for GPUs.
func preemptedText(text string, reason Reason) string {
	if text == "" {
		text = reason.Meaning()
	}
	return "preempted: its GPUs went to a job that had waited for them; back in the queue with its place by age; " + text
}
