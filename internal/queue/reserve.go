package queue

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Reservations, backfill and start estimates, all from the running jobs'
// time limits taken as upper bounds.

// release is a time a job's time limit ends and its GPUs, or its memory
// on one shared GPU, come free.
type release struct {
	at time.Time
	id string
	// gpus are the positions of its whole GPUs; mem its memory on gpus[0].
	gpus []int
	mem  uint64
}

// releases returns the releases of the running jobs that have a time
// limit, a job past its limit freeing its GPUs now.
func releases(in Input, pos map[string]int) []release {
	var rels []release
	for i := range in.Running {
		r := &in.Running[i]
		if r.TimeLimit <= 0 {
			continue
		}
		rel := release{at: r.StartedAt.Add(r.TimeLimit), id: r.ID, mem: r.GPUMemory}
		if rel.at.Before(in.Now) {
			rel.at = in.Now
		}
		for _, u := range r.GPUs {
			if p, ok := pos[u]; ok {
				rel.gpus = append(rel.gpus, p)
			}
		}
		if len(rel.gpus) > 0 {
			rels = append(rels, rel)
		}
	}
	return rels
}

// sortReleases orders releases by time, then by job id.
func sortReleases(rels []release) {
	slices.SortFunc(rels, func(a, b release) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
}

// frees reports whether a GPU a whole-GPU job releases comes free for
// whole-GPU jobs: it is not shared and no use outside the queue holds it.
func (g *gpuState) frees() bool {
	return !g.shared && g.container == nil && !g.overMemory
}

// reservation is the head job's claim in one pool (whole GPUs, or memory
// on the shared GPUs).
type reservation struct {
	// known is false when the job's time limits free too little for the
	// head: then it reserves every GPU of its pool, and the pool is
	// first come, first served.
	known bool
	// at is when the head job can start at the latest, and by the job
	// whose time limit frees the last of what it needs.
	at time.Time
	by string
	// gpus are the positions of the GPUs the head needs at that time.
	gpus []int
}

// allows reports whether a job with time limit limit, starting now, may
// take GPUs the reservation needs: only if it ends by the reservation.
func (r *reservation) allows(now time.Time, limit time.Duration) bool {
	return r.known && limit > 0 && !now.Add(limit).After(r.at)
}

// block marks the reservation's GPUs closed to the job being placed, or
// opens them again.
func (r *reservation) block(gs []gpuState, on bool) {
	for _, p := range r.gpus {
		gs[p].blocked = on
	}
}

// wholeReservation reserves for a head job of n whole GPUs within scope
// sc the earliest time enough GPUs free up on one node open to it: on
// each such node the free GPUs it may take and those the releases free
// there, in time order; the node where that comes first wins, ties to the
// first by name. Of the GPUs free then on that node it reserves those the
// job's placement would pick. When no node ever frees enough, it reserves
// every free GPU open to the job.
func (p *pass) wholeReservation(pl placer, sc *scope, n int) reservation {
	var res reservation
	gs := p.gs
	sortReleases(p.rels)
	best := -1
	var bestOpened, opened []int
	for _, ni := range sc.nodes {
		nd := &p.nodes[ni]
		freeN := 0
		for i := nd.lo; i < nd.hi; i++ {
			if gs[i].free() {
				freeN++
			}
		}
		opened = opened[:0]
		for _, rel := range p.rels {
			if best >= 0 && !rel.at.Before(res.at) {
				break // rels are in time order: no earlier node here
			}
			if rel.mem > 0 {
				continue
			}
			for _, q := range rel.gpus {
				if q >= nd.lo && q < nd.hi && !gs[q].off && gs[q].frees() && (gs[q].job != nil || gs[q].bound) && !slices.Contains(opened, q) {
					opened = append(opened, q)
				}
			}
			if freeN+len(opened) >= n {
				best, res.known, res.at, res.by = ni, true, rel.at, rel.id
				bestOpened = append(bestOpened[:0], opened...)
				break
			}
		}
	}
	if !res.known {
		for _, ni := range sc.nodes {
			for i := p.nodes[ni].lo; i < p.nodes[ni].hi; i++ {
				if gs[i].free() {
					res.gpus = append(res.gpus, i)
				}
			}
		}
		return res
	}
	type saved struct {
		job   *RunningJob
		bound bool
	}
	keep := make([]saved, len(bestOpened))
	for k, q := range bestOpened {
		keep[k] = saved{gs[q].job, gs[q].bound}
		gs[q].job, gs[q].bound = nil, false
	}
	nd := &p.nodes[best]
	for _, q := range pickGPUs(pl, nd.gpus(gs), n) {
		res.gpus = append(res.gpus, nd.lo+q)
	}
	for k, q := range bestOpened {
		gs[q].job, gs[q].bound = keep[k].job, keep[k].bound
	}
	return res
}

// memReservation reserves for a head memory job of m bytes within scope
// sc the shared GPU open to it where enough declared memory frees up
// first, ties to the lower position (node, then index).
func (p *pass) memReservation(sc *scope, m uint64) reservation {
	var res reservation
	gs, rels, frac := p.gs, p.rels, p.frac
	sortReleases(rels)
	best := -1
	for i := range gs {
		g := &gs[i]
		if !g.memOpen() || !sc.eligible(gs, i) {
			continue
		}
		need := g.memDeclared + g.outsideMemory + m
		limit := usable(g, frac)
		if need <= limit {
			continue // it fits now: only a reservation keeps it out, which the head does not have
		}
		declared := g.memDeclared
		for _, rel := range rels {
			if rel.mem == 0 || rel.gpus[0] != i {
				continue
			}
			declared -= min(declared, rel.mem)
			if declared+g.outsideMemory+m <= limit {
				if best < 0 || rel.at.Before(res.at) {
					best, res.known, res.at, res.by = i, true, rel.at, rel.id
				}
				break
			}
		}
	}
	if best < 0 {
		for i := range gs {
			if gs[i].memOpen() && sc.eligible(gs, i) {
				res.gpus = append(res.gpus, i)
			}
		}
		return res
	}
	res.gpus = []int{best}
	return res
}

// pending is a job that waits in a pool and gets an estimate.
type pending struct {
	wait int // its position in Plan.Waits
	job  *QueuedJob
	sc   *scope // where it may run
}

// event is a release in the estimate's simulation; at is in Unix
// nanoseconds, cheaper to order than a time.Time.
type event struct {
	at  int64
	mem uint64 // memory freed on pos
	ref int32  // whose time limit: see eventID
	pos int32  // memory: the GPU; whole GPUs: their group
	n   int32  // whole GPUs freed
	seq int32
}

// eventID returns the job an event's ref names: rels[ref], or past them
// jobs[ref-len(rels)]; "" for -1. Events hold no string, so that the
// heap's moves need no write barriers.
func eventID(rels []release, jobs []pending, ref int32) string {
	switch {
	case ref < 0:
		return ""
	case int(ref) < len(rels):
		return rels[ref].id
	}
	return jobs[int(ref)-len(rels)].job.ID
}

// events is a min-heap of events by time, then by seq (the order they
// were added). It is typed, not container/heap, so that a push or a pop
// allocates nothing.
type events []event

func (e events) less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}

func (e *events) init() {
	for i := len(*e)/2 - 1; i >= 0; i-- {
		e.down(i)
	}
}

func (e *events) push(x event) {
	*e = append(*e, x)
	h := *e
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (e *events) pop() event {
	h := *e
	x := h[0]
	h[0] = h[len(h)-1]
	*e = h[:len(h)-1]
	e.down(0)
	return x
}

func (e *events) down(i int) {
	h := *e
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// estimate is one pending job's estimated start in Unix nanoseconds, 0
// when unknown, and the job whose time limit frees what it needs.
type estimate struct {
	at int64
	by string
}

// record gives w the estimate, rounded up to the minute, and whose time
// limit it is.
func (e estimate) record(w *Wait) {
	w.EstimatedStart, w.figures.by = time.Unix(0, ceilMinute(e.at)).UTC(), e.by
}

// estimateWhole simulates the whole-GPU pool: the releases in time order,
// the pending jobs starting in priority order (never before the one ahead)
// as soon as enough GPUs are free on one node open to them, each freeing
// them at its time limit. Free GPUs are counted by group (node and model),
// so that a job counts only those it may take; of the nodes that fit, a
// job takes the one with the fewest GPUs free to it (then the first by
// name), from its groups in order. Once one cannot be estimated, none
// behind it can. It records each estimate in the job's Wait.
func (p *pass) estimateWhole(jobs []pending, waits []Wait) {
	gs, rels := p.gs, p.rels
	free := make([]int32, len(p.groups))
	var total int32 // free in all groups: no node fits a job of more
	for i := range gs {
		if gs[i].free() {
			free[gs[i].group]++
			total++
		}
	}
	h := make(events, 0, len(rels)+len(gs)) // each start pops a release: the heap stays small
	var seq int32
	freed := make([]int32, len(p.groups))
	for k, rel := range rels {
		if rel.mem > 0 {
			continue
		}
		for _, q := range rel.gpus {
			if gs[q].frees() {
				freed[gs[q].group]++
			}
		}
		for g, n := range freed {
			if n > 0 {
				h = append(h, event{at: rel.at.UnixNano(), ref: int32(k), pos: int32(g), n: n, seq: seq})
				seq++
				freed[g] = 0
			}
		}
	}
	h.init()
	// fit returns the node open to sc with the fewest GPUs free to it of
	// those with n, -1 when none has.
	fit := func(sc *scope, n int32) int {
		best, bestFree := -1, int32(0)
		if total < n {
			return -1
		}
		for _, ni := range sc.nodes {
			nd := &p.nodes[ni]
			var f int32
			for g := nd.glo; g < nd.ghi; g++ {
				if sc.groupOK[g] {
					f += free[g]
				}
			}
			if f >= n && (best < 0 || f < bestFree) {
				best, bestFree = ni, f
			}
		}
		return best
	}
	t, by := p.in.Now.UnixNano(), int32(-1)
	for k, pj := range jobs {
		n := int32(pj.job.GPUs)
		ni := fit(pj.sc, n)
		for ni < 0 && len(h) > 0 {
			e := h.pop()
			free[e.pos] += e.n
			total += e.n
			t, by = max(t, e.at), e.ref
			ni = fit(pj.sc, n)
		}
		if ni < 0 {
			break
		}
		estimate{t, eventID(rels, jobs, by)}.record(&waits[pj.wait])
		nd := &p.nodes[ni]
		for g := nd.glo; g < nd.ghi && n > 0; g++ {
			if !pj.sc.groupOK[g] || free[g] == 0 {
				continue
			}
			take := min(n, free[g])
			free[g] -= take
			total -= take
			n -= take
			if pj.job.TimeLimit > 0 {
				h.push(event{at: t + int64(pj.job.TimeLimit), ref: int32(len(rels) + k), pos: int32(g), n: take, seq: seq})
				seq++
			}
		}
	}
}

// estimateMemory is estimateWhole for the memory jobs on the shared GPUs:
// a job starts on the fullest shared GPU open to it that it fits on.
func (p *pass) estimateMemory(jobs []pending, waits []Wait) {
	gs, rels, now, frac := p.gs, p.rels, p.in.Now, p.frac
	declared := make([]uint64, len(gs))
	for i := range gs {
		declared[i] = gs[i].memDeclared
	}
	h := make(events, 0, len(rels)+len(gs)) // each start pops a release: the heap stays small
	for k, rel := range rels {
		if rel.mem > 0 {
			h = append(h, event{at: rel.at.UnixNano(), ref: int32(k), pos: int32(rel.gpus[0]), mem: rel.mem, seq: int32(k)})
		}
	}
	h.init()
	seq := int32(len(rels))
	t, by := now.UnixNano(), int32(-1)
	fit := func(sc *scope, m uint64) int {
		best, bestFull := -1, uint64(0)
		for i := range gs {
			g := &gs[i]
			if g.memOpen() && sc.eligible(gs, i) && declared[i]+g.outsideMemory+m <= usable(g, frac) && (best < 0 || declared[i] > bestFull) {
				best, bestFull = i, declared[i]
			}
		}
		return best
	}
	for k, pj := range jobs {
		m := pj.job.GPUMemory
		at := fit(pj.sc, m)
		for at < 0 && len(h) > 0 {
			e := h.pop()
			declared[e.pos] -= min(declared[e.pos], e.mem)
			t, by = max(t, e.at), e.ref
			at = fit(pj.sc, m)
		}
		if at < 0 {
			break
		}
		estimate{t, eventID(rels, jobs, by)}.record(&waits[pj.wait])
		declared[at] += m
		if pj.job.TimeLimit > 0 {
			h.push(event{at: t + int64(pj.job.TimeLimit), ref: int32(len(rels) + k), pos: int32(at), mem: m, seq: seq})
			seq++
		}
	}
}

// waitFigures are what a Wait's sentence is built from.
type waitFigures struct {
	// text is the sentence of the job's reason; "" says the reason's
	// meaning.
	text string
	// pool is the pool the job waits in for an estimate (poolWhole,
	// poolMemory), 0 when it gets none: then text is the whole sentence.
	pool int8
	// ahead is how many of the pool's waiting jobs are ahead of it.
	ahead int32
	// by is the job whose time limit frees what it needs, "" when what is
	// free now would let it start.
	by string
	// otherDay is set when the estimate is not on the pass's day: the
	// sentence then says its date.
	otherDay bool
}

// The pools a Wait's estimate is from.
const (
	poolWhole int8 = 1 + iota
	poolMemory
)

// Text says why the job waits to a person, with the figures that matter:
// for a job that waits for GPUs, what is ahead of it and when it can
// start: "…; 3 jobs ahead of you; next GPUs free by j-000117's time limit
// at 14:20 UTC". A Wait made without figures says its reason's meaning.
func (w Wait) Text() string {
	f := &w.figures
	text := f.text
	if text == "" {
		text = w.Reason.Meaning()
	}
	if f.pool == 0 {
		return text
	}
	b := make([]byte, 0, len(text)+100)
	b = append(b, text...)
	// Ahead are the jobs before this one that wait for the same pool; a
	// held job, or one that waits for another job, takes a place in line
	// (its position) but nothing from this one.
	what := " for GPUs"
	if f.pool == poolMemory {
		what = " for shared GPU memory"
	}
	switch f.ahead {
	case 0:
		b = append(b, "; no job ahead of you waits"...)
	case 1:
		b = append(b, "; 1 job ahead of you waits"...)
	default:
		b = append(b, "; "...)
		b = strconv.AppendInt(b, int64(f.ahead), 10)
		b = append(b, " jobs ahead of you wait"...)
	}
	b = append(b, what...)
	switch {
	case w.EstimatedStart.IsZero():
		b = append(b, "; no start estimate: what it waits for has no time limit"...)
	case f.by == "":
		b = append(b, "; it can start by "...)
		b = appendClock(b, w.EstimatedStart, f.otherDay)
	default:
		what := "GPUs"
		if f.pool == poolMemory {
			what = "GPU memory"
		}
		b = append(b, "; next "...)
		b = append(b, what...)
		b = append(b, " free by "...)
		b = append(b, f.by...)
		b = append(b, "'s time limit at "...)
		b = appendClock(b, w.EstimatedStart, f.otherDay)
	}
	return string(b)
}

// ceilMinute rounds t (Unix nanoseconds) up to the minute: an upper bound
// stays one when rounded.
func ceilMinute(at int64) int64 {
	const m = int64(time.Minute)
	if r := at % m; r > 0 {
		return at - r + m
	} else if r < 0 {
		return at - r
	}
	return at
}

// appendClock appends t as "14:20 UTC", with the date ("2 Dec 14:20 UTC")
// when withDate is set; seconds are dropped (an estimate is already
// rounded up to the minute).
func appendClock(b []byte, t time.Time, withDate bool) []byte {
	t = t.UTC()
	if withDate {
		_, m, d := t.Date()
		b = strconv.AppendInt(b, int64(d), 10)
		b = append(b, ' ')
		b = append(b, m.String()[:3]...)
		b = append(b, ' ')
	}
	h, mi, _ := t.Clock()
	b = append(b, byte('0'+h/10), byte('0'+h%10), ':', byte('0'+mi/10), byte('0'+mi%10))
	return append(b, " UTC"...)
}
