package waste

import (
	"math"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
)

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
