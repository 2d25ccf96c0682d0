package queue

import "slices"

// The topology part of placement: which free GPUs a job of several GPUs
// prefers because they talk to each other over NVLink or one PCIe switch
// rather than across the host's root complex.

// hasTopology reports whether the GPU carries any topology.
func (g *gpuState) hasTopology() bool {
	return len(g.nvlink) > 0 || g.gpu.PCIeSwitch != ""
}

// linkGPUs fills each GPU's nvlink positions from the UUIDs its GPU names,
// both ways, so that a link reported by one end only still counts. UUIDs
// of GPUs not in the pass are left out.
func linkGPUs(gs []gpuState) {
	var pos map[string]int
	for i := range gs {
		if len(gs[i].gpu.NVLink) > 0 {
			pos = make(map[string]int, len(gs))
			break
		}
	}
	if pos == nil {
		return
	}
	n := len(gs)
	for i := range gs {
		pos[gs[i].gpu.UUID] = i
	}
	linked := make([]bool, n*n)
	count := 0
	for i := range gs {
		for _, u := range gs[i].gpu.NVLink {
			if j, ok := pos[u]; ok && j != i && !linked[i*n+j] {
				linked[i*n+j], linked[j*n+i] = true, true
				count += 2
			}
		}
	}
	// One backing array for all, sorted by position as it is filled.
	buf := make([]int, 0, count)
	for i := range gs {
		start := len(buf)
		for j := range n {
			if linked[i*n+j] {
				buf = append(buf, j)
			}
		}
		if len(buf) > start {
			gs[i].nvlink = buf[start:len(buf):len(buf)]
		}
	}
}

// fitsFunc reports whether the free GPU at position j may join the GPUs
// at picks in one connected set.
type fitsFunc func(gs []gpuState, picks []int, j int) bool

// nvlinked: j shares NVLink with every GPU picked, so that every pair of
// the job's GPUs talks over NVLink.
func nvlinked(gs []gpuState, picks []int, j int) bool {
	for _, m := range picks {
		if !slices.Contains(gs[j].nvlink, m) {
			return false
		}
	}
	return true
}

// sameSwitch: j sits under the PCIe switch of the GPUs picked.
func sameSwitch(gs []gpuState, picks []int, j int) bool {
	sw := gs[picks[0]].gpu.PCIeSwitch
	return sw != "" && gs[j].gpu.PCIeSwitch == sw
}

// pickLinked looks for n free GPUs that fit together, growing a set from
// each free GPU in turn: the next GPU is the free one that fits with the
// set and ranks best (each pick counted busy for the next; see
// placer.rank), ties to the lower index. Of the sets that reach n GPUs it
// returns the one with the highest total rank (for Target, the highest
// mean node score, then the most binpacked), ties to the lowest indexes, as positions in index
// order; nil when none does. The growth is greedy: it finds a whole
// island, an NVSwitch's GPUs or a clique of a hybrid cube-mesh, but not
// every clique of an odd graph. gs is left as it was.
func pickLinked(pl placer, gs []gpuState, n int, fits fitsFunc) []int {
	var best []int
	var bestScore rank
	var picks []int
	for seed := range gs {
		if !gs[seed].free() || !gs[seed].hasTopology() {
			continue
		}
		picks = append(picks[:0], seed)
		score := pl.rank(gs, seed)
		gs[seed].bound = true
		for len(picks) < n {
			next, nextScore := -1, rank{}
			for j := range gs {
				if !gs[j].free() || !fits(gs, picks, j) {
					continue
				}
				if s := pl.rank(gs, j); next < 0 || s.better(nextScore) {
					next, nextScore = j, s
				}
			}
			if next < 0 {
				break
			}
			gs[next].bound = true
			picks = append(picks, next)
			score = score.add(nextScore)
		}
		for _, i := range picks {
			gs[i].bound = false
		}
		if len(picks) < n {
			continue
		}
		slices.Sort(picks)
		if best == nil || score.better(bestScore) || score == bestScore && slices.Compare(picks, best) < 0 {
			best, bestScore = slices.Clone(picks), score
		}
	}
	return best
}
