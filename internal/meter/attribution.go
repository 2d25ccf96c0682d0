// Attribution on one GPU: the owners at a sample (the containers that hold
// it and whoever has a process on it, SM use scaled so that the owners never
// exceed the device) and the booking of the interval to the next sample:
// time, SM use, memory and energy. The energy up to the idle power goes to
// the holders by share, the rest by SM use (or memory when no SM use
// shows); what no owner is booked stays in the idle pool.

package meter

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
)

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

func (m *Meter) usageRows(now time.Time, out []Usage) []Usage {
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
	if out == nil {
		out = make([]Usage, 0, len(m.order)) // never nil, as before Recycle
	}
	out = slices.Grow(out[:0], len(m.order))
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
