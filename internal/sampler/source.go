package sampler

import (
	"context"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
)

// GPUSource reads every GPU of the node. A source returns an error only when
// it could read nothing at all; one failing device is reported in its
// Device.Err and the rest of the sample stands.
type GPUSource interface {
	Read(ctx context.Context, now time.Time) (gpu.Sample, error)
}

// Inventory lists the node's containers with their current CPU and memory
// counters. When it cannot reach its backend it returns what it last knew
// together with an error, and the sampler keeps going.
type Inventory interface {
	Containers(ctx context.Context, now time.Time) ([]container.Container, error)
}

// ProcessResolver says who owns a GPU process. ok is false when the
// resolver does not know the PID, so that the next resolver in a chain can
// try; err is set when it should know but could not find out.
type ProcessResolver interface {
	Resolve(pid uint32) (owner container.Owner, ok bool, err error)
}

// Simulated is a source that plays GPUs, their containers and their
// processes together, as a scenario does: internal/sim's Source is one.
type Simulated interface {
	GPUSource
	Inventory
	ProcessResolver
}

// WithSimulated returns cfg with s in the three places a sampler reads a
// scenario from: as its GPU source, named "sim" in health metrics, and
// ahead of cfg's own as its first inventory, "sim-containers", and first
// process resolver.
func WithSimulated(cfg Config, s Simulated) Config {
	cfg.GPUs, cfg.GPUName = s, "sim"
	cfg.Inventories = append([]Named{{Name: "sim-containers", Inventory: s}}, cfg.Inventories...)
	cfg.Resolvers = append([]ProcessResolver{s}, cfg.Resolvers...)
	return cfg
}
