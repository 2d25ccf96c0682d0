package queue

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The scheduler's phases, named as kube-scheduler's framework names them:
// filter (which GPUs a job may take), score (which of those it prefers)
// and bind (give them to it). Each is a small function over gpuState.

// gpuState is one GPU as a pass sees it.
type gpuState struct {
	gpu GPU
	// job is the job holding the GPU, nil if none.
	job *RunningJob
	// container is the first container outside the queue holding it.
	container *OutsideContainer
	// outsideMemory is the memory used by processes outside the queue,
	// and overMemory whether it is over the threshold.
	outsideMemory uint64
	overMemory    bool
	// bound is set when this pass gives the GPU to a job.
	bound bool
	// shared marks a GPU of Config.SharedGPUs: it serves memory jobs only.
	shared bool
	// blocked is set, only while a job's GPUs are picked, on the GPUs the
	// head job's reservation needs and the job may not take.
	blocked bool
	// memDeclared is the memory declared by the memory jobs on the GPU,
	// running or placed in this pass.
	memDeclared uint64
	// util is the GPU's measured utilisation (Input.Util) plus the
	// expected share of the memory jobs placed on it in this pass.
	util float64
	// nvlink are the positions among its node's GPUs of the GPUs this
	// one shares NVLink with, sorted (see linkGPUs).
	nvlink []int
	// off is set, only while a job is placed, on the GPUs of its nodes
	// whose model its --model constraint does not match.
	off bool
	// node and group are the GPU's node and group in the pass (see
	// fleetNode, group).
	node, group int32
}

// free reports whether a job may take the GPU.
func (g *gpuState) free() bool {
	return g.job == nil && !g.bound && g.container == nil && !g.overMemory && !g.shared && !g.blocked && !g.off
}

// outsideOnly reports whether only use outside the queue keeps the GPU
// from being free.
func (g *gpuState) outsideOnly() bool {
	return g.job == nil && !g.bound && !g.shared && !g.off && (g.container != nil || g.overMemory)
}

// filterGPUs is the filter phase: it returns the GPUs by node, then by
// index, each marked with what keeps it from being free. A running job with
// GPUMemory adds its memory to its shared GPU's declared memory instead of
// holding it (on a GPU no longer shared, it holds the GPU).
func filterGPUs(in Input) []gpuState {
	gs := make([]gpuState, len(in.GPUs))
	for i, g := range in.GPUs {
		gs[i].gpu = g
	}
	slices.SortFunc(gs, func(a, b gpuState) int {
		if a.gpu.Node != b.gpu.Node {
			return strings.Compare(a.gpu.Node, b.gpu.Node)
		}
		if a.gpu.Index != b.gpu.Index {
			return a.gpu.Index - b.gpu.Index
		}
		return strings.Compare(a.gpu.UUID, b.gpu.UUID)
	})
	byUUID := make(map[string]*gpuState, len(gs))
	for i := range gs {
		byUUID[gs[i].gpu.UUID] = &gs[i]
	}
	for _, u := range in.Config.SharedGPUs {
		if g := byUUID[u]; g != nil {
			g.shared = true
		}
	}
	for i := range in.Running {
		r := &in.Running[i]
		for _, u := range r.GPUs {
			switch g := byUUID[u]; {
			case g == nil:
			case r.GPUMemory > 0 && g.shared:
				g.memDeclared += r.GPUMemory
			case g.job == nil:
				g.job = r
			}
		}
	}
	for i := range in.Outside.Containers {
		for _, u := range in.Outside.Containers[i].GPUs {
			if g := byUUID[u]; g != nil && g.container == nil {
				g.container = &in.Outside.Containers[i]
			}
		}
	}
	threshold := in.Config.threshold()
	for i := range gs {
		g := &gs[i]
		g.outsideMemory = in.Outside.MemoryUsed[g.gpu.UUID]
		g.overMemory = float64(g.outsideMemory) > threshold*float64(g.gpu.MemoryTotal)
		g.util = max(0, in.Util[g.gpu.UUID])
	}
	for lo := 0; lo < len(gs); {
		hi := lo + 1
		for hi < len(gs) && gs[hi].gpu.Node == gs[lo].gpu.Node {
			hi++
		}
		linkGPUs(gs[lo:hi]) // topology is per node
		lo = hi
	}
	return gs
}

// scoreGPU is the score phase: how much a job prefers the free GPU at
// position i of gs, higher first. A GPU's peers are the GPUs it shares
// NVLink or a PCIe switch with, where the GPU carries topology, and else
// its neighbours by index (on most boards, pairs of them share a PCIe
// switch). Binpack scores a GPU by its busy peers, spread by its free
// ones; ties go to the lower index.
func scoreGPU(p Placement, gs []gpuState, i int) int {
	busy := 0
	if g := &gs[i]; g.hasTopology() {
		for j := range gs {
			if j != i && !gs[j].free() && (g.gpu.PCIeSwitch != "" && gs[j].gpu.PCIeSwitch == g.gpu.PCIeSwitch || slices.Contains(g.nvlink, j)) {
				busy++
			}
		}
	} else {
		for _, j := range []int{i - 1, i + 1} {
			if j >= 0 && j < len(gs) && !gs[j].free() {
				busy++
			}
		}
	}
	if p == Spread {
		return -busy
	}
	return busy
}

// pickGPUs chooses n free GPUs for a job and returns their positions in
// gs in index order, or nil when fewer than n are free (all or nothing).
// A job of two or more GPUs gets a set that shares NVLink if one is free,
// else one under a PCIe switch (see pickLinked), else the plain choice:
// one GPU at a time by score, each pick counted busy for the next. gs is
// left as it was.
func pickGPUs(pl placer, gs []gpuState, n int) []int {
	freeN := 0
	for i := range gs {
		if gs[i].free() {
			freeN++
		}
	}
	if freeN < n {
		return nil
	}
	if n >= 2 {
		if picks := pickLinked(pl, gs, n, nvlinked); picks != nil {
			return picks
		}
		if picks := pickLinked(pl, gs, n, sameSwitch); picks != nil {
			return picks
		}
	}
	picks := make([]int, 0, n)
	for len(picks) < n {
		best, bestScore := -1, rank{}
		for i := range gs {
			if !gs[i].free() {
				continue
			}
			if s := pl.rank(gs, i); best < 0 || s.better(bestScore) {
				best, bestScore = i, s
			}
		}
		gs[best].bound = true
		picks = append(picks, best)
	}
	for _, i := range picks {
		gs[i].bound = false
	}
	slices.Sort(picks)
	return picks
}

// bind is the bind phase: it gives the GPUs at picks to the job and
// returns the start.
func bind(gs []gpuState, picks []int, jobID string) Start {
	s := Start{JobID: jobID, GPUs: make([]string, len(picks))}
	for k, i := range picks {
		gs[i].bound = true
		s.GPUs[k] = gs[i].gpu.UUID
	}
	return s
}

// waitText is waitFor on one host of GPUs gs with the running jobs and
// the outside memory threshold given.
func waitText(n int, gs []gpuState, running []RunningJob, now time.Time, threshold float64) (Reason, string) {
	p := &pass{in: Input{Running: running, Now: now, Config: Config{OutsideMemoryThreshold: threshold}}, gs: gs}
	p.buildNodes()
	return p.waitFor(n, p.newScope("", "", ""))
}

// waitFor says why a job asking for n GPUs within scope sc cannot
// start: outside_use when the GPUs taken only by use outside the queue
// would have let it start on one node, resources otherwise, with a
// sentence naming the free GPUs, the use outside the queue, and the
// running job that reaches its time limit first. Only the nodes open to
// the job count.
func (p *pass) waitFor(n int, sc *scope) (Reason, string) {
	gs := p.gs
	freeN, mostFree, mostNode := 0, 0, -1
	outsideFits := false
	for _, ni := range sc.nodes {
		nd := &p.nodes[ni]
		f, o := 0, 0
		for i := nd.lo; i < nd.hi; i++ {
			switch g := &gs[i]; {
			case g.free():
				f++
			case g.outsideOnly():
				o++
			}
		}
		freeN += f
		if mostNode < 0 || f > mostFree {
			mostFree, mostNode = f, ni
		}
		outsideFits = outsideFits || o > 0 && f+o >= n
	}
	var parts []string
	if p.fleet {
		parts = append(parts, "waiting for "+gpusText(n)+" on one node")
	} else {
		parts = append(parts, "waiting for "+gpusText(n))
	}
	switch freeN {
	case 0:
		parts = append(parts, "none is free")
	case 1:
		parts = append(parts, "1 is free")
	default:
		parts = append(parts, strconv.Itoa(freeN)+" are free")
	}
	if p.fleet && freeN > mostFree {
		parts[len(parts)-1] += fmt.Sprintf(", at most %d on one node (%s)", mostFree, p.nodes[mostNode].name)
	}
	for _, ni := range sc.nodes {
		for i := p.nodes[ni].lo; i < p.nodes[ni].hi; i++ {
			g := &gs[i]
			if g.job != nil || g.bound || g.off {
				continue
			}
			if c := g.container; c != nil {
				parts = append(parts, fmt.Sprintf("%s is held by %s (outside the queue)", gpuName(g), containerText(c)))
			}
			if g.overMemory {
				parts = append(parts, fmt.Sprintf("%s has %s used by processes outside the queue (over %s of its memory)",
					gpuName(g), bytesText(g.outsideMemory), percentText(p.in.Config.threshold())))
			}
		}
	}
	if r := p.firstToEnd(sc); r != nil {
		left := r.StartedAt.Add(r.TimeLimit).Sub(p.in.Now)
		if left > 0 {
			parts = append(parts, fmt.Sprintf("%s (%s) reaches its time limit in %s", r.ID, r.User, durationText(left)))
		} else {
			parts = append(parts, fmt.Sprintf("%s (%s) is past its time limit and being stopped", r.ID, r.User))
		}
	}
	reason := ReasonResources
	if outsideFits {
		reason = ReasonOutsideUse
	}
	return reason, strings.Join(parts, "; ")
}

// gpuName names a GPU in a sentence: "GPU 2", on a fleet "GPU 2 of
// node-a".
func gpuName(g *gpuState) string {
	if g.gpu.Node == "" {
		return "GPU " + strconv.Itoa(g.gpu.Index)
	}
	return "GPU " + strconv.Itoa(g.gpu.Index) + " of " + g.gpu.Node
}

// containerText names a container outside the queue, with its user when
// known.
func containerText(c *OutsideContainer) string {
	if c.User != "" {
		return c.User + "'s container " + c.Name
	}
	return "container " + c.Name
}

// firstToEnd returns the running job with a time limit that reaches it
// first (ties by id), or nil when none has one. On a fleet only the jobs
// on nodes open to sc count.
func (p *pass) firstToEnd(sc *scope) *RunningJob {
	var first *RunningJob
	var firstEnd time.Time
	for i := range p.in.Running {
		r := &p.in.Running[i]
		if r.TimeLimit <= 0 || len(r.GPUs) == 0 {
			continue
		}
		if p.fleet {
			pos, ok := p.pos[r.GPUs[0]]
			if !ok || !sc.nodeOK[p.gs[pos].node] {
				continue
			}
		}
		end := r.StartedAt.Add(r.TimeLimit)
		if first == nil || end.Before(firstEnd) || end.Equal(firstEnd) && r.ID < first.ID {
			first, firstEnd = r, end
		}
	}
	return first
}

// durationText says d as a person reads it: in seconds under a minute,
// in minutes and seconds under ten minutes, and to the nearest minute
// above: "10 s", "4 min 5 s", "38 min", "2 h 5 min".
func durationText(d time.Duration) string {
	s := (d + time.Second - 1) / time.Second // a second not yet over counts
	if s < 60 {
		return fmt.Sprintf("%d s", s)
	}
	if s < 10*60 {
		// Under ten minutes the seconds matter: 4 min 5 s is not 5 min.
		if s%60 == 0 {
			return fmt.Sprintf("%d min", s/60)
		}
		return fmt.Sprintf("%d min %d s", s/60, s%60)
	}
	m := int((d + time.Minute/2) / time.Minute) // the nearest minute
	if m < 60 {
		return fmt.Sprintf("%d min", m)
	}
	if m%60 == 0 {
		return fmt.Sprintf("%d h", m/60)
	}
	return fmt.Sprintf("%d h %d min", m/60, m%60)
}

// bytesText says b in MiB under 1 GiB and in GiB with one decimal above.
func bytesText(b uint64) string {
	const mib, gib = 1 << 20, 1 << 30
	if b < gib {
		return fmt.Sprintf("%d MiB", (b+mib-1)/mib)
	}
	return fmt.Sprintf("%.1f GiB", float64(b)/gib)
}

// percentText says the fraction f as a percentage to two decimals: 0.05
// is "5%", 0.07 is "7%" (not 7.000000000000001%).
func percentText(f float64) string {
	return strconv.FormatFloat(math.Round(f*10000)/100, 'f', -1, 64) + "%"
}
