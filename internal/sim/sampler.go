package sim

import (
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// SamplerConfig returns cfg with s in the three places a sampler reads a
// scenario from: as its GPU source, named "sim" in health metrics, and
// ahead of cfg's own as its first inventory, "sim-containers", and first
// process resolver.
func (s *Source) SamplerConfig(cfg sampler.Config) sampler.Config {
	cfg.GPUs, cfg.GPUName = s, "sim"
	cfg.Inventories = append([]sampler.Named{{Name: "sim-containers", Inventory: s}}, cfg.Inventories...)
	cfg.Resolvers = append([]sampler.ProcessResolver{s}, cfg.Resolvers...)
	return cfg
}

// NewSampler returns a sampler that plays sc once, on the clock its Step
// is given: a Source of sc wired in by SamplerConfig, under sc's node
// unless cfg names one, metered with sc's idle power unless cfg brings a
// meter. The rest of cfg (OnTick, Interval, Logger, inventories and
// resolvers of its own) is kept.
func NewSampler(sc *Scenario, cfg sampler.Config) *sampler.Sampler {
	if cfg.Node == "" {
		cfg.Node = sc.Node
	}
	if cfg.Meter == nil {
		cfg.Meter = meter.New(meter.Config{IdleWatts: sc.IdleWatts()})
	}
	return sampler.New(NewSource(sc, false).SamplerConfig(cfg))
}
