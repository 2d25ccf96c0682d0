package queue

import (
	"container/heap"
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

// event is a release in the estimate's simulation.
type event struct {
	at  time.Time
	id  string
	pos int    // memory: the GPU
	n   int    // whole GPUs freed
	mem uint64 // memory freed on pos
	seq int
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if c := e[i].at.Compare(e[j].at); c != 0 {
		return c < 0
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// estimate is one pending job's estimated start: zero when unknown.
type estimate struct {
	at time.Time
	by string
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
	var h events
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
			h = append(h, event{at: rel.at, id: rel.id, n: n, seq: seq})
			seq++
		}
	}
	heap.Init(&h)
	out := make([]estimate, len(jobs))
	t, by := now, ""
	for k, pj := range jobs {
		for freeN < pj.job.GPUs && h.Len() > 0 {
			e := heap.Pop(&h).(event)
			freeN += e.n
			t, by = maxTime(t, e.at), e.id
		}
		if freeN < pj.job.GPUs {
			break
		}
		out[k] = estimate{t, by}
		freeN -= pj.job.GPUs
		if pj.job.TimeLimit > 0 {
			heap.Push(&h, event{at: t.Add(pj.job.TimeLimit), id: pj.job.ID, n: pj.job.GPUs, seq: seq})
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
	var h events
	for k, rel := range rels {
		if rel.mem > 0 {
			h = append(h, event{at: rel.at, id: rel.id, pos: rel.gpus[0], mem: rel.mem, seq: k})
		}
	}
	heap.Init(&h)
	seq := len(rels)
	out := make([]estimate, len(jobs))
	t, by := now, ""
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
		for p < 0 && h.Len() > 0 {
			e := heap.Pop(&h).(event)
			declared[e.pos] -= min(declared[e.pos], e.mem)
			t, by = maxTime(t, e.at), e.id
			p = fit(m)
		}
		if p < 0 {
			break
		}
		out[k] = estimate{t, by}
		declared[p] += m
		if pj.job.TimeLimit > 0 {
			heap.Push(&h, event{at: t.Add(pj.job.TimeLimit), id: pj.job.ID, pos: p, mem: m, seq: seq})
			seq++
		}
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// estimateText appends to a pending job's sentence what is ahead of it
// and when it can start: "3 jobs ahead of you; next GPUs free by
// j-000117's time limit at 14:20 UTC". clock formats times, kept per pass.
func estimateText(text string, ahead int, e estimate, what string, clock *clockText) string {
	var b strings.Builder
	b.Grow(len(text) + 120)
	b.WriteString(text)
	b.WriteString("; ")
	switch ahead {
	case 0:
		b.WriteString("no job ahead of you")
	case 1:
		b.WriteString("1 job ahead of you")
	default:
		b.WriteString(strconv.Itoa(ahead))
		b.WriteString(" jobs ahead of you")
	}
	switch {
	case e.at.IsZero():
		b.WriteString("; no start estimate: what it needs is held with no time limit (by a job or outside the queue)")
	case e.by == "":
		b.WriteString("; it can start by ")
		b.WriteString(clock.at(e.at))
	default:
		b.WriteString("; next ")
		b.WriteString(what)
		b.WriteString(" free by ")
		b.WriteString(e.by)
		b.WriteString("'s time limit at ")
		b.WriteString(clock.at(e.at))
	}
	return b.String()
}

// clockText formats times as "14:20 UTC", rounded up to the minute, with
// the date ("2 Dec 14:20 UTC") when the day is not now's; it keeps what it
// formatted.
type clockText struct {
	now  time.Time
	seen map[int64]string
}

func (c *clockText) at(t time.Time) string {
	t = t.UTC()
	if r := t.Truncate(time.Minute); r.Before(t) {
		t = r.Add(time.Minute) // an upper bound stays one when rounded
	}
	k := t.Unix() / 60
	if s, ok := c.seen[k]; ok {
		return s
	}
	layout := "15:04 UTC"
	if y, m, d := t.Date(); y != c.now.UTC().Year() || m != c.now.UTC().Month() || d != c.now.UTC().Day() {
		layout = "2 Jan 15:04 UTC"
	}
	s := t.Format(layout)
	if c.seen == nil {
		c.seen = map[int64]string{}
	}
	c.seen[k] = s
	return s
}
