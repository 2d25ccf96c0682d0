package waste

import (
	"math"
	"slices"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
)

// eps absorbs float noise in sums of seconds compared with a window.
const eps = 1e-6

// subject is whoever a tracker follows: a container, a host user's (or an
// unresolved) processes on one GPU, or one GPU's unaccounted memory.
type subject struct {
	kind      subjectKind
	node      string
	ownerKind string // OwnerContainer, OwnerHost or OwnerNone
	id        string // container ID or user name; "" otherwise
	name      string
	image     string
	owner     string
	team      string
	project   string
	started   time.Time // containers: when it started; zero when unknown
	gpus      []GPURef  // by slot
	prices    []float64 // cost of one GPU-hour, by slot
}

type subjectKind uint8

const (
	kindContainer subjectKind = iota
	kindHost
	kindDevice
)

// slot returns the slot of the GPU with uuid (or index, when the GPU has
// no UUID), adding it when new.
func (s *subject) slot(g GPURef, price float64) int {
	for i, h := range s.gpus {
		if h.UUID == g.UUID && (g.UUID != "" || h.Index == g.Index) {
			return i
		}
	}
	s.gpus = append(s.gpus, g)
	s.prices = append(s.prices, price)
	return len(s.gpus) - 1
}

// gpuSums are what a subject booked on one GPU in a step, in seconds and
// byte-seconds. held is the held GPU-seconds, heldUsed the used seconds
// of the part of the step that has held seconds: ledger rows written
// before gpumeter kept them have none.
type gpuSums struct{ alloc, present, used, mem, held, heldUsed float64 }

// step is what a subject did in one step of time.
type step struct {
	start, end time.Time
	// seconds is how long the subject ran in the step: a container's
	// running time, a host user's time with a process on the GPU, a GPU's
	// metered time.
	seconds float64
	cpu     float64   // CPU seconds (containers)
	gpu     []gpuSums // by slot; shorter when the last slots were not booked
	// unaccounted is device memory no process accounts for, in
	// byte-seconds, and unaccMax its highest value in bytes (devices).
	unaccounted, unaccMax float64
}

func (s *step) reset() {
	g := s.gpu[:0]
	*s = step{gpu: g}
}

// at returns the sums of slot i, growing the step to hold it.
func (s *step) at(i int) *gpuSums {
	for len(s.gpu) <= i {
		s.gpu = append(s.gpu, gpuSums{})
	}
	return &s.gpu[i]
}

// finding is a reported finding as a tracker keeps it.
type finding struct {
	rule                    string
	gpus                    []int // slots
	since, firstSeen, until time.Time
	active                  bool
	wasted, cost            float64 // GPU-seconds and currency
	evidence                map[string]float64
	counted                 float64 // GPU-seconds already in the metrics' counter
}

// run is an unbroken sequence of steps in which a rule's condition holds.
type run struct {
	on, fired bool
	start     time.Time
	// seconds is how long the run has lasted; for the window rules, since
	// the condition first held.
	seconds      float64
	wasted, cost float64 // not yet in f
	gpus         []int
	f            *finding
	// sums for the evidence
	used, held, smMax, cpu, cpuMax, mem float64
}

// tracker applies the rules to one subject's steps, in time order.
type tracker struct {
	rules    *config.WasteRules
	subj     *subject
	findings []*finding

	idle, stalled, over, low, old, outside run
	win                                    window
}

func newTracker(rules *config.WasteRules, subj *subject) *tracker {
	return &tracker{rules: rules, subj: subj}
}

// find returns the finding of rule on gpus, creating it at since.
func (t *tracker) find(rule string, gpus []int, since, now time.Time) *finding {
	for _, f := range t.findings {
		if f.rule == rule && slices.Equal(f.gpus, gpus) {
			return f
		}
	}
	f := &finding{rule: rule, gpus: slices.Clone(gpus), since: since, firstSeen: now}
	t.findings = append(t.findings, f)
	return f
}

// lastUntil is the end of what the finding of rule on gpus has counted,
// zero when there is none.
func (t *tracker) lastUntil(rule string, gpus []int) time.Time {
	for _, f := range t.findings {
		if f.rule == rule && slices.Equal(f.gpus, gpus) {
			return f.until
		}
	}
	return time.Time{}
}

// stop ends a run.
func stop(r *run) {
	if r.fired {
		r.f.active = false
	}
	*r = run{gpus: r.gpus[:0]}
}

// absent ends every run: the subject did not run in a step.
func (t *tracker) absent() {
	for _, r := range []*run{&t.idle, &t.stalled, &t.over, &t.low, &t.old, &t.outside} {
		stop(r)
	}
}

// begin starts a run at start on gpus unless one is on; with sameGPUs, a
// run on other GPUs ends first.
func begin(r *run, start time.Time, gpus []int, sameGPUs bool) bool {
	if r.on && (!sameGPUs || slices.Equal(r.gpus, gpus)) {
		return false
	}
	stop(r)
	r.on, r.start = true, start
	r.gpus = append(r.gpus[:0], gpus...)
	return true
}

// book adds what a step of a run wastes and fires the run once it has
// lasted need; it returns whether the run fired in this step.
func (t *tracker) book(r *run, rule string, s *step, need float64, wasted, cost float64) bool {
	r.wasted += wasted
	r.cost += cost
	fired := false
	if !r.fired && r.seconds >= need-eps {
		r.fired, fired = true, true
		r.f = t.find(rule, r.gpus, r.start, s.end)
	}
	if r.fired {
		f := r.f
		f.wasted += r.wasted
		f.cost += r.cost
		r.wasted, r.cost = 0, 0
		f.until, f.active = s.end, true
	}
	return fired
}

// add applies the rules to the next step.
func (t *tracker) add(s *step) {
	if s.seconds <= 0 {
		t.absent()
		return
	}
	switch t.subj.kind {
	case kindContainer:
		t.addContainer(s)
	case kindHost:
		t.addHost(s)
	case kindDevice:
		t.addDevice(s)
	}
}

func (t *tracker) addContainer(s *step) {
	rules := t.rules
	var held []int
	var alloc, used, mem, smMax float64
	var heldBuf [8]int
	held = heldBuf[:0]
	for i := range s.gpu {
		g := &s.gpu[i]
		if g.alloc <= 0 {
			continue
		}
		held = append(held, i)
		alloc += g.alloc
		used += g.used
		mem += g.mem
		smMax = max(smMax, g.used/s.seconds*100)
	}
	cpu := s.cpu / s.seconds
	idle := rules.Idle.Enabled && len(held) > 0 && smMax < rules.Idle.SMPercent && cpu < rules.Idle.CPUCores
	stalled := rules.Stalled.Enabled && len(held) > 0 && smMax < stalledSM && mem > 0 && !idle

	t.win.push(s, held, rules)

	plain := func(r *run, rule string, cond bool, window, grace time.Duration) {
		if !cond {
			stop(r)
			return
		}
		begin(r, s.start, held, false)
		r.seconds += s.seconds
		r.used += used
		r.held += s.seconds * float64(len(held))
		r.smMax = max(r.smMax, smMax)
		r.cpu += s.cpu
		r.cpuMax = max(r.cpuMax, cpu)
		r.mem += mem
		if t.book(r, rule, s, (window + grace).Seconds(), alloc, t.costOf(s, held)) {
			t.win.explain(r.start)
		}
		if r.fired {
			r.f.evidence = runEvidence(r, window)
			if rule == RuleIdle {
				r.f.evidence[EvThreshold] = rules.Idle.SMPercent
				r.f.evidence[EvThresholdCPU] = rules.Idle.CPUCores
			}
		}
	}
	plain(&t.idle, RuleIdle, idle, rules.Idle.Window, rules.Idle.Grace)
	plain(&t.stalled, RuleStalled, stalled, rules.Stalled.Window, rules.Stalled.Grace)
	t.overAllocated(s)
	if t.idle.fired || t.stalled.fired || t.over.fired {
		t.win.explain(s.start)
	}
	t.lowEfficiency(s)
	t.tooOld(s, held, alloc)
}

// runEvidence is the evidence of an idle or stalled run.
func runEvidence(r *run, window time.Duration) map[string]float64 {
	ev := map[string]float64{
		EvDuration:     round(r.seconds),
		EvWindow:       window.Seconds(),
		EvSMPercentMax: round(r.smMax),
		EvCPUCoresMax:  round(r.cpuMax),
		EvCPUCores:     round(r.cpu / r.seconds),
		EvMemoryBytes:  round(r.mem / r.seconds),
	}
	if r.held > 0 {
		ev[EvSMPercent] = round(r.used / r.held * 100)
	}
	return ev
}

// costOf is the cost of the allocated time of slots in s.
func (t *tracker) costOf(s *step, slots []int) float64 {
	var c float64
	for _, i := range slots {
		if i < len(s.gpu) {
			c += s.gpu[i].alloc / 3600 * t.subj.prices[i]
		}
	}
	return c
}

func (t *tracker) overAllocated(s *step) {
	rule := &t.rules.OverAllocated
	r := &t.over
	w := &t.win
	if !rule.Enabled || w.oSeconds < rule.Window.Seconds()-eps {
		stop(r)
		return
	}
	threshold := t.rules.Idle.SMPercent
	var unusedBuf [8]int
	unused := unusedBuf[:0]
	heldN, usedN := 0, 0
	var uUsed, uHeld, kUsed, kHeld float64
	for i := range w.oHeld {
		if w.oHeld[i] <= eps {
			continue
		}
		heldN++
		if w.oUsed[i]/w.oHeld[i]*100 < threshold {
			unused = append(unused, i)
			uUsed += w.oUsed[i]
			uHeld += w.oHeld[i]
		} else {
			usedN++
			kUsed += w.oUsed[i]
			kHeld += w.oHeld[i]
		}
	}
	if heldN < 2 || len(unused) == 0 || usedN == 0 {
		stop(r)
		return
	}
	var wasted, cost float64
	if begin(r, w.start(w.oHead), unused, true) {
		// The first window counts as wasted what no earlier run of the
		// same finding counted.
		counted := nanos(t.lastUntil(RuleOverAllocated, unused))
		for i := w.oHead; i < len(w.steps); i++ {
			if w.steps[i].end <= counted {
				continue
			}
			gs := w.gpu(i)
			for _, g := range unused {
				if g < len(gs) {
					wasted += gs[g].alloc
					cost += gs[g].alloc / 3600 * t.subj.prices[g]
				}
			}
		}
	} else {
		r.seconds += s.seconds
		for _, g := range unused {
			if g < len(s.gpu) {
				wasted += s.gpu[g].alloc
			}
		}
		cost = t.costOf(s, unused)
	}
	if t.book(r, RuleOverAllocated, s, rule.Grace.Seconds(), wasted, cost) {
		w.explain(r.start)
	}
	if r.fired {
		r.f.evidence = map[string]float64{
			EvGPUsHeld:      float64(heldN),
			EvGPUsUsed:      float64(usedN),
			EvSMPercent:     round(uUsed / uHeld * 100),
			EvSMPercentUsed: round(kUsed / kHeld * 100),
			EvDuration:      s.end.Sub(r.start).Seconds(),
			EvWindow:        rule.Window.Seconds(),
			EvThreshold:     threshold,
		}
	}
}

func (t *tracker) lowEfficiency(s *step) {
	rule := &t.rules.LowEfficiency
	r := &t.low
	w := &t.win
	if !rule.Enabled || w.lSeconds < rule.Window.Seconds()-eps || w.lAlloc < rule.MinGPUHours*3600-eps ||
		w.lHeldGPU <= eps || w.lHeldUsed/w.lHeldGPU >= rule.Threshold {
		stop(r)
		return
	}
	var heldBuf [8]int
	held := heldBuf[:0]
	for i := range w.lHeld {
		if w.lHeld[i] > eps {
			held = append(held, i)
		}
	}
	waste := func(i int) (wasted, cost float64) {
		gs := w.gpu(i)
		for g := range gs {
			if d := gs[g].alloc - gs[g].used; d > 0 {
				wasted += d
				cost += d / 3600 * t.subj.prices[g]
			}
		}
		return wasted, cost
	}
	if begin(r, w.start(w.lHead), held, false) {
		counted := nanos(t.lastUntil(RuleLowEfficiency, held))
		var wasted, cost float64
		for i := w.lHead; i < len(w.steps); i++ {
			if w.steps[i].end > counted {
				a, c := waste(i)
				wasted += a
				cost += c
			}
		}
		t.book(r, RuleLowEfficiency, s, rule.Grace.Seconds(), wasted, cost)
	} else {
		r.seconds += s.seconds
		wasted, cost := waste(len(w.steps) - 1)
		t.book(r, RuleLowEfficiency, s, rule.Grace.Seconds(), wasted, cost)
	}
	if r.fired {
		r.f.evidence = map[string]float64{
			EvEfficiency:     round(w.lHeldUsed / w.lHeldGPU),
			EvAllocatedHours: round(w.lAlloc / 3600),
			EvHeldHours:      round(w.lHeldGPU / 3600),
			EvUsedHours:      round(w.lUsed / 3600),
			EvDuration:       s.end.Sub(r.start).Seconds(),
			EvWindow:         rule.Window.Seconds(),
			EvThreshold:      rule.Threshold,
		}
	}
}

func (t *tracker) tooOld(s *step, held []int, alloc float64) {
	rule := &t.rules.TooOld
	r := &t.old
	started := t.subj.started
	if rule.MaxAge <= 0 || started.IsZero() {
		return
	}
	boundary := started.Add(rule.MaxAge)
	if !s.end.After(boundary) {
		stop(r)
		return
	}
	frac := 1.0
	if s.start.Before(boundary) && s.end.After(s.start) {
		frac = s.end.Sub(boundary).Seconds() / s.end.Sub(s.start).Seconds()
	}
	if begin(r, boundary, held, false) && len(held) == 0 {
		// Not holding a GPU: nothing to waste and no GPU set yet.
		stop(r)
		return
	}
	r.seconds = s.end.Sub(boundary).Seconds()
	t.book(r, RuleTooOld, s, rule.Grace.Seconds(), alloc*frac, t.costOf(s, held)*frac)
	if r.fired {
		r.f.evidence = map[string]float64{
			EvAge:    s.end.Sub(started).Seconds(),
			EvMaxAge: rule.MaxAge.Seconds(),
		}
	}
}

// slot0 is the GPU set of host and device subjects, which have one GPU.
var slot0 = []int{0}

func (t *tracker) addHost(s *step) {
	rule := &t.rules.Outside
	r := &t.outside
	if !rule.Enabled || len(s.gpu) == 0 || s.gpu[0].present <= 0 {
		stop(r)
		return
	}
	g := &s.gpu[0]
	begin(r, s.start, slot0, false)
	r.seconds += s.seconds
	r.used += g.used
	r.mem += g.mem
	r.held += g.present
	r.smMax = max(r.smMax, g.used/g.present*100)
	t.book(r, RuleOutside, s, (rule.Window + rule.Grace).Seconds(), g.present, g.present/3600*t.subj.prices[0])
	if r.fired {
		r.f.evidence = map[string]float64{
			EvPresentHours: round(r.held / 3600),
			EvSMPercent:    round(r.used / r.held * 100),
			EvSMPercentMax: round(r.smMax),
			EvMemoryBytes:  round(r.mem / r.held),
			EvDuration:     round(r.seconds),
			EvWindow:       rule.Window.Seconds(),
		}
	}
}

func (t *tracker) addDevice(s *step) {
	rule := &t.rules.Outside
	r := &t.outside
	threshold := float64(rule.UnaccountedMemory)
	if !rule.Enabled || s.unaccounted/s.seconds <= threshold {
		stop(r)
		return
	}
	begin(r, s.start, slot0, false)
	r.seconds += s.seconds
	r.mem += s.unaccounted
	r.smMax = max(r.smMax, s.unaccMax)
	t.book(r, RuleOutside, s, (rule.Window + rule.Grace).Seconds(), 0, 0)
	if r.fired {
		r.f.evidence = map[string]float64{
			EvUnaccounted:     round(r.mem / r.seconds),
			EvUnaccountedMax:  round(r.smMax),
			EvThresholdMemory: threshold,
			EvDuration:        round(r.seconds),
			EvWindow:          rule.Window.Seconds(),
		}
	}
}

// winStep is a step as the window rules keep it. It holds no pointer, so
// that the garbage collector need not scan hours of steps per container.
type winStep struct {
	start, end int64 // Unix nanoseconds
	seconds    float64
	off, n     int  // its GPU sums are window.sums[off : off+n]
	explained  bool // part of an idle, stalled or over-allocated finding
}

// window keeps the steps of the last over-allocated and low-efficiency
// windows with their sums: steps[oHead:] are in the first, steps[lHead:]
// in the second.
type window struct {
	steps        []winStep
	sums         []gpuSums
	oHead, lHead int
	// over-allocated, by slot: used and allocated GPU-seconds, and
	// seconds held; oSeconds is the running time in the window.
	oUsed, oAlloc, oHeld []float64
	oSeconds             float64
	// low efficiency, over the steps not explained: used and allocated
	// GPU-seconds, seconds held by slot, and running time; held
	// GPU-seconds and the used GPU-seconds that have them (efficiency is
	// lHeldUsed / lHeldGPU).
	lUsed, lAlloc, lSeconds float64
	lHeld                   []float64
	lHeldGPU, lHeldUsed     float64
	oWin, lWin              time.Duration
}

// nanos is t in Unix nanoseconds; the zero time is before every step.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}

// start is when step i starts.
func (w *window) start(i int) time.Time { return time.Unix(0, w.steps[i].start).UTC() }

// gpu returns the GPU sums of step i.
func (w *window) gpu(i int) []gpuSums {
	st := &w.steps[i]
	return w.sums[st.off : st.off+st.n]
}

func grow(s []float64, n int) []float64 {
	for len(s) < n {
		s = append(s, 0)
	}
	return s
}

// push adds a step and drops the steps that left the windows.
func (w *window) push(s *step, held []int, rules *config.WasteRules) {
	if !rules.OverAllocated.Enabled && !rules.LowEfficiency.Enabled {
		return
	}
	w.oWin, w.lWin = rules.OverAllocated.Window, rules.LowEfficiency.Window
	if lo := min(w.oHead, w.lHead); lo > 0 && lo >= len(w.steps)/2 {
		// Drop the steps that left both windows, reusing their room.
		base := w.steps[lo].off
		w.sums = w.sums[:copy(w.sums, w.sums[base:])]
		w.steps = w.steps[:copy(w.steps, w.steps[lo:])]
		for i := range w.steps {
			w.steps[i].off -= base
		}
		w.oHead -= lo
		w.lHead -= lo
	}
	end := s.end.UnixNano()
	w.steps = append(w.steps, winStep{start: s.start.UnixNano(), end: end, seconds: s.seconds, off: len(w.sums), n: len(s.gpu)})
	w.sums = append(w.sums, s.gpu...)
	n := len(s.gpu)
	w.oUsed, w.oAlloc, w.oHeld, w.lHeld = grow(w.oUsed, n), grow(w.oAlloc, n), grow(w.oHeld, n), grow(w.lHeld, n)
	w.oSeconds += s.seconds
	w.lSeconds += s.seconds
	for _, i := range held {
		g := &s.gpu[i]
		w.oUsed[i] += g.used
		w.oAlloc[i] += g.alloc
		w.oHeld[i] += s.seconds
		w.lHeld[i] += s.seconds
		w.lUsed += g.used
		w.lAlloc += g.alloc
		w.lHeldGPU += g.held
		w.lHeldUsed += g.heldUsed
	}
	for oldest := end - int64(w.oWin); w.oHead < len(w.steps) && w.steps[w.oHead].end <= oldest; w.oHead++ {
		old := &w.steps[w.oHead]
		w.oSeconds -= old.seconds
		for i, g := range w.gpu(w.oHead) {
			if g.alloc > 0 {
				w.oUsed[i] -= g.used
				w.oAlloc[i] -= g.alloc
				w.oHeld[i] -= old.seconds
			}
		}
	}
	for oldest := end - int64(w.lWin); w.lHead < len(w.steps) && w.steps[w.lHead].end <= oldest; w.lHead++ {
		w.unlow(w.lHead)
	}
	if w.oHead == len(w.steps) {
		// Empty: clear the noise that adding and taking away leaves.
		w.oSeconds = 0
		clear(w.oUsed)
		clear(w.oAlloc)
		clear(w.oHeld)
	}
	if w.lHead == len(w.steps) {
		w.lSeconds, w.lUsed, w.lAlloc, w.lHeldGPU, w.lHeldUsed = 0, 0, 0, 0, 0
		clear(w.lHeld)
	}
}

// unlow takes step i out of the low-efficiency sums.
func (w *window) unlow(i int) {
	ws := &w.steps[i]
	if ws.explained {
		return
	}
	w.lSeconds -= ws.seconds
	for j, g := range w.gpu(i) {
		if g.alloc > 0 {
			w.lUsed -= g.used
			w.lAlloc -= g.alloc
			w.lHeldGPU -= g.held
			w.lHeldUsed -= g.heldUsed
			w.lHeld[j] -= ws.seconds
		}
	}
}

// explain marks the steps from since on as part of a finding that
// explains their waste, taking them out of the low-efficiency sums.
func (w *window) explain(since time.Time) {
	from := nanos(since)
	for i := len(w.steps) - 1; i >= 0 && w.steps[i].start >= from; i-- {
		if w.steps[i].explained {
			continue
		}
		if i >= w.lHead {
			w.unlow(i)
		}
		w.steps[i].explained = true
	}
}
