package server

import "github.com/gpumeter/gpumeter/internal/sampler"

// TickBody lets the encoding benchmark, outside the package, drive a
// tickBody as the first request after each tick does.
type TickBody struct{ b tickBody }

// Fresh forgets the body kept for the last tick and builds t's.
func (tb *TickBody) Fresh(t *sampler.Tick, build func() any) []byte {
	tb.b.tick = nil
	return tb.b.get(t, build)
}
