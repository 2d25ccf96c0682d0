package waste

import "github.com/gpumeter/gpumeter/internal/config"

// slot0 is the GPU set of host and device subjects, which have one GPU.
var slot0 = []int{0}

// addHost applies the outside rule to a step of a host user's (or an
// unresolved) processes on one GPU: they were present on it.
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
	t.book(r, config.RuleOutside, s, (rule.Window + rule.Grace).Seconds(), g.present, g.present/3600*t.subj.prices[0])
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

// addDevice applies the outside rule to a step of one GPU's device
// memory: more of it was used than its processes account for.
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
	t.book(r, config.RuleOutside, s, (rule.Window + rule.Grace).Seconds(), 0, 0)
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
