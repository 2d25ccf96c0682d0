package queue

import (
	"fmt"
	"time"
)

// heldText is the sentence of every held job.
const heldText = "held: it keeps its place in the queue and starts once released"

// Schedule makes one scheduling pass. The rules:
//
//   - Order: by priority, highest first, then first submitted, then by
//     job id (FIFO among equal priorities). A job's priority is
//     Weights.FairShare × its user's fair-share factor (Input.FairShare,
//     see FairShareFactor) + Weights.Age × min(1, waited/AgeMax) +
//     Weights.Class × its class value (low 0, normal 0.5, high 1). With
//     all weights 0, DefaultWeights: fair share alone, so that equal
//     factors give first come, first served.
//   - A held job keeps its place and does not start (held); a job of a
//     team in OverBudget waits (budget); a job whose start would take its
//     user or team past the cap waits (user_gpu_limit, team_gpu_limit);
//     a job that asks for more than the host can ever give waits
//     (too_big); a task of an array that already runs as many tasks as
//     its cap allows waits (array_limit). None of them holds up anyone.
//     Caps count whole GPUs: a memory job counts 0, so only a cap of 0
//     keeps it out.
//   - Two pools: whole GPUs (every GPU not in SharedGPUs) and memory on
//     the shared GPUs. A job draws from one pool only, so it can never
//     delay the other pool's jobs.
//   - Backfill with a reservation: the first job of a pool that cannot
//     start, the head, gets a reservation: the earliest time enough frees
//     up in its pool, from the running jobs' time limits (a running job
//     without one never frees its GPUs), and the GPUs it needs then. A job
//     behind it starts now only if it fits now and either its time limit
//     ends by the reservation or it takes none of the reserved GPUs. Only
//     the head gets a reservation (not Slurm's conservative variant, where
//     every job gets one). When the time limits free too little for the
//     head, it reserves all its pool's free GPUs: first come, first
//     served, as if there were no backfill.
//   - Estimates: every job that waits in a pool gets EstimatedStart from
//     the same calculation: the releases in time order, the pool's
//     waiting jobs starting in priority order as what they need frees up,
//     each freeing it at its time limit. Time limits are upper bounds, so
//     a job starts by its estimate unless a job ahead of it is in the way
//     with no time limit or use outside the queue grows. Held, capped,
//     over-budget and too-big jobs have none.
//   - A GPU is free when no job holds it, no container outside the queue
//     holds it, and processes outside the queue use no more than the
//     threshold of its memory.
//   - Memory jobs: a job with GPUMemory gets one shared GPU where the
//     memory its memory jobs declare, the memory used outside the queue
//     there and its own stay within SharedMemoryFraction of the GPU's
//     memory; a container outside the queue holding the GPU keeps memory
//     jobs off it (outside_use).
//   - Placement is all or nothing, binpack, spread or target (see
//     Placement and Target), and every start records its candidates and
//     their scores; the same input always gives the same plan.
//   - Topology, where the GPUs carry it: a job of two or more GPUs gets
//     GPUs that all share NVLink with each other if such a set is free,
//     else GPUs under one PCIe switch, else the plain choice; binpack and
//     spread then count a GPU's topology peers instead of its neighbours
//     by index (see scoreGPU), and target scores the set by its mean.
func Schedule(in Input) Plan {
	p := newPass(in)
	for k, key := range p.order {
		j := rankedJob{&in.Queued[key.i], key.priority, p.holders[key.i], nil}
		j.scope = p.scopeFor(j.QueuedJob)
		p.plan.Order[k] = Ranked{JobID: j.ID, Priority: j.priority, Position: k + 1}
		if reason, text := p.refuse(j); reason != "" {
			p.wait(j, k, reason, text)
			continue
		}
		if j.GPUMemory > 0 {
			p.memory(j, k)
		} else {
			p.whole(j, k)
		}
	}
	p.estimate()
	return p.plan
}

// pool is one pool's head and the jobs waiting in it.
type pool struct {
	head        bool
	res         reservation
	blockedText string
	pending     []pending
	// preempts is set when the head preempts: from then on preemptible
	// jobs keep off its reservation too.
	preempts bool
}

// pass is the state of one Schedule call.
type pass struct {
	in                 Input
	gs                 []gpuState
	order              []orderKey
	plan               Plan
	frac               float64
	users              map[string]*holder
	teams              map[string]*holder
	holders            []jobHolders // by index in Input.Queued
	lastUser, lastTeam *holder      // the holders made or found last
	rels               []release    // the running jobs' and this pass's starts'
	wholePool, memPool pool
	capTexts           map[capKey]string
	arrays             map[string]*arrayState // by array id; see array.go
	pos                map[string]int         // GPU UUID to its position in gs
	// fleet is set when a GPU names its node; nodes are the nodes by
	// name (one, "", on one host), groups the model of each group of
	// their GPUs (see fleetNode.glo).
	fleet    bool
	nodes    []fleetNode
	groups   []string
	anyScope *scope              // the scope of jobs without constraints
	scopes   map[scopeKey]*scope // of the others
	// lastScope is the scope found last, of lastScopeKey.
	lastScope    *scope
	lastScopeKey scopeKey
}

func newPass(in Input) *pass {
	p := &pass{in: in, gs: filterGPUs(in), frac: in.Config.memFraction(), capTexts: map[capKey]string{}}
	p.pos = make(map[string]int, len(p.gs))
	for i := range p.gs {
		p.pos[p.gs[i].gpu.UUID] = i
		p.fleet = p.fleet || p.gs[i].gpu.Node != ""
	}
	p.buildNodes()
	p.rels = releases(in, p.pos)
	p.arrays = runningArrays(in.Running)
	p.users, p.teams = map[string]*holder{}, map[string]*holder{}
	users, teams := userGPUs(in.Running)
	for u, n := range users {
		p.user(u).have = n
	}
	for t, n := range teams {
		p.team(t).have = n
	}
	p.holders = make([]jobHolders, len(in.Queued))
	for i := range in.Queued {
		j := &in.Queued[i]
		p.holders[i] = jobHolders{p.user(j.User), p.team(j.Team)}
	}
	p.order = queueOrder(in, func(i int) float64 { return p.holders[i].user.fairShare })
	n := len(p.order)
	p.plan = Plan{Order: make([]Ranked, n), Starts: make([]Start, 0, min(n, len(p.gs))), Waits: make([]Wait, 0, n)}
	return p
}

// wait records that the job at position k of the order waits.
func (p *pass) wait(j rankedJob, k int, reason Reason, text string) {
	if j.Preempted && reason == ReasonResources {
		reason, text = ReasonPreempted, preemptedText(text, reason)
	}
	p.plan.Waits = append(p.plan.Waits, Wait{JobID: j.ID, Reason: reason, Position: k + 1, Priority: j.priority, figures: waitFigures{text: text}})
}

// refuse returns why a job may not start whatever the GPUs, or "".
func (p *pass) refuse(j rankedJob) (Reason, string) {
	switch {
	case j.Held:
		return ReasonHeld, heldText
	case j.GPUMemory > 0 && j.GPUs != 0:
		return ReasonInvalidRequest, fmt.Sprintf("asks for %d GPUs and %s of GPU memory; a job asks for one or the other", j.GPUs, bytesText(j.GPUMemory))
	case j.GPUMemory == 0 && j.GPUs < 1:
		return ReasonInvalidRequest, fmt.Sprintf("asks for %d GPUs; a job needs at least 1", j.GPUs)
	case len(j.scope.nodes) == 0:
		return ReasonNodeConstraint, j.scope.text
	case j.GPUMemory == 0 && j.GPUs > j.scope.most:
		return ReasonTooBig, p.tooBigText(j.scope, j.GPUs)
	case j.GPUMemory > 0:
		if text := p.memTooBig(j.scope, j.GPUMemory); text != "" {
			return ReasonTooBig, text
		}
	}
	u, t := j.user, j.team
	if t.overBudget {
		return ReasonBudget, p.capText(capKey{budget: true, who: j.Team})
	}
	if u.limit <= 0 || u.have+j.GPUs > u.limit {
		return ReasonUserGPULimit, p.capText(capKey{who: j.User, have: u.have, ask: j.GPUs, limit: u.limit})
	}
	if t.capped && (t.limit <= 0 || t.have+j.GPUs > t.limit) {
		return ReasonTeamGPULimit, p.capText(capKey{team: true, who: j.Team, have: t.have, ask: j.GPUs, limit: t.limit})
	}
	return p.arrayRefuse(j)
}

// holder is what a pass knows of a user or a team: its name, the whole
// GPUs its jobs hold, its cap, for a user the fair-share factor and the
// expected share of a GPU, and for a team whether it is over budget.
type holder struct {
	name                string
	have, limit         int
	fairShare, expected float64
	capped, overBudget  bool
}

// jobHolders are a queued job's user and team, looked up once a pass.
type jobHolders struct{ user, team *holder }

// user returns the pass's holder for user, made on first use. The one
// found last is tried first: a user's jobs often come one after another.
func (p *pass) user(name string) *holder {
	if h := p.lastUser; h != nil && h.name == name {
		return h
	}
	h, ok := p.users[name]
	if !ok {
		h = &holder{name: name, limit: p.in.Config.userLimit(name), capped: true, fairShare: 1, expected: 1}
		if fs, ok := p.in.FairShare[name]; ok {
			h.fairShare = fs
		}
		if e, ok := p.in.Expected[name]; ok {
			h.expected = e
		}
		p.users[name] = h
	}
	p.lastUser = h
	return h
}

// team returns the pass's holder for team, made on first use; as user.
func (p *pass) team(name string) *holder {
	if h := p.lastTeam; h != nil && h.name == name {
		return h
	}
	h, ok := p.teams[name]
	if !ok {
		h = &holder{name: name, overBudget: p.in.OverBudget[name]}
		h.limit, h.capped = p.in.Config.teamLimit(name)
		p.teams[name] = h
	}
	p.lastTeam = h
	return h
}

func (p *pass) capText(k capKey) string {
	text, ok := p.capTexts[k]
	if !ok {
		text = capText(k)
		p.capTexts[k] = text
	}
	return text
}

// whole places a job of whole GPUs, or has it wait.
func (p *pass) whole(j rankedJob, k int) {
	pl := newPlacer(&p.in.Config, j.user.expected)
	pw := &p.wholePool
	sc := j.scope
	sc.mask(p.gs, p.nodes, true)
	defer sc.mask(p.gs, p.nodes, false)
	blocked := pw.head && !pw.res.allows(p.in.Now, j.TimeLimit) && (!j.Preemptible || pw.preempts)
	if blocked {
		pw.res.block(p.gs, true)
	}
	ni, picks, rec := p.pickWhole(pl, sc, j.GPUs)
	if blocked {
		pw.res.block(p.gs, false)
	}
	if picks == nil {
		p.pend(pw, j, k)
		if pw.head {
			p.wait(j, k, ReasonResources, pw.blockedText)
			return
		}
		reason, text := p.waitFor(j.GPUs, sc)
		p.wait(j, k, reason, text)
		pw.preempts = p.preempt(j)
		pw.head = true
		pw.res = p.wholeReservation(pl, sc, j.GPUs)
		pw.blockedText = fmt.Sprintf("waiting behind %s (%s), first in the queue, which waits for %s", j.ID, j.User, gpusText(j.GPUs))
		return
	}
	s := bind(p.gs, picks, j.ID)
	s.Node, s.Placement = p.nodes[ni].name, rec
	p.nodes[ni].util += pl.expected * float64(j.GPUs)
	p.nodes[ni].free -= len(picks)
	p.started(j, s, release{gpus: picks})
	j.user.have += j.GPUs
	j.team.have += j.GPUs
}

// memory places a memory job on a shared GPU, or has it wait.
func (p *pass) memory(j rankedJob, k int) {
	pl := newPlacer(&p.in.Config, j.user.expected)
	pm := &p.memPool
	sc := j.scope
	sc.mask(p.gs, p.nodes, true)
	defer sc.mask(p.gs, p.nodes, false)
	blocked := pm.head && !pm.res.allows(p.in.Now, j.TimeLimit)
	if blocked {
		pm.res.block(p.gs, true)
	}
	best, rec := p.pickMemoryNode(pl, sc, j.GPUMemory)
	if blocked {
		pm.res.block(p.gs, false)
	}
	if best < 0 {
		p.pend(pm, j, k)
		if pm.head {
			p.wait(j, k, ReasonResources, pm.blockedText)
			return
		}
		reason, text := p.memWaitText(j.GPUMemory, sc)
		p.wait(j, k, reason, text)
		pm.head = true
		pm.res = p.memReservation(sc, j.GPUMemory)
		pm.blockedText = fmt.Sprintf("waiting behind %s (%s), first in the queue, which waits for %s on a shared GPU", j.ID, j.User, bytesText(j.GPUMemory))
		return
	}
	g := &p.gs[best]
	g.memDeclared += j.GPUMemory
	g.util += pl.expected
	p.nodes[g.node].util += pl.expected
	p.started(j, Start{JobID: j.ID, GPUs: []string{g.gpu.UUID}, Node: g.gpu.Node, Placement: rec}, release{gpus: []int{best}, mem: j.GPUMemory})
}

// pend notes a job that waits in pool pl for an estimate. The whole-GPU
// pool's list is made for every job left, the memory pool's grows: memory
// jobs are few.
func (p *pass) pend(pl *pool, j rankedJob, k int) {
	if pl.pending == nil && pl == &p.wholePool {
		pl.pending = make([]pending, 0, len(p.order)-k)
	}
	pl.pending = append(pl.pending, pending{wait: len(p.plan.Waits), job: j.QueuedJob, sc: j.scope})
}

// started records a start and, when the job has a time limit, its release.
func (p *pass) started(j rankedJob, s Start, rel release) {
	p.plan.Starts = append(p.plan.Starts, s)
	p.arrayStarted(j)
	if j.TimeLimit > 0 {
		rel.at, rel.id = p.in.Now.Add(j.TimeLimit), j.ID
		p.rels = append(p.rels, rel)
	}
}

// estimate gives every pending job its estimated start and keeps what
// its sentence says of it: how many jobs are ahead of it, whose time
// limit frees what it needs and whether that is on another day. No
// sentence is written here: Wait.Text writes one when someone asks.
func (p *pass) estimate() {
	now := p.in.Now.UTC()
	dayStart := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	start, end := dayStart.UnixNano(), dayStart.AddDate(0, 0, 1).UnixNano()
	for _, pp := range []struct {
		pl   *pool
		kind int8
	}{{&p.wholePool, poolWhole}, {&p.memPool, poolMemory}} {
		pending := pp.pl.pending
		if len(pending) == 0 {
			continue
		}
		for k := range pending {
			f := &p.plan.Waits[pending[k].wait].figures
			f.pool, f.ahead = pp.kind, int32(k)
		}
		if pp.kind == poolWhole {
			p.estimateWhole(pending, p.plan.Waits)
		} else {
			p.estimateMemory(pending, p.plan.Waits)
		}
		for k := range pending {
			w := &p.plan.Waits[pending[k].wait]
			if at := w.EstimatedStart; !at.IsZero() {
				ns := at.UnixNano()
				w.figures.otherDay = ns < start || ns >= end
			}
		}
	}
}
