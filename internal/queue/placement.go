package queue

import (
	"math"
	"slices"
)

// Placement by measured utilisation, and the record of every placement:
// which GPUs were candidates, how each scored, and which were chosen.

// Target places a job where the GPU's measured utilisation plus the job's
// expected share comes closest to Config.TargetUtilization (the node
// score 100 × (1 − |u − target|)); ties go as Binpack.
const Target Placement = "target"

// DefaultTargetUtilization is queue.target_utilization's default.
const DefaultTargetUtilization = 0.7

// PlacementRecord says why a job got its GPUs.
type PlacementRecord struct {
	// Policy is the placement in force.
	Policy Placement
	// Candidates are the GPUs the job could have taken, the chosen ones
	// first (in the order given), then the others by score, best first.
	// On a fleet they are the GPUs of the chosen node.
	Candidates []Candidate
	// Nodes are the nodes the job could have gone to, the chosen one
	// first, then the others by score, best first, ties by name; nil on
	// one host (every GPU's Node "").
	Nodes []NodeCandidate
}

// NodeCandidate is one node a job could have gone to: one with enough
// free GPUs (or a shared GPU the memory job fits on) that it may use.
type NodeCandidate struct {
	// Node is the node's name.
	Node string
	// Score is what the node choice ranks by, higher first. Target: the
	// node score 100 × (1 − |u − target|). Binpack: the node's busy GPUs
	// (see pass.nodeRank). Spread: their number negated.
	Score float64
	// Util is u: the node's mean measured utilisation plus the job's
	// expected share spread over its GPUs (Target), else the mean alone.
	Util float64
	// Chosen is true for the node the job went to.
	Chosen bool
}

// Candidate is one GPU a job could have taken.
type Candidate struct {
	// UUID and Index name the GPU.
	UUID  string
	Index int
	// Node is the node the GPU is on; "" on one host.
	Node string
	// Score is what the placement ranks by, higher first. Target: the
	// node score 100 × (1 − |u − target|). Binpack: for whole GPUs the
	// number of busy peers (see scoreGPU), for memory the fraction of
	// the GPU's usable memory in use once the job is on it. Spread: the
	// negated number of busy peers, or 1 − that fraction.
	Score float64
	// Util is u: the GPU's measured utilisation plus the job's expected
	// share (Target), else the measured utilisation alone.
	Util float64
	// Chosen is true for the GPUs the job got.
	Chosen bool
}

// placer places one job: the policy, and for Target the target and the
// job's expected share.
type placer struct {
	policy           Placement
	target, expected float64
}

// newPlacer returns the placer for a job whose user's expected share of
// a GPU (Input.Expected) is expected, under c.
func newPlacer(c *Config, expected float64) placer {
	pl := placer{policy: c.Placement}
	if pl.policy == Target {
		pl.target = c.TargetUtilization
		if pl.target <= 0 {
			pl.target = DefaultTargetUtilization
		}
		pl.expected = max(0, expected)
	}
	return pl
}

// rank is how a placement ranks a GPU: by first, then by second, both
// higher first.
type rank struct{ first, second float64 }

func (a rank) better(b rank) bool {
	return a.first > b.first || a.first == b.first && a.second > b.second
}

func (a rank) add(b rank) rank { return rank{a.first + b.first, a.second + b.second} }

// nodeScore is the node score 100 × (1 − |u − target|); u is not capped
// at 1, so a GPU already over the target by more scores lower still.
func nodeScore(u, target float64) float64 {
	return 100 * (1 - math.Abs(u-target))
}

// rank ranks the free GPU at position i of gs for a whole-GPU job: Target
// by the node score of its utilisation plus the job's share, then by
// binpack; Binpack and Spread by scoreGPU alone.
func (pl placer) rank(gs []gpuState, i int) rank {
	if pl.policy == Target {
		return rank{nodeScore(gs[i].util+pl.expected, pl.target), float64(scoreGPU(Binpack, gs, i))}
	}
	return rank{float64(scoreGPU(pl.policy, gs, i)), 0}
}

// u returns the utilisation the record shows for the GPU at position i.
func (pl placer) u(gs []gpuState, i int) float64 {
	if pl.policy == Target {
		return gs[i].util + pl.expected
	}
	return gs[i].util
}

// wholeRecord records the placement of a whole-GPU job given picks, with
// every GPU free to it as a candidate. It runs before bind.
func wholeRecord(pl placer, gs []gpuState, picks []int) *PlacementRecord {
	rec := &PlacementRecord{Policy: policyName(pl.policy)}
	var rest []Candidate
	for i := range gs {
		if !gs[i].free() {
			continue
		}
		c := Candidate{UUID: gs[i].gpu.UUID, Index: gs[i].gpu.Index, Node: gs[i].gpu.Node, Score: pl.rank(gs, i).first, Util: pl.u(gs, i)}
		if slices.Contains(picks, i) {
			c.Chosen = true
			rec.Candidates = append(rec.Candidates, c)
		} else {
			rest = append(rest, c)
		}
	}
	sortCandidates(rest)
	rec.Candidates = append(rec.Candidates, rest...)
	return rec
}

// sortCandidates orders candidates by score, best first, then by index.
func sortCandidates(cs []Candidate) {
	slices.SortStableFunc(cs, func(a, b Candidate) int {
		if c := byScore(a.Score, b.Score); c != 0 {
			return c
		}
		return a.Index - b.Index
	})
}

// byScore compares two scores for a sort, the higher first.
func byScore(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// policyName returns p as the record shows it ("" is Binpack).
func policyName(p Placement) Placement {
	if p == Spread || p == Target {
		return p
	}
	return Binpack
}
