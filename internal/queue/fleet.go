package queue

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// The fleet: one pass places jobs on the GPUs of many nodes. A job's GPUs
// are all on one node; a job may name the nodes (QueuedJob.Node) and the
// GPU models (QueuedJob.Model) it runs on; drained nodes start nothing.
// One host is the fleet of one node named "".

// ValidNodeGlob returns an error when s is not a valid --node or --model
// glob (path.Match's syntax: *, ?, [a-z], \ escapes); "" is valid (any).
func ValidNodeGlob(s string) error {
	if _, err := path.Match(s, ""); err != nil {
		return fmt.Errorf("%q is not a valid pattern (use a name, or * ? [a-z] as path.Match reads them): %w", s, err)
	}
	return nil
}

// fleetNode is one node as a pass sees it.
type fleetNode struct {
	name string
	// lo and hi bound its GPUs in the pass's GPUs: gs[lo:hi], by index.
	lo, hi int
	// glo and ghi bound its groups in pass.groups: a group is the GPUs
	// of one node and one model, as the start estimate counts free GPUs
	// (a job with a model constraint counts only those it may take).
	glo, ghi int
	drained  bool
	// free counts its GPUs free to whole-GPU jobs, but for reservations
	// and model constraints: an upper bound that lets a job skip a full
	// node without looking at its GPUs.
	free int
	// util is the sum of its GPUs' util (gpuState.util) plus the
	// expected share of the whole-GPU jobs this pass placed on it.
	util float64
}

// gpus returns the node's GPUs.
func (nd *fleetNode) gpus(gs []gpuState) []gpuState { return gs[nd.lo:nd.hi] }

// buildNodes fills the pass's nodes and groups from its GPUs, which
// filterGPUs sorted by node. Without a named node there is one node, "",
// even with no GPU, so that one host says "this host has 0".
func (p *pass) buildNodes() {
	gs := p.gs
	if len(gs) == 0 {
		p.nodes = []fleetNode{{drained: p.in.Drained[""]}}
		return
	}
	for lo := 0; lo < len(gs); {
		name := gs[lo].gpu.Node
		hi := lo
		for hi < len(gs) && gs[hi].gpu.Node == name {
			hi++
		}
		ni := len(p.nodes)
		nd := fleetNode{name: name, lo: lo, hi: hi, glo: len(p.groups), drained: p.in.Drained[name]}
		models := make([]string, 0, 1)
		for k := lo; k < hi; k++ {
			if m := gs[k].gpu.Model; !slices.Contains(models, m) {
				models = append(models, m)
			}
		}
		slices.Sort(models)
		p.groups = append(p.groups, models...)
		nd.ghi = len(p.groups)
		for k := lo; k < hi; k++ {
			gs[k].node = int32(ni)
			gs[k].group = int32(nd.glo + slices.Index(models, gs[k].gpu.Model))
			nd.util += gs[k].util
			if gs[k].free() {
				nd.free++
			}
		}
		p.nodes = append(p.nodes, nd)
		lo = hi
	}
}

// scope is where the jobs with one pair of constraints may run.
type scope struct {
	// nodes are the nodes open to them (matching, not drained), by name;
	// nodeOK says the same by node.
	nodes  []int
	nodeOK []bool
	// gpu says, by position, whether a GPU's model matches; nil when
	// there is no model constraint.
	gpu []bool
	// groupOK says, by group, whether its GPUs are open to them.
	groupOK []bool
	// mostNode is the open node with the most GPUs not marked for
	// sharing that they may take, most that number and all its GPUs they
	// may take, shared ones included; mostNode is -1 when none is open.
	most, all, mostNode int
	// text is the node_constraint sentence when no node is open.
	text string
	// memTooBig caches pass.memTooBig's answer by the memory asked for.
	memTooBig map[uint64]string
}

// eligible reports whether the GPU at position i is open to the scope.
func (sc *scope) eligible(gs []gpuState, i int) bool {
	return sc.nodeOK[gs[i].node] && (sc.gpu == nil || sc.gpu[i])
}

// mask closes the GPUs of the scope's nodes whose model does not match
// while a job is placed (on), or opens them again.
func (sc *scope) mask(gs []gpuState, nodes []fleetNode, on bool) {
	if sc.gpu == nil {
		return
	}
	for _, ni := range sc.nodes {
		for i := nodes[ni].lo; i < nodes[ni].hi; i++ {
			if !sc.gpu[i] {
				gs[i].off = on
			}
		}
	}
}

// scopeKey is a job's constraints: its globs, and its image where the
// nodes' image allowlists differ (Input.NodeImages).
type scopeKey struct{ node, model, image string }

// scopeFor returns the scope of job j's constraints, made once a pass.
func (p *pass) scopeFor(j *QueuedJob) *scope {
	image := ""
	if len(p.in.NodeImages) > 0 {
		image = j.Image
	}
	if j.Node == "" && j.Model == "" && image == "" {
		if p.anyScope == nil {
			p.anyScope = p.newScope("", "", "")
		}
		return p.anyScope
	}
	k := scopeKey{j.Node, j.Model, image}
	if p.lastScope != nil && p.lastScopeKey == k {
		return p.lastScope
	}
	sc, ok := p.scopes[k]
	if !ok {
		if p.scopes == nil {
			p.scopes = map[scopeKey]*scope{}
		}
		sc = p.newScope(j.Node, j.Model, image)
		p.scopes[k] = sc
	}
	p.lastScope, p.lastScopeKey = sc, k
	return sc
}

// match reports whether glob matches name; "" matches everything and a
// bad glob nothing.
func match(glob, name string) bool {
	if glob == "" {
		return true
	}
	ok, err := path.Match(glob, name)
	return ok && err == nil
}

// newScope makes the scope of the jobs with the globs given: the nodes
// that match nodeGlob, have a GPU that matches modelGlob and allow image
// ("": any node), less the drained ones.
func (p *pass) newScope(nodeGlob, modelGlob, image string) *scope {
	sc := &scope{nodeOK: make([]bool, len(p.nodes)), groupOK: make([]bool, len(p.groups)), mostNode: -1}
	if modelGlob != "" {
		sc.gpu = make([]bool, len(p.gs))
	}
	var drained, refusing []string
	for ni := range p.nodes {
		nd := &p.nodes[ni]
		if !match(nodeGlob, nd.name) {
			continue
		}
		if image != "" && !p.allowsImage(nd.name, image) {
			refusing = append(refusing, nd.name)
			continue
		}
		exclusive, all := 0, 0
		for i := nd.lo; i < nd.hi; i++ {
			if sc.gpu != nil {
				if sc.gpu[i] = match(modelGlob, p.gs[i].gpu.Model); !sc.gpu[i] {
					continue
				}
			}
			all++
			if !p.gs[i].shared {
				exclusive++
			}
		}
		if modelGlob != "" && all == 0 {
			continue // none of its GPUs is of the model
		}
		if nd.drained {
			drained = append(drained, nd.name)
			continue
		}
		sc.nodeOK[ni] = true
		sc.nodes = append(sc.nodes, ni)
		for g := nd.glo; g < nd.ghi; g++ {
			sc.groupOK[g] = match(modelGlob, p.groups[g])
		}
		if sc.mostNode < 0 || exclusive > sc.most {
			sc.most, sc.all, sc.mostNode = exclusive, all, ni
		}
	}
	if len(sc.nodes) == 0 {
		sc.text = p.constraintText(nodeGlob, modelGlob, drained)
		if len(refusing) > 0 && len(drained) == 0 {
			sc.text = fmt.Sprintf("its image %s is allowed on no node that could run it: %s refuse it (their queue.images)", image, namesText(refusing))
		}
	}
	return sc
}

// allowsImage reports whether node's queue.images allow image: a node
// Input.NodeImages does not name allows every image.
func (p *pass) allowsImage(node, image string) bool {
	globs, ok := p.in.NodeImages[node]
	if !ok {
		return true
	}
	for _, g := range globs {
		if match(g, image) && g != "" {
			return true
		}
	}
	return false
}

// constraintText is the node_constraint sentence of a job with the
// constraints that no open node matches.
func (p *pass) constraintText(nodeGlob, modelGlob string, drained []string) string {
	var asks []string
	if nodeGlob != "" {
		asks = append(asks, "--node "+nodeGlob)
	}
	if modelGlob != "" {
		asks = append(asks, "--model "+modelGlob)
	}
	for _, g := range []string{nodeGlob, modelGlob} {
		if err := ValidNodeGlob(g); err != nil {
			return fmt.Sprintf("asks for %s: %v", strings.Join(asks, " "), err)
		}
	}
	if !p.fleet {
		// One host: its GPUs name no node.
		switch {
		case len(drained) > 0:
			return "this host is drained: no job starts here until an admin undrains it (gpumeter node undrain)"
		case nodeGlob != "":
			return fmt.Sprintf("asks for %s; this host's GPUs name no node (it is one host, not a fleet)", strings.Join(asks, " "))
		}
		return fmt.Sprintf("asks for %s; no GPU here matches (the GPU models here: %s)", strings.Join(asks, " "), namesText(p.models()))
	}
	if len(drained) > 0 {
		if len(asks) == 0 {
			return fmt.Sprintf("every node is drained (%s): no job starts until an admin undrains one (gpumeter node undrain)", namesText(drained))
		}
		return fmt.Sprintf("asks for %s; every node that matches is drained (%s): it starts once an admin undrains one (gpumeter node undrain)", strings.Join(asks, " "), namesText(drained))
	}
	names := make([]string, len(p.nodes))
	for i := range p.nodes {
		names[i] = p.nodes[i].name
	}
	what := "the nodes are " + namesText(names)
	if modelGlob != "" {
		what += "; their GPU models " + namesText(p.models())
	}
	return fmt.Sprintf("asks for %s; no node matches (%s)", strings.Join(asks, " "), what)
}

// models returns the GPU models of the pass's GPUs, sorted, without "".
func (p *pass) models() []string {
	var models []string
	for _, m := range p.groups {
		if m != "" && !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	slices.Sort(models)
	return models
}

// namesText lists names, at most five of them: "a, b, c and 4 more".
func namesText(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	if len(names) <= 5 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:5], ", "), len(names)-5)
}

// tooBigText is the too_big sentence of a job of n GPUs more than any
// open node of its scope gives.
func (p *pass) tooBigText(sc *scope, n int) string {
	if !p.fleet {
		if sc.most < sc.all {
			return fmt.Sprintf("asks for %d GPUs; this host has %d not marked for sharing", n, sc.most)
		}
		return fmt.Sprintf("asks for %d GPUs; this host has %d", n, sc.most)
	}
	has := fmt.Sprint(sc.most)
	if sc.most < sc.all {
		has += " not marked for sharing"
	}
	return fmt.Sprintf("asks for %d GPUs, more than any node it may run on gives (a job's GPUs are all on one node); the largest, %s, has %s",
		n, p.nodes[sc.mostNode].name, has)
}

// held reports whether the GPU is busy for the node choice: a job or a
// container outside the queue holds it, processes outside the queue use
// over the threshold of its memory, or memory jobs share it.
func (g *gpuState) held() bool {
	return g.job != nil || g.bound || g.container != nil || g.overMemory || g.shared && g.memDeclared > 0
}

// nodeRank ranks an open node for a job of share GPUs (1 for a memory
// job) given its free GPUs for the job and its busy ones (see held).
// Target: the node score of u, the node's mean utilisation plus the
// job's expected share spread over its GPUs, then by busy GPUs; Binpack:
// the most busy GPUs, then the fewest free; Spread: the fewest busy, then
// the most free. It returns the rank, the score the record shows and u.
func (pl placer) nodeRank(nd *fleetNode, free, busy int, share float64) (rank, float64, float64) {
	count := float64(max(1, nd.hi-nd.lo))
	u := nd.util / count
	switch pl.policy {
	case Target:
		u += pl.expected * share / count
		s := nodeScore(u, pl.target)
		return rank{s, float64(busy)}, s, u
	case Spread:
		return rank{float64(-busy), float64(free)}, float64(-busy), u
	}
	return rank{float64(busy), float64(-free)}, float64(busy), u
}

// nodeChoice chooses the node of a job among the open nodes of its scope
// that fit reports as fitting it, ties to the first by name, and records
// every such node when the pass is a fleet's. fits returns whether the
// node fits, and its free GPUs for the job.
func (p *pass) nodeChoice(pl placer, sc *scope, share float64, fits func(nd *fleetNode) (bool, int)) (int, []NodeCandidate) {
	best, bestRank := -1, rank{}
	var cands []NodeCandidate
	for _, ni := range sc.nodes {
		nd := &p.nodes[ni]
		ok, free := fits(nd)
		if !ok {
			continue
		}
		busy := 0
		for i := nd.lo; i < nd.hi; i++ {
			if p.gs[i].held() {
				busy++
			}
		}
		r, score, u := pl.nodeRank(nd, free, busy, share)
		if p.fleet {
			cands = append(cands, NodeCandidate{Node: nd.name, Score: score, Util: u})
		}
		if best < 0 || r.better(bestRank) {
			best, bestRank = ni, r
		}
	}
	if best < 0 || !p.fleet {
		return best, nil
	}
	chosen := p.nodes[best].name
	k := slices.IndexFunc(cands, func(c NodeCandidate) bool { return c.Node == chosen })
	c := cands[k]
	c.Chosen = true
	rest := append(cands[:k:k], cands[k+1:]...)
	slices.SortFunc(rest, func(a, b NodeCandidate) int {
		if c := byScore(a.Score, b.Score); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})
	return best, append([]NodeCandidate{c}, rest...)
}

// pickWhole chooses a node and n free GPUs on it for a whole-GPU job:
// the node by nodeChoice among those with n free GPUs, then its GPUs as
// on one host (pickGPUs, topology included). It returns their positions
// in the pass's GPUs in index order and the record, or -1 and nil when no
// node has n free.
func (p *pass) pickWhole(pl placer, sc *scope, n int) (int, []int, *PlacementRecord) {
	ni, nodes := p.nodeChoice(pl, sc, float64(n), func(nd *fleetNode) (bool, int) {
		if nd.free < n {
			return false, 0
		}
		free := 0
		for i := nd.lo; i < nd.hi; i++ {
			if p.gs[i].free() {
				free++
			}
		}
		return free >= n, free
	})
	if ni < 0 {
		return -1, nil, nil
	}
	nd := &p.nodes[ni]
	gs := nd.gpus(p.gs)
	picks := pickGPUs(pl, gs, n)
	rec := wholeRecord(pl, gs, picks)
	rec.Nodes = nodes
	for k := range picks {
		picks[k] += nd.lo
	}
	return ni, picks, rec
}

// pickMemoryNode chooses a node for a memory job of m bytes among those
// with a shared GPU it fits on, by nodeChoice, then its GPU there as on
// one host (pickMemory). It returns the GPU's position and the record, or
// -1 and nil.
func (p *pass) pickMemoryNode(pl placer, sc *scope, m uint64) (int, *PlacementRecord) {
	ni, nodes := p.nodeChoice(pl, sc, 1, func(nd *fleetNode) (bool, int) {
		fits := false
		for i := nd.lo; i < nd.hi && !fits; i++ {
			fits = p.gs[i].memFits(m, p.frac)
		}
		return fits, 0
	})
	if ni < 0 {
		return -1, nil
	}
	nd := &p.nodes[ni]
	best, rec := pickMemory(pl, nd.gpus(p.gs), m, p.frac)
	rec.Nodes = nodes
	return nd.lo + best, rec
}
