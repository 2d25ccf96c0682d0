package queue

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Consolidation: in quiet hours, which nodes' running jobs would fit on
// the other nodes, so that the node could be drained (gpumeter nodes
// --consolidate). Advice only: nothing moves a running job.

// ConsolidateAdvice is what Consolidate says of one node.
type ConsolidateAdvice struct {
	// Node is the node's name.
	Node string
	// Drain is true when the node could be drained: its running jobs fit
	// on the other nodes (Moves says where) without taking any of them
	// past the target utilisation, together with every node advised
	// before it.
	Drain bool
	// Drained is true for a node drained already: it neither gives nor
	// takes jobs in the advice.
	Drained bool
	// Jobs are the ids of the queue's jobs running there, sorted.
	Jobs []string
	// Moves are where each of Jobs would fit, when Drain.
	Moves []Move
	// Why says it in a sentence.
	Why string
}

// Move is one running job and the node it would fit on.
type Move struct {
	JobID, Node string
}

// consolidation is Consolidate's view of one node.
type consolidation struct {
	nd   *fleetNode
	jobs []*RunningJob
	load int // whole GPUs held by its jobs, plus its memory jobs
	// outside names a container outside the queue on it, "" when none.
	outside string
}

// Consolidate says, for every node of in, whether it could be drained:
// whether every job running there fits on the GPUs free on the other
// nodes (whole GPUs on one node, a memory job on a shared GPU its memory
// fits on) without taking any receiving node's utilisation (the mean of
// Input.Util over its GPUs, plus the moved jobs' measured use) past
// Config.TargetUtilization. Nodes are tried least loaded first (ties by
// name), and each node advised to drain is one that gives, not takes, for
// those after it, so that all the nodes it advises can be drained
// together. A job goes to the node with room that has the fewest free
// GPUs, ties by name, as binpack would put it; the biggest jobs go first.
// A node that a container outside the queue uses is not advised: the
// queue cannot move it. The advice is in the nodes' name order, and the
// same input always gives the same advice. Queued jobs are not counted:
// it is advice for quiet hours.
func Consolidate(in Input) []ConsolidateAdvice {
	p := &pass{in: in, gs: filterGPUs(in), frac: in.Config.memFraction()}
	p.pos = make(map[string]int, len(p.gs))
	for i := range p.gs {
		p.pos[p.gs[i].gpu.UUID] = i
		p.fleet = p.fleet || p.gs[i].gpu.Node != ""
	}
	p.buildNodes()
	target := newPlacer(&Config{Placement: Target, TargetUtilization: in.Config.TargetUtilization}, 0).target
	nodes := make([]consolidation, len(p.nodes))
	for ni := range p.nodes {
		nodes[ni].nd = &p.nodes[ni]
	}
	for i := range in.Running {
		r := &in.Running[i]
		if len(r.GPUs) == 0 {
			continue
		}
		q, ok := p.pos[r.GPUs[0]]
		if !ok {
			continue
		}
		c := &nodes[p.gs[q].node]
		c.jobs = append(c.jobs, r)
		if r.GPUMemory > 0 {
			c.load++
		} else {
			c.load += len(r.GPUs)
		}
	}
	for i := range p.gs {
		if g := &p.gs[i]; g.container != nil && nodes[g.node].outside == "" {
			nodes[g.node].outside = g.container.Name
		}
	}
	// The order they are tried in: least loaded first.
	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(nodes[a].load, nodes[b].load) })
	gives := make([]bool, len(nodes)) // drained, or advised to drain
	for ni := range p.nodes {
		gives[ni] = p.nodes[ni].drained
	}
	out := make([]ConsolidateAdvice, len(nodes))
	for _, ni := range order {
		c := &nodes[ni]
		a := &out[ni]
		a.Node, a.Drained = c.nd.name, c.nd.drained
		for _, r := range c.jobs {
			a.Jobs = append(a.Jobs, r.ID)
		}
		slices.Sort(a.Jobs)
		switch {
		case a.Drained:
			a.Why = "drained already"
			if len(c.jobs) > 0 {
				a.Why += fmt.Sprintf("; %s still running there", jobsText(len(c.jobs)))
			}
			continue
		case c.outside != "":
			a.Why = fmt.Sprintf("container %s, outside the queue, uses a GPU there: the queue cannot move it", c.outside)
			continue
		case len(c.jobs) == 0:
			a.Drain, a.Why = true, "no job of the queue runs there"
			gives[ni] = true
			continue
		}
		moves, why := p.consolidateNode(ni, c.jobs, gives, target)
		if moves == nil {
			a.Why = why
			continue
		}
		a.Drain, a.Moves, a.Why = true, moves, why
		gives[ni] = true
	}
	return out
}

// consolidateNode tries to fit the jobs of node ni on the nodes that do
// not give. On success it keeps the moves in the pass's GPUs (bound, the
// memory declared, the nodes' util) and returns them with the sentence;
// else nil and why not, leaving the GPUs as they were.
func (p *pass) consolidateNode(ni int, jobs []*RunningJob, gives []bool, target float64) ([]Move, string) {
	jobs = slices.Clone(jobs)
	size := func(r *RunningJob) int {
		if r.GPUMemory > 0 {
			return 0
		}
		return len(r.GPUs)
	}
	slices.SortFunc(jobs, func(a, b *RunningJob) int {
		if c := cmp.Compare(size(b), size(a)); c != 0 {
			return c
		}
		if c := cmp.Compare(b.GPUMemory, a.GPUMemory); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	type undo struct {
		gpus []int
		mem  uint64
		node int
		util float64
	}
	var undos []undo
	rollback := func() {
		for _, u := range slices.Backward(undos) {
			for _, q := range u.gpus {
				if u.mem > 0 {
					p.gs[q].memDeclared -= u.mem
				} else {
					p.gs[q].bound = false
				}
			}
			p.nodes[u.node].util -= u.util
		}
	}
	var moves []Move
	worst := 0.0
	for _, r := range jobs {
		use := p.jobUse(r)
		best, bestFree, gpus := -1, 0, []int(nil)
		over, barred := "", 0
		for ri := range p.nodes {
			nd := &p.nodes[ri]
			if ri == ni || gives[ri] {
				continue
			}
			if !match(r.NodeGlob, nd.name) || r.Image != "" && !p.allowsImage(nd.name, r.Image) {
				barred++ // the job could not have started there
				continue
			}
			var picks []int
			free := 0
			for q := nd.lo; q < nd.hi; q++ {
				g := &p.gs[q]
				if !match(r.ModelGlob, g.gpu.Model) {
					continue
				}
				switch {
				case r.GPUMemory == 0 && g.free():
					free++
					if len(picks) < len(r.GPUs) {
						picks = append(picks, q)
					}
				case r.GPUMemory > 0 && len(picks) == 0 && g.memFits(r.GPUMemory, p.frac):
					picks = append(picks, q)
				}
			}
			if len(picks) == 0 || r.GPUMemory == 0 && len(picks) < len(r.GPUs) {
				continue
			}
			if u := (nd.util + use) / float64(nd.hi-nd.lo); u > target {
				over = nd.name
				continue
			}
			if best < 0 || free < bestFree {
				best, bestFree, gpus = ri, free, picks
			}
		}
		if best < 0 {
			rollback()
			what := fmt.Sprintf("%s (%d GPUs)", r.ID, len(r.GPUs))
			switch {
			case r.GPUMemory > 0:
				what = fmt.Sprintf("%s (%s on a shared GPU)", r.ID, bytesText(r.GPUMemory))
			case len(r.GPUs) == 1:
				what = r.ID + " (1 GPU)"
			}
			if over != "" {
				return nil, fmt.Sprintf("%s would take every other node with room past the %s target utilisation (%s, queue.target_utilization)", what, percentText(target), over)
			}
			if barred > 0 {
				return nil, fmt.Sprintf("%s fits on no other node's free GPUs that it may run on (its --node or --model, or the nodes' queue.images: %s barred)",
					what, nodesText(barred))
			}
			return nil, fmt.Sprintf("%s fits on no other node's free GPUs", what)
		}
		nd := &p.nodes[best]
		for _, q := range gpus {
			if r.GPUMemory > 0 {
				p.gs[q].memDeclared += r.GPUMemory
			} else {
				p.gs[q].bound = true
			}
		}
		nd.util += use
		worst = max(worst, nd.util/float64(nd.hi-nd.lo))
		undos = append(undos, undo{gpus, r.GPUMemory, best, use})
		moves = append(moves, Move{JobID: r.ID, Node: nd.name})
	}
	slices.SortFunc(moves, func(a, b Move) int { return strings.Compare(a.JobID, b.JobID) })
	parts := make([]string, 0, min(len(moves), 5))
	for _, m := range moves[:min(len(moves), 5)] {
		parts = append(parts, m.JobID+" to "+m.Node)
	}
	list := strings.Join(parts, ", ")
	if len(moves) > 5 {
		list += fmt.Sprintf(" and %d more", len(moves)-5)
	}
	return moves, fmt.Sprintf("its %s fit on the other nodes (%s), none of them over %s of the %s target utilisation",
		jobsText(len(moves)), list, percentText(worst), percentText(target))
}

// jobUse is a running job's measured use to move: the sum of Input.Util
// over its GPUs, a memory job's GPU's util shared among the memory jobs
// declared there (by memory).
func (p *pass) jobUse(r *RunningJob) float64 {
	use := 0.0
	for _, u := range r.GPUs {
		q, ok := p.pos[u]
		if !ok {
			continue
		}
		g := &p.gs[q]
		if r.GPUMemory > 0 && g.memDeclared > 0 {
			use += g.util * float64(r.GPUMemory) / float64(g.memDeclared)
		} else {
			use += g.util
		}
	}
	return use
}

// jobsText says "1 job" or "n jobs".
func jobsText(n int) string {
	if n == 1 {
		return "1 job"
	}
	return fmt.Sprintf("%d jobs", n)
}

// nodesText says "1 node" or "n nodes".
func nodesText(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}
