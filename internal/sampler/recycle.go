package sampler

import "github.com/gpumeter/gpumeter/internal/container"

// spareTicks is how many recycled ticks' Owners a sampler keeps for
// reuse, as many as the meter keeps of their rows.
const spareTicks = 64

// Recycle hands back t, which nobody reads any more, so that later steps
// reuse its Owners and rows instead of allocating them (see
// meter.Meter.Recycle). Only a caller that owns every reader of t may
// call it: simulate, whose recorder is the only reader; serve never does.
// The latest tick is never recycled, as Latest still returns it and a
// step whose GPU source reads nothing publishes its figures again.
// Recycle may be called from any goroutine, while Step runs; it never
// blocks.
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
	if t.Owners != nil {
		select {
		case s.spares <- t.Owners:
		default:
		}
		t.Owners = nil
	}
}

// spareOwners returns a recycled tick's Owners resized to n GPUs, the
// inner slices kept for grow, or a new one.
func (s *Sampler) spareOwners(n int) [][]container.Owner {
	select {
	case o := <-s.spares:
		if cap(o) >= n {
			return o[:n]
		}
	default:
	}
	return make([][]container.Owner, n)
}

// grow returns o resized to n owners, reusing its array when it is large
// enough; every element is overwritten by the caller.
func grow(o []container.Owner, n int) []container.Owner {
	if cap(o) >= n && o != nil {
		return o[:n]
	}
	return make([]container.Owner, n)
}
