package sampler

// Recycle hands back t, which nobody reads any more, so that later steps
// reuse its rows instead of allocating them (see meter.Meter.Recycle).
// Only a caller that owns every reader of t may call it: simulate, whose
// recorder is the only reader; serve never does. The latest tick is
// never recycled, as Latest still returns it and a step whose GPU source
// reads nothing publishes its figures again. Recycle may be called from
// any goroutine, while Step runs.
func (s *Sampler) Recycle(t *Tick) {
	if t == nil || t.Tick == nil {
		return
	}
	// A tick that is not the latest now can never be published again:
	// a step only republishes the latest.
	if l := s.latest.Load(); l == nil || l.Tick == t.Tick {
		return
	}
	s.cfg.Meter.Recycle(t.Tick)
}
