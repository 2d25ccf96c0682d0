package waste

import (
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

// tracker applies the rules to one subject's steps, in time order. Each
// rule has a file of its own (idle.go, stalled.go, overallocated.go,
// lowefficiency.go, tooold.go, outside.go); the window rules' sliding
// window is in window.go.
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

// heldSums are what a container did on the GPUs it held in a step: the
// allocated, used and memory sums, its highest SM utilisation of one of
// them and its CPU use (cores).
type heldSums struct{ alloc, used, mem, smMax, cpu float64 }

// addContainer applies the container rules to a step.
func (t *tracker) addContainer(s *step) {
	var held []int
	var h heldSums
	var heldBuf [8]int
	held = heldBuf[:0]
	for i := range s.gpu {
		g := &s.gpu[i]
		if g.alloc <= 0 {
			continue
		}
		held = append(held, i)
		h.alloc += g.alloc
		h.used += g.used
		h.mem += g.mem
		h.smMax = max(h.smMax, g.used/s.seconds*100)
	}
	h.cpu = s.cpu / s.seconds

	t.win.push(s, held, t.rules)

	idle := t.idleStep(s, held, &h)
	t.stalledStep(s, held, &h, idle)
	t.overAllocated(s)
	if t.idle.fired || t.stalled.fired || t.over.fired {
		t.win.explain(s.start)
	}
	t.lowEfficiency(s)
	t.tooOld(s, held, h.alloc)
}

// stepRun books a step of an idle or stalled run, which lasts while cond
// holds in every step.
func (t *tracker) stepRun(r *run, rule string, cond bool, window, grace time.Duration, s *step, held []int, h *heldSums) {
	if !cond {
		stop(r)
		return
	}
	begin(r, s.start, held, false)
	r.seconds += s.seconds
	r.used += h.used
	r.held += s.seconds * float64(len(held))
	r.smMax = max(r.smMax, h.smMax)
	r.cpu += s.cpu
	r.cpuMax = max(r.cpuMax, h.cpu)
	r.mem += h.mem
	if t.book(r, rule, s, (window + grace).Seconds(), h.alloc, t.costOf(s, held)) {
		t.win.explain(r.start)
	}
	if r.fired {
		r.f.evidence = runEvidence(r, window)
	}
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
