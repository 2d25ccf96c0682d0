package queue

import (
	"fmt"
	"strings"
)

// Memory jobs: a job with GPUMemory asks for that much memory on one GPU
// of Config.SharedGPUs instead of whole GPUs, and shares the GPU with the
// other memory jobs on it.

// DefaultSharedMemoryFraction is queue.shared_memory_fraction's default:
// the memory jobs on a shared GPU, with the processes outside the queue,
// may declare up to 90% of its memory.
const DefaultSharedMemoryFraction = 0.9

// memFraction returns the fraction of a shared GPU's memory its memory
// jobs and outside use may take.
func (c Config) memFraction() float64 {
	if c.SharedMemoryFraction > 0 {
		return c.SharedMemoryFraction
	}
	return DefaultSharedMemoryFraction
}

// usable returns the memory of g that memory jobs and outside use may take.
func usable(g *gpuState, frac float64) uint64 {
	return uint64(frac * float64(g.gpu.MemoryTotal))
}

// memOpen reports whether memory jobs may use g at all: it is shared, and
// neither a whole-GPU job nor a container outside the queue holds it.
func (g *gpuState) memOpen() bool {
	return g.shared && g.job == nil && g.container == nil
}

// memFits reports whether a memory job of m bytes fits on g now: the
// memory declared on it, the memory used outside the queue there and m
// stay within the usable memory.
func (g *gpuState) memFits(m uint64, frac float64) bool {
	return g.memOpen() && !g.blocked && !g.off && g.memDeclared+g.outsideMemory+m <= usable(g, frac)
}

// memRank ranks shared GPU g for a memory job of m bytes. Binpack: the
// fullest once the job is on it; Spread: the emptiest; Target: the node
// score, then as Binpack.
func (pl placer) memRank(g *gpuState, m uint64, frac float64) (rank, float64) {
	full := float64(g.memDeclared+g.outsideMemory+m) / float64(max(1, usable(g, frac)))
	switch pl.policy {
	case Spread:
		return rank{1 - full, 0}, 1 - full
	case Target:
		s := nodeScore(g.util+pl.expected, pl.target)
		return rank{s, full}, s
	}
	return rank{full, 0}, full
}

// pickMemory chooses the shared GPU for a memory job of m bytes, ties to
// the lower index, and records every GPU it fits on; -1 when it fits on
// none.
func pickMemory(pl placer, gs []gpuState, m uint64, frac float64) (int, *PlacementRecord) {
	best, bestRank := -1, rank{}
	var cands []Candidate
	for i := range gs {
		g := &gs[i]
		if !g.memFits(m, frac) {
			continue
		}
		r, score := pl.memRank(g, m, frac)
		u := g.util
		if pl.policy == Target {
			u += pl.expected
		}
		cands = append(cands, Candidate{UUID: g.gpu.UUID, Index: g.gpu.Index, Node: g.gpu.Node, Score: score, Util: u})
		if best < 0 || r.better(bestRank) {
			best, bestRank = i, r
		}
	}
	if best < 0 {
		return -1, nil
	}
	rec := &PlacementRecord{Policy: policyName(pl.policy)}
	for k, c := range cands {
		if c.UUID == gs[best].gpu.UUID {
			c.Chosen = true
			rec.Candidates = append(rec.Candidates, c)
			cands = append(cands[:k:k], cands[k+1:]...)
			break
		}
	}
	sortCandidates(cands)
	rec.Candidates = append(rec.Candidates, cands...)
	return best, rec
}

// memTooBig returns the sentence of a memory job of m bytes that fits on
// no shared GPU open to it (scope sc) even when the GPU is empty, or "".
func (p *pass) memTooBig(sc *scope, m uint64) string {
	text, ok := sc.memTooBig[m]
	if !ok {
		text = p.memTooBigText(sc, m)
		if sc.memTooBig == nil {
			sc.memTooBig = map[uint64]string{}
		}
		sc.memTooBig[m] = text
	}
	return text
}

// memTooBigText is memTooBig without the cache.
func (p *pass) memTooBigText(sc *scope, m uint64) string {
	var most, total uint64
	n := 0
	for i := range p.gs {
		if g := &p.gs[i]; g.shared && sc.eligible(p.gs, i) {
			n++
			if u := usable(g, p.frac); u > most {
				most, total = u, g.gpu.MemoryTotal
			}
		}
	}
	none, here := "this host has no GPU", "here"
	if p.fleet {
		none, here = "no node it may run on has a GPU", "on the nodes it may run on"
	}
	switch {
	case n == 0:
		return fmt.Sprintf("asks for %s on a shared GPU; %s marked for sharing (queue.shared_gpus)", bytesText(m), none)
	case m > most:
		return fmt.Sprintf("asks for %s on one GPU; the most a shared GPU %s allows is %s (%s of %s, queue.shared_memory_fraction)",
			bytesText(m), here, bytesText(most), percentText(p.frac), bytesText(total))
	}
	return ""
}

// memWaitText says why a memory job of m bytes within scope sc does not
// fit now: outside_use when it would fit on a GPU but for use outside the
// queue there, resources otherwise, with each shared GPU's story.
func (p *pass) memWaitText(m uint64, sc *scope) (Reason, string) {
	parts := []string{"waiting for " + bytesText(m) + " on a shared GPU"}
	reason := ReasonResources
	frac := p.frac
	for i := range p.gs {
		g := &p.gs[i]
		if !g.shared || !sc.eligible(p.gs, i) {
			continue
		}
		switch {
		case g.job != nil:
			parts = append(parts, fmt.Sprintf("%s is held by %s, which does not share it", gpuName(g), g.job.ID))
			continue
		case g.container != nil:
			parts = append(parts, fmt.Sprintf("%s is held by %s (outside the queue)", gpuName(g), containerText(g.container)))
		default:
			u := usable(g, frac)
			left := u - min(u, g.memDeclared+g.outsideMemory)
			s := fmt.Sprintf("%s has %s of its %s free (%s declared by jobs", gpuName(g), bytesText(left), bytesText(u), bytesText(g.memDeclared))
			if g.outsideMemory > 0 {
				s += ", " + bytesText(g.outsideMemory) + " used outside the queue"
			}
			parts = append(parts, s+")")
		}
		if g.memDeclared+m <= usable(g, frac) {
			reason = ReasonOutsideUse
		}
	}
	return reason, strings.Join(parts, "; ")
}
