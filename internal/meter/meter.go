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
	"cmp"
	"fmt"
	"slices"
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

// ContainerSums are a container's CPU and RAM totals.
type ContainerSums struct {
	CPUSeconds     float64
	RAMByteSeconds float64
	Seconds        float64 // the time these sums cover
}

// Add adds d to s.
func (s *ContainerSums) Add(d ContainerSums) {
	s.CPUSeconds += d.CPUSeconds
	s.RAMByteSeconds += d.RAMByteSeconds
	s.Seconds += d.Seconds
}

// Container is one container's share of a tick.
type Container struct {
	container.Container
	Delta ContainerSums
	Total ContainerSums
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
}

type rowKey struct {
	owner container.Owner
	uuid  string
}

// row is one owner on one GPU. It carries this step's delta and current
// state itself, stamped with the step, so a tick needs no map per row.
type row struct {
	id         uint64
	key        rowKey
	gpu        *gpuState
	total      Sums
	lastActive time.Time
	deleted    bool

	delta     Sums
	deltaStep uint64
	cur       ownerState
	curStep   uint64
	obsStep   uint64 // the step whose observe placed the row at obsIdx
	obsIdx    int
}

type ctrState struct {
	primed     bool // seen holds a good reading
	seen       time.Time
	cpu        float64
	ram        uint64
	total      ContainerSums
	lastActive time.Time
	activeStep uint64 // the Step that set lastActive
}

// ownerState is one owner's state on one GPU at a sample.
type ownerState struct {
	owner container.Owner
	row   *row
	share float64
	sm    float64
	mem   uint64
	procs int
}

// pending is a GPU's state at its last good sample, waiting for the next
// one to close its interval.
type pending struct {
	t         time.Time
	energyMJ  uint64
	hasEnergy bool
	power     float64
	util      float64
	owners    []ownerState
	holders   int
}

type gpuState struct {
	index    int
	total    GPUSums
	prev     pending
	primed   bool
	minPower float64
	spare    []ownerState // the next sample's owners, reusing old storage
	// the rows of the last sample's holders and processes, by position
	holderRows, procRows []*row
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

	t.Usage = m.usageRows(in.Time)
	t.Containers = m.containerRows(in.Time, in.Containers)
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

func (m *Meter) idleWatts(d *gpu.Device, gs *gpuState) float64 {
	if w, ok := m.cfg.IdleWatts[d.UUID]; ok && d.UUID != "" {
		return w
	}
	if w, ok := m.cfg.IdleWatts[d.Model]; ok && d.Model != "" {
		return w
	}
	return gs.minPower
}

// observe gathers a device's owners at this sample: the holders with their
// allocation share and everyone with a process, SM utilisation scaled so
// that the owners never exceed the device. The owners are appended to buf.
// d is the sample's device at position pos.
func (m *Meter) observe(d *gpu.Device, pos int, key string, gs *gpuState, owners []container.Owner, ctrs []container.Container, now time.Time, buf []ownerState) pending {
	p := pending{
		t:         now,
		energyMJ:  d.EnergyMilliJoules,
		hasEnergy: d.Has(gpu.FieldEnergy),
		power:     d.PowerWatts,
		util:      d.Util,
		owners:    buf,
	}
	// cache[i] is the row that the i-th holder or process had at the last
	// sample: in a steady state it is the same owner, and reusing it
	// spares hashing two long strings per owner per GPU per tick.
	lookup := func(cache *[]*row, i int, o container.Owner) *row {
		if i < len(*cache) {
			if r := (*cache)[i]; r != nil && !r.deleted && r.key.owner == o {
				return r
			}
		} else {
			*cache = append(*cache, make([]*row, i+1-len(*cache))...)
		}
		r := m.row(rowKey{o, key}, gs)
		(*cache)[i] = r
		return r
	}
	index := func(r *row) *ownerState {
		if r.obsStep == m.step {
			return &p.owners[r.obsIdx]
		}
		r.obsStep, r.obsIdx = m.step, len(p.owners)
		p.owners = append(p.owners, ownerState{owner: r.key.owner, row: r})
		return &p.owners[len(p.owners)-1]
	}

	for i := range ctrs {
		c := &ctrs[i]
		if c.Running && m.held.holds(i, pos) {
			index(lookup(&gs.holderRows, p.holders, container.Owner{Kind: container.OwnerContainer, ID: c.ID}))
			p.holders++
		}
	}
	for i := range p.owners {
		p.owners[i].share = 1 / float64(p.holders)
	}

	var smSum float64
	for j := range d.Processes {
		pr := &d.Processes[j]
		var o container.Owner
		if j < len(owners) {
			o = owners[j]
		}
		s := index(lookup(&gs.procRows, j, o))
		s.procs++
		s.mem += pr.MemoryUsed
		sm := min(max(pr.SMUtil, 0), 100)
		s.sm += sm
		smSum += sm
	}
	if !d.Has(gpu.FieldUtil) {
		p.util = min(100, smSum)
	}
	p.util = min(max(p.util, 0), 100)
	if smSum > p.util && smSum > 0 {
		f := p.util / smSum
		for i := range p.owners {
			p.owners[i].sm *= f
		}
	}
	return p
}

// book closes the interval from gs.prev to now and returns the GPU's part;
// the owners' parts are added to their rows' deltas.
func (m *Meter) book(gs *gpuState, now time.Time, d *gpu.Device, idleW float64) GPUSums {
	p := &gs.prev
	dt := now.Sub(p.t).Seconds()
	if dt <= 0 {
		return GPUSums{}
	}
	var g GPUSums
	g.Seconds = dt
	var energy float64
	switch {
	case p.hasEnergy && d.Has(gpu.FieldEnergy) && d.EnergyMilliJoules >= p.energyMJ:
		energy = float64(d.EnergyMilliJoules-p.energyMJ) / 1000
	case p.hasEnergy && d.Has(gpu.FieldEnergy):
		// The counter went backwards: the driver reloaded and counts
		// from zero again.
		energy = float64(d.EnergyMilliJoules) / 1000
		g.EnergyResets = 1
	default:
		energy = p.power * dt
	}
	g.EnergyJoules = energy
	idleE := min(energy, max(idleW, 0)*dt)
	activeE := energy - idleE

	var smSum float64
	var memSum uint64
	for _, o := range p.owners {
		smSum += o.sm
		memSum += o.mem
	}
	if p.holders > 0 {
		g.AllocatedSeconds = dt
	} else {
		g.IdleSeconds = dt
	}
	g.UsedSeconds = dt * p.util / 100
	g.UnattributedSeconds = dt * max(0, p.util-smSum) / 100

	booked := 0.0
	for _, o := range p.owners {
		var s Sums
		s.AllocatedSeconds = o.share * dt
		if o.share > 0 {
			// Only holders have a share; each holds the whole interval.
			s.HeldSeconds = dt
		}
		if o.procs > 0 {
			s.PresentSeconds = dt
		}
		s.UsedSeconds = dt * o.sm / 100
		s.MemoryByteSeconds = dt * float64(o.mem)
		s.PeakMemoryBytes = o.mem
		s.EnergyJoules = idleE * o.share
		switch {
		case smSum > 0:
			s.EnergyJoules += activeE * o.sm / max(p.util, smSum)
		case memSum > 0:
			s.EnergyJoules += activeE * float64(o.mem) / float64(memSum)
		}
		booked += s.EnergyJoules
		r := o.row
		if r.deleted {
			// Dropped by retention while its interval was open.
			r = m.row(r.key, gs)
		}
		if r.deltaStep != m.step {
			r.delta, r.deltaStep = Sums{}, m.step
		}
		r.delta.Add(s)
	}
	g.IdleEnergyJoules = energy - booked
	return g
}

func (m *Meter) usageRows(now time.Time) []Usage {
	if m.orderDirty {
		// Rows come and go far less often than ticks, so the sort runs
		// only when the set of rows changed.
		slices.SortFunc(m.order, func(a, b *row) int {
			return cmp.Or(
				cmp.Compare(a.key.owner.Kind, b.key.owner.Kind),
				cmp.Compare(a.key.owner.ID, b.key.owner.ID),
				cmp.Compare(a.gpu.index, b.gpu.index),
				cmp.Compare(a.key.uuid, b.key.uuid),
			)
		})
		m.orderDirty = false
	}
	out := make([]Usage, 0, len(m.order))
	kept := m.order[:0]
	for _, r := range m.order {
		// A row booked now stays in this tick even when the interval it
		// closes was longer than Retain, or its booking would be lost.
		booked := r.deltaStep == m.step
		if !booked && now.Sub(r.lastActive) > m.cfg.Retain {
			delete(m.rows, r.key)
			r.deleted = true
			continue
		}
		kept = append(kept, r)
		// Filled in place: a Usage is large, and copying one holds
		// pointers, which costs write barriers while the GC runs.
		out = append(out, Usage{Row: r.id, Owner: r.key.owner, UUID: uuidOf(r.key.uuid), GPU: r.gpu.index})
		u := &out[len(out)-1]
		if booked {
			r.total.Add(r.delta)
			u.Delta = r.delta
		}
		u.Total = r.total
		if r.curStep == m.step {
			c := &r.cur
			u.Share, u.SMUtil, u.MemoryBytes, u.Processes = c.share, c.sm, c.mem, c.procs
		}
	}
	clear(m.order[len(kept):])
	m.order = kept
	return out
}

func uuidOf(key string) string {
	if len(key) > 6 && key[:6] == "index:" {
		return ""
	}
	return key
}

func (m *Meter) row(k rowKey, gs *gpuState) *row {
	r := m.rows[k]
	if r == nil {
		m.lastRow++
		r = &row{id: m.lastRow, key: k, gpu: gs}
		m.rows[k] = r
		m.order = append(m.order, r)
		m.orderDirty = true
	}
	return r
}

// containerRows books CPU time and RAM over the interval since each
// container's previous sample. A CPU counter that goes backwards (the
// container restarted in a new cgroup) counts from zero. A running
// container whose stats could not be read books nothing: its interval is
// closed by the next good reading, as a GPU's is.
func (m *Meter) containerRows(now time.Time, ctrs []container.Container) []Container {
	out := make([]Container, 0, len(ctrs))
	active := 0
	for i := range ctrs {
		c := &ctrs[i]
		st := m.containers[c.ID]
		var d ContainerSums
		if st == nil {
			st = &ctrState{}
			m.containers[c.ID] = st
		}
		if st.activeStep != m.step {
			st.activeStep = m.step
			active++
		}
		st.lastActive = now
		if c.StatsErr == "" || !c.Running {
			if dt := now.Sub(st.seen).Seconds(); st.primed && dt > 0 {
				if c.CPUSeconds >= st.cpu {
					d.CPUSeconds = c.CPUSeconds - st.cpu
				} else {
					d.CPUSeconds = c.CPUSeconds
				}
				d.RAMByteSeconds = float64(st.ram) * dt
				d.Seconds = dt
			}
			st.primed, st.seen, st.cpu, st.ram = true, now, c.CPUSeconds, c.MemoryBytes
			if !c.Running {
				st.ram = 0
			}
		}
		st.total.Add(d)
		out = append(out, Container{Container: *c, Delta: d, Total: st.total})
	}
	// When every container known is listed now, none can have expired.
	if active < len(m.containers) {
		for id, st := range m.containers {
			if now.Sub(st.lastActive) > m.cfg.Retain {
				delete(m.containers, id)
			}
		}
	}
	// Inventories often list in a stable order already.
	if !sortedByName(out) {
		slices.SortFunc(out, func(a, b Container) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID)) })
	}
	return out
}

// sortedByName reports whether cs is in the order containerRows gives,
// without copying a Container per comparison.
func sortedByName(cs []Container) bool {
	for i := 1; i < len(cs); i++ {
		a, b := &cs[i-1], &cs[i]
		if a.Name > b.Name || (a.Name == b.Name && a.ID > b.ID) {
			return false
		}
	}
	return true
}
