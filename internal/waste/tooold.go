package waste

import "github.com/gpumeter/gpumeter/internal/config"

// tooOld applies the too_old rule to a container's step: the run starts
// MaxAge after the container started and wastes the allocated time after
// that, held holding its GPUs and alloc their allocated seconds.
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
	t.book(r, config.RuleTooOld, s, rule.Grace.Seconds(), alloc*frac, t.costOf(s, held)*frac)
	if r.fired {
		r.f.evidence = map[string]float64{
			EvAge:    s.end.Sub(started).Seconds(),
			EvMaxAge: rule.MaxAge.Seconds(),
		}
	}
}
