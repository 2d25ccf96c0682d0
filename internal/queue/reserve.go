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
	// gpus marks, by position, the GPUs the head needs at that time.
	gpus []bool
}

// allows reports whether a job with time limit limit, starting now, may
// take GPUs the reservation needs: only if it ends by the reservation.
func (r *reservation) allows(now time.Time, limit time.Duration) bool {
	return r.known && limit > 0 && !now.Add(limit).After(r.at)
}

// block marks the reservation's GPUs closed to the job being placed, or
// opens them again.
func (r *reservation) block(gs []gpuState, on bool) {
	for p, ok := range r.gpus {
		if ok {
			gs[p].blocked = on
		}
	}
}

// wholeReservation reserves for a head job of n whole GPUs the earliest
// time enough GPUs free up: the free GPUs and those the releases free, in
// time order. Of the GPUs free then it reserves those the job's placement
// would pick.
func wholeReservation(pl placer, gs []gpuState, rels []release, n int) reservation {
	res := reservation{gpus: make([]bool, len(gs))}
	freeN := 0
	for i := range gs {
		if gs[i].free() {
			freeN++
		}
	}
	sortReleases(rels)
	var opened []int
	for _, rel := range rels {
		if rel.mem > 0 {
			continue
		}
		for _, p := range rel.gpus {
			if gs[p].frees() && (gs[p].job != nil || gs[p].bound) && !slices.Contains(opened, p) {
				opened = append(opened, p)
			}
		}
		if freeN+len(opened) >= n {
			res.known, res.at, res.by = true, rel.at, rel.id
			break
		}
	}
	if !res.known {
		for i := range gs {
			res.gpus[i] = gs[i].free()
		}
		return res
	}
	type saved struct {
		job   *RunningJob
		bound bool
	}
	keep := make([]saved, len(opened))
	for k, p := range opened {
		keep[k] = saved{gs[p].job, gs[p].bound}
		gs[p].job, gs[p].bound = nil, false
	}
	for _, p := range pickGPUs(pl, gs, n) {
		res.gpus[p] = true
	}
	for k, p := range opened {
		gs[p].job, gs[p].bound = keep[k].job, keep[k].bound
	}
	return res
}

// memReservation reserves for a head memory job of m bytes the shared GPU
// where enough declared memory frees up first, ties to the lower index.
func memReservation(gs []gpuState, rels []release, m uint64, frac float64) reservation {
	res := reservation{gpus: make([]bool, len(gs))}
	sortReleases(rels)
	best := -1
	for i := range gs {
		g := &gs[i]
		if !g.memOpen() {
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
			res.gpus[i] = gs[i].memOpen()
		}
		return res
	}
	res.gpus[best] = true
	return res
}

// pending is a job that waits in a pool and gets an estimate.
type pending struct {
	wait  int // its position in Plan.Waits
	job   *QueuedJob
	ahead int // how many of the pool's pending jobs are ahead of it
}

// event is a release in the estimate's simulation; at is in Unix
// nanoseconds, cheaper to order than a time.Time.
type event struct {
	at  int64
	id  string
	pos int    // memory: the GPU
	n   int    // whole GPUs freed
	mem uint64 // memory freed on pos
	seq int
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

// time returns the estimate rounded up to the minute, zero when unknown.
func (e estimate) time() time.Time {
	if e.at == 0 {
		return time.Time{}
	}
	return time.Unix(0, ceilMinute(e.at)).UTC()
}

// estimateWhole simulates the whole-GPU pool: the releases in time order,
// the pending jobs starting in priority order (never before the one ahead)
// as soon as enough GPUs are free, each freeing them at its time limit.
// Once one cannot be estimated, none behind it can.
func estimateWhole(gs []gpuState, rels []release, jobs []pending, now time.Time) []estimate {
	freeN := 0
	for i := range gs {
		if gs[i].free() {
			freeN++
		}
	}
	h := make(events, 0, len(rels)+len(gs)) // each start pops a release: the heap stays small
	seq := 0
	for _, rel := range rels {
		if rel.mem > 0 {
			continue
		}
		n := 0
		for _, p := range rel.gpus {
			if gs[p].frees() {
				n++
			}
		}
		if n > 0 {
			h = append(h, event{at: rel.at.UnixNano(), id: rel.id, n: n, seq: seq})
			seq++
		}
	}
	h.init()
	out := make([]estimate, len(jobs))
	t, by := now.UnixNano(), ""
	for k, pj := range jobs {
		for freeN < pj.job.GPUs && len(h) > 0 {
			e := h.pop()
			freeN += e.n
			t, by = max(t, e.at), e.id
		}
		if freeN < pj.job.GPUs {
			break
		}
		out[k] = estimate{t, by}
		freeN -= pj.job.GPUs
		if pj.job.TimeLimit > 0 {
			h.push(event{at: t + int64(pj.job.TimeLimit), id: pj.job.ID, n: pj.job.GPUs, seq: seq})
			seq++
		}
	}
	return out
}

// estimateMemory is estimateWhole for the memory jobs on the shared GPUs:
// a job starts on the fullest shared GPU it fits on.
func estimateMemory(gs []gpuState, rels []release, jobs []pending, now time.Time, frac float64) []estimate {
	declared := make([]uint64, len(gs))
	for i := range gs {
		declared[i] = gs[i].memDeclared
	}
	h := make(events, 0, len(rels)+len(gs)) // each start pops a release: the heap stays small
	for k, rel := range rels {
		if rel.mem > 0 {
			h = append(h, event{at: rel.at.UnixNano(), id: rel.id, pos: rel.gpus[0], mem: rel.mem, seq: k})
		}
	}
	h.init()
	seq := len(rels)
	out := make([]estimate, len(jobs))
	t, by := now.UnixNano(), ""
	fit := func(m uint64) int {
		best, bestFull := -1, uint64(0)
		for i := range gs {
			g := &gs[i]
			if g.memOpen() && declared[i]+g.outsideMemory+m <= usable(g, frac) && (best < 0 || declared[i] > bestFull) {
				best, bestFull = i, declared[i]
			}
		}
		return best
	}
	for k, pj := range jobs {
		m := pj.job.GPUMemory
		p := fit(m)
		for p < 0 && len(h) > 0 {
			e := h.pop()
			declared[e.pos] -= min(declared[e.pos], e.mem)
			t, by = max(t, e.at), e.id
			p = fit(m)
		}
		if p < 0 {
			break
		}
		out[k] = estimate{t, by}
		declared[p] += m
		if pj.job.TimeLimit > 0 {
			h.push(event{at: t + int64(pj.job.TimeLimit), id: pj.job.ID, pos: p, mem: m, seq: seq})
			seq++
		}
	}
	return out
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
	// now is the pass's time in Unix seconds: a time on another day says
	// its date.
	now int64
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
	switch f.ahead {
	case 0:
		b = append(b, "; no job ahead of you"...)
	case 1:
		b = append(b, "; 1 job ahead of you"...)
	default:
		b = append(b, "; "...)
		b = strconv.AppendInt(b, int64(f.ahead), 10)
		b = append(b, " jobs ahead of you"...)
	}
	switch {
	case w.EstimatedStart.IsZero():
		b = append(b, "; no start estimate: what it waits for has no time limit"...)
	case f.by == "":
		b = append(b, "; it can start by "...)
		b = appendClock(b, w.EstimatedStart, f.now)
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
		b = appendClock(b, w.EstimatedStart, f.now)
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
// when the day is not that of now (Unix seconds); seconds are dropped (an
// estimate is already rounded up to the minute).
func appendClock(b []byte, t time.Time, now int64) []byte {
	t = t.UTC()
	y, m, d := t.Date()
	if ny, nm, nd := time.Unix(now, 0).UTC().Date(); y != ny || m != nm || d != nd {
		b = strconv.AppendInt(b, int64(d), 10)
		b = append(b, ' ')
		b = append(b, m.String()[:3]...)
		b = append(b, ' ')
	}
	h, mi, _ := t.Clock()
	b = append(b, byte('0'+h/10), byte('0'+h%10), ':', byte('0'+mi/10), byte('0'+mi%10))
	return append(b, " UTC"...)
}
