// Package meter turns samples into usage: who held each GPU, who used it,
// how much memory and energy went to whom, and what was left idle. It is
// pure arithmetic on the values it is handed; it reads no clock and does no
// I/O, so every figure it produces can be computed by hand in a test.
//
// Each sample's state is booked over the interval that follows it, up to
// the next good sample of the same GPU: a container seen running at the
// samples s, s+Δ, …, e−Δ is booked exactly e−s seconds, and the energy of
// an interval is the counter difference across it.
package meter

import (
	"fmt"
	"strconv"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
)

// DefaultRetain is how long a usage row stays in the ticks after its owner
// last held or used the GPU, so that counters do not vanish between two
// processes of the same owner.
const DefaultRetain = 5 * time.Minute

// Config tunes the meter.
type Config struct {
	// IdleWatts gives a GPU's configured idle power by UUID or, failing
	// that, by model name. A GPU in neither uses the lowest power it has
	// shown.
	IdleWatts map[string]float64
	// Retain is how long rows outlive their last activity; 0 means
	// DefaultRetain.
	Retain time.Duration
}

// Input is one sample with every GPU process resolved to its owner.
type Input struct {
	Time   time.Time
	Sample gpu.Sample
	// Owners[i][j] owns Sample.Devices[i].Processes[j]. A missing entry
	// counts as OwnerNone.
	Owners [][]container.Owner
	// Containers are the inventory's containers; the running ones hold
	// the GPUs their request names.
	Containers []container.Container
}

// Sums are usage totals of one owner on one GPU.
type Sums struct {
	AllocatedSeconds float64 // Σ allocation share · Δt
	// HeldSeconds is Δt while the owner was a running container holding
	// the GPU, not split among the holders: the GPU time it had access
	// to, which efficiency (used / held) is measured against. Host
	// processes and OwnerNone hold nothing.
	HeldSeconds       float64
	PresentSeconds    float64 // Δt while the owner had a process on the GPU
	UsedSeconds       float64 // Σ SM share · Δt (SM-weighted GPU-seconds)
	MemoryByteSeconds float64
	EnergyJoules      float64
	PeakMemoryBytes   uint64
}

// Add adds d to s: the sums add up, PeakMemoryBytes takes the larger of
// the two.
func (s *Sums) Add(d Sums) {
	s.AllocatedSeconds += d.AllocatedSeconds
	s.HeldSeconds += d.HeldSeconds
	s.PresentSeconds += d.PresentSeconds
	s.UsedSeconds += d.UsedSeconds
	s.MemoryByteSeconds += d.MemoryByteSeconds
	s.EnergyJoules += d.EnergyJoules
	s.PeakMemoryBytes = max(s.PeakMemoryBytes, d.PeakMemoryBytes)
}

// GPUSums are one GPU's totals, the idle pool among them.
type GPUSums struct {
	Seconds             float64 // metered time
	AllocatedSeconds    float64 // time some running container held the GPU
	IdleSeconds         float64 // time nobody held it: the idle pool
	UsedSeconds         float64 // device utilisation · Δt
	UnattributedSeconds float64 // utilisation no process accounts for · Δt
	EnergyJoules        float64 // counter difference
	IdleEnergyJoules    float64 // energy no owner was booked: the idle pool
	EnergyResets        int     // times the energy counter went backwards
}

// Add adds d to s.
func (s *GPUSums) Add(d GPUSums) {
	s.Seconds += d.Seconds
	s.AllocatedSeconds += d.AllocatedSeconds
	s.IdleSeconds += d.IdleSeconds
	s.UsedSeconds += d.UsedSeconds
	s.UnattributedSeconds += d.UnattributedSeconds
	s.EnergyJoules += d.EnergyJoules
	s.IdleEnergyJoules += d.IdleEnergyJoules
	s.EnergyResets += d.EnergyResets
}

// GPU is one device's share of a tick.
type GPU struct {
	Index int
	UUID  string
	Err   error // the device could not be read this time
	// Holders is how many running containers hold the GPU now.
	Holders int
	// AttributedUtil is the SM utilisation booked to owners now (percent,
	// after scaling down to the device's figure); UnattributedUtil is the
	// rest of the device's utilisation.
	AttributedUtil   float64
	UnattributedUtil float64
	// IdleWatts is the idle power in use for the energy split.
	IdleWatts float64
	Delta     GPUSums // booked by this tick
	Total     GPUSums // since the meter started
}

// Usage is one owner's use of one GPU.
type Usage struct {
	// Row identifies this owner-GPU row across ticks for as long as it
	// lives, so a sink can key on a number instead of the strings; a row
	// dropped by retention and seen again gets a new number.
	Row   uint64
	Owner container.Owner
	GPU   int
	UUID  string
	// Current values at this tick's sample.
	Share       float64 // allocation share, 0..1
	SMUtil      float64 // percent of the device, after scaling
	MemoryBytes uint64
	Processes   int
	Delta       Sums // booked by this tick
	Total       Sums // since the row appeared
}

// Tick is the meter's result for one sample. It is never changed after
// Step returns it, so sinks may hold and read it from any goroutine.
type Tick struct {
	Time       time.Time
	Sample     gpu.Sample
	GPUs       []GPU // aligned with Sample.Devices
	Usage      []Usage
	Containers []Container
}

// Meter keeps the running totals. It is not safe for concurrent use: one
// sampler owns it.
type Meter struct {
	cfg        Config
	gpus       map[string]*gpuState
	rows       map[rowKey]*row
	order      []*row // the rows in output order
	orderDirty bool
	containers map[string]*ctrState
	step       uint64 // counts Steps, to tell this step's row fields
	lastRow    uint64 // the last row id given out
	held       holdings
	// spares are handed-back ticks' slices; a channel, as Recycle may
	// run beside Step.
	spares chan spare
}

// New returns a meter with empty totals.
func New(cfg Config) *Meter {
	if cfg.Retain <= 0 {
		cfg.Retain = DefaultRetain
	}
	return &Meter{
		cfg:        cfg,
		gpus:       map[string]*gpuState{},
		rows:       map[rowKey]*row{},
		containers: map[string]*ctrState{},
		spares:     make(chan spare, spareTicks),
	}
}

// Step books the interval since the previous sample and returns the tick.
func (m *Meter) Step(in Input) *Tick {
	t := &Tick{Time: in.Time, Sample: in.Sample, GPUs: make([]GPU, len(in.Sample.Devices))}
	m.step++
	m.held.update(in.Sample.Devices, in.Containers)

	for i := range in.Sample.Devices {
		d := &in.Sample.Devices[i]
		key := GPUKey(d.UUID, d.Index)
		g := &t.GPUs[i]
		g.Index, g.UUID, g.Err = d.Index, d.UUID, d.Err
		if d.Err == nil && seenKey(in.Sample.Devices[:i], key) {
			// Two devices under one UUID would share one GPU's books: a
			// faulty source, so the second is treated as unreadable.
			g.Err = fmt.Errorf("gpu %d: UUID %s is also another GPU's", d.Index, d.UUID)
			continue
		}
		gs := m.gpus[key]
		if gs == nil {
			gs = &gpuState{index: d.Index}
			m.gpus[key] = gs
		}
		gs.index = d.Index
		if d.Err != nil {
			g.Total = gs.total
			continue
		}
		var owners []container.Owner
		if i < len(in.Owners) {
			owners = in.Owners[i]
		}
		cur := m.observe(d, i, key, gs, owners, in.Containers, in.Time, gs.spare[:0])
		if d.Has(gpu.FieldPower) && (gs.minPower == 0 || d.PowerWatts < gs.minPower) && d.PowerWatts > 0 {
			gs.minPower = d.PowerWatts
		}
		g.IdleWatts = m.idleWatts(d, gs)
		if gs.primed {
			g.Delta = m.book(gs, cur.t, d, g.IdleWatts)
			gs.total.Add(g.Delta)
		}
		gs.spare = gs.prev.owners
		gs.prev, gs.primed = cur, true
		g.Total = gs.total
		g.Holders = cur.holders
		for _, o := range cur.owners {
			g.AttributedUtil += o.sm
			o.row.cur, o.row.curStep, o.row.lastActive = o, m.step, in.Time
		}
		g.UnattributedUtil = max(0, cur.util-g.AttributedUtil)
	}

	sp := m.takeSpare()
	t.Usage = m.usageRows(in.Time, sp.usage)
	t.Containers = m.containerRows(in.Time, in.Containers, sp.containers)
	return t
}

func seenKey(devs []gpu.Device, key string) bool {
	for i := range devs {
		if GPUKey(devs[i].UUID, devs[i].Index) == key {
			return true
		}
	}
	return false
}

// GPUKey names a GPU across samples: its UUID, or its index when the
// source gave none.
func GPUKey(uuid string, index int) string {
	if uuid != "" {
		return uuid
	}
	return "index:" + strconv.Itoa(index)
}
