package waste

import "github.com/gpumeter/gpumeter/internal/config"

// overAllocated applies the over_allocated rule to a container's step:
// over the last window it held two GPUs or more, used at least one and
// left at least one unused. The run starts where the first such window
// starts, on the unused GPUs.
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
		counted := nanos(t.lastUntil(config.RuleOverAllocated, unused))
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
	if t.book(r, config.RuleOverAllocated, s, rule.Grace.Seconds(), wasted, cost) {
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
