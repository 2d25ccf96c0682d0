package waste

import "github.com/gpumeter/gpumeter/internal/config"

// lowEfficiency applies the low_efficiency rule to a container's step:
// over the last window it ran all the time, held enough GPU-hours and
// used too few of those it held, in steps no idle, stalled or
// over-allocated finding explains.
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
		counted := nanos(t.lastUntil(config.RuleLowEfficiency, held))
		var wasted, cost float64
		for i := w.lHead; i < len(w.steps); i++ {
			if w.steps[i].end > counted {
				a, c := waste(i)
				wasted += a
				cost += c
			}
		}
		t.book(r, config.RuleLowEfficiency, s, rule.Grace.Seconds(), wasted, cost)
	} else {
		r.seconds += s.seconds
		wasted, cost := waste(len(w.steps) - 1)
		t.book(r, config.RuleLowEfficiency, s, rule.Grace.Seconds(), wasted, cost)
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
