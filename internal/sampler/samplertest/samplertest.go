// Package samplertest builds the sampler that tests and benchmarks play a
// scenario with, so that the simulator, a source, builds none itself.
package samplertest

import (
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// Scenario returns a sampler that plays sc once, on the clock its Step is
// given: a source of sc wired in by sampler.WithSimulated, under sc's node
// unless cfg names one, metered with sc's idle power unless cfg brings a
// meter. The rest of cfg (OnTick, Interval, Logger, inventories and
// resolvers of its own) is kept.
func Scenario(sc *sim.Scenario, cfg sampler.Config) *sampler.Sampler {
	if cfg.Node == "" {
		cfg.Node = sc.Node
	}
	if cfg.Meter == nil {
		cfg.Meter = meter.New(meter.Config{IdleWatts: sc.IdleWatts()})
	}
	return sampler.New(sampler.WithSimulated(cfg, sim.NewSource(sc, false)))
}
