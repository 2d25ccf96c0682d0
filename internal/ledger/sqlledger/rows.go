// Package sqlledger holds what the SQL ledger backends (ledger/sqlite and
// ledger/postgres) share: the fixed-point rows they store, the rollup of a
// batch into minute and hour rows, the plan that says which rows answer a
// query window, the report queries, the job store (its SQL and its
// compare-and-set on a job's state), and the schema migration rules.
package sqlledger

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Units of the stored integers.
const (
	MicrosPerSecond     = 1e6 // seconds are stored in microseconds
	MillijoulesPerJoule = 1e3 // energy is stored in millijoules
	UtilScale           = 100 // utilisation is stored in hundredths of a percent
)

// maxFixed bounds one converted value so that sums of many rows stay far
// from int64 overflow.
const maxFixed = 1 << 58

// Key is what the rows of a table are keyed on, Start (unix seconds)
// included.
type Key[K any] interface {
	comparable
	at(start int64) K
	start() int64
	compare(K) int
}

// Values are what a row adds up.
type Values[V any] interface {
	Add(V) V
}

// Row is one row to upsert: Val is added to what is stored under Key.
type Row[K, V any] struct {
	Key K
	Val V
}

// UsageKey keys usage rows. The stores map Node, GPU and (Node, Kind,
// Owner) to small integer ids.
type UsageKey struct {
	Start int64
	Node  string
	GPU   string
	Kind  string
	Owner string
}

func (k UsageKey) at(s int64) UsageKey { k.Start = s; return k }
func (k UsageKey) start() int64        { return k.Start }
func (k UsageKey) compare(o UsageKey) int {
	return cmp.Or(cmp.Compare(k.Start, o.Start), cmp.Compare(k.Node, o.Node),
		cmp.Compare(k.GPU, o.GPU), cmp.Compare(k.Kind, o.Kind), cmp.Compare(k.Owner, o.Owner))
}

// UsageValues are ledger.Sums in stored units.
type UsageValues struct {
	AllocatedUS int64
	HeldUS      int64
	PresentUS   int64
	UsedUS      int64
	MemoryByteS int64
	EnergyMJ    int64
	PeakMemory  int64 // maximum
	PeakUtil    int64 // maximum
}

// Add sums v and w, peaks taking the maximum.
func (v UsageValues) Add(w UsageValues) UsageValues {
	return UsageValues{
		AllocatedUS: v.AllocatedUS + w.AllocatedUS,
		HeldUS:      v.HeldUS + w.HeldUS,
		PresentUS:   v.PresentUS + w.PresentUS,
		UsedUS:      v.UsedUS + w.UsedUS,
		MemoryByteS: v.MemoryByteS + w.MemoryByteS,
		EnergyMJ:    v.EnergyMJ + w.EnergyMJ,
		PeakMemory:  max(v.PeakMemory, w.PeakMemory),
		PeakUtil:    max(v.PeakUtil, w.PeakUtil),
	}
}

// Sums converts v back to ledger units.
func (v UsageValues) Sums() ledger.Sums {
	return ledger.Sums{
		AllocatedSeconds:  float64(v.AllocatedUS) / MicrosPerSecond,
		HeldSeconds:       float64(v.HeldUS) / MicrosPerSecond,
		PresentSeconds:    float64(v.PresentUS) / MicrosPerSecond,
		UsedSeconds:       float64(v.UsedUS) / MicrosPerSecond,
		MemoryByteSeconds: float64(v.MemoryByteS),
		EnergyJoules:      float64(v.EnergyMJ) / MillijoulesPerJoule,
		PeakMemoryBytes:   uint64(max(v.PeakMemory, 0)),
		PeakUtil:          float64(v.PeakUtil) / UtilScale,
	}
}

// GPUKey keys per-GPU rows.
type GPUKey struct {
	Start int64
	Node  string
	GPU   string
}

func (k GPUKey) at(s int64) GPUKey { k.Start = s; return k }
func (k GPUKey) start() int64      { return k.Start }
func (k GPUKey) compare(o GPUKey) int {
	return cmp.Or(cmp.Compare(k.Start, o.Start), cmp.Compare(k.Node, o.Node), cmp.Compare(k.GPU, o.GPU))
}

// GPUValues are ledger.GPUSums in stored units.
type GPUValues struct {
	SecondsUS      int64
	AllocatedUS    int64
	IdleUS         int64
	UsedUS         int64
	UnattributedUS int64
	EnergyMJ       int64
	IdleEnergyMJ   int64
	PeakUtil       int64 // maximum
	Gauges         GaugeValues
}

// GaugeValues are ledger.GPUGauges in stored units.
type GaugeValues struct {
	Samples            int64
	UtilSum, UtilMax   int64 // hundredths of a percent
	MemSum, MemMax     int64 // bytes
	PowerSum, PowerMax int64 // milliwatts
	TempSum, TempMax   int64 // hundredths of a degree Celsius
}

// Stored units of the gauges beyond UtilScale.
const (
	MilliwattsPerWatt = 1000
	TempScale         = 100 // temperature is stored in hundredths of a degree
)

// Add sums v and w, the maxima taking the larger.
func (v GaugeValues) Add(w GaugeValues) GaugeValues {
	return GaugeValues{
		Samples: v.Samples + w.Samples,
		UtilSum: v.UtilSum + w.UtilSum, UtilMax: max(v.UtilMax, w.UtilMax),
		MemSum: v.MemSum + w.MemSum, MemMax: max(v.MemMax, w.MemMax),
		PowerSum: v.PowerSum + w.PowerSum, PowerMax: max(v.PowerMax, w.PowerMax),
		TempSum: v.TempSum + w.TempSum, TempMax: max(v.TempMax, w.TempMax),
	}
}

// Gauges converts v back to ledger units.
func (v GaugeValues) Gauges() ledger.GPUGauges {
	return ledger.GPUGauges{
		Samples: v.Samples,
		UtilSum: float64(v.UtilSum) / UtilScale, UtilMax: float64(v.UtilMax) / UtilScale,
		MemorySum: float64(v.MemSum), MemoryMax: float64(v.MemMax),
		PowerSum: float64(v.PowerSum) / MilliwattsPerWatt, PowerMax: float64(v.PowerMax) / MilliwattsPerWatt,
		TempSum: float64(v.TempSum) / TempScale, TempMax: float64(v.TempMax) / TempScale,
	}
}

func gaugeValues(c *conv, g ledger.GPUGauges) GaugeValues {
	return GaugeValues{
		Samples:  g.Samples,
		UtilSum:  c.fixed("Gauges.UtilSum", g.UtilSum, UtilScale),
		UtilMax:  c.fixed("Gauges.UtilMax", g.UtilMax, UtilScale),
		MemSum:   c.fixed("Gauges.MemorySum", g.MemorySum, 1),
		MemMax:   c.fixed("Gauges.MemoryMax", g.MemoryMax, 1),
		PowerSum: c.fixed("Gauges.PowerSum", g.PowerSum, MilliwattsPerWatt),
		PowerMax: c.fixed("Gauges.PowerMax", g.PowerMax, MilliwattsPerWatt),
		TempSum:  c.fixed("Gauges.TempSum", g.TempSum, TempScale),
		TempMax:  c.fixed("Gauges.TempMax", g.TempMax, TempScale),
	}
}

// Add sums v and w, the peak taking the maximum.
func (v GPUValues) Add(w GPUValues) GPUValues {
	return GPUValues{
		SecondsUS:      v.SecondsUS + w.SecondsUS,
		AllocatedUS:    v.AllocatedUS + w.AllocatedUS,
		IdleUS:         v.IdleUS + w.IdleUS,
		UsedUS:         v.UsedUS + w.UsedUS,
		UnattributedUS: v.UnattributedUS + w.UnattributedUS,
		EnergyMJ:       v.EnergyMJ + w.EnergyMJ,
		IdleEnergyMJ:   v.IdleEnergyMJ + w.IdleEnergyMJ,
		PeakUtil:       max(v.PeakUtil, w.PeakUtil),
		Gauges:         v.Gauges.Add(w.Gauges),
	}
}

// Sums converts v back to ledger units.
func (v GPUValues) Sums() ledger.GPUSums {
	return ledger.GPUSums{
		Seconds:             float64(v.SecondsUS) / MicrosPerSecond,
		AllocatedSeconds:    float64(v.AllocatedUS) / MicrosPerSecond,
		IdleSeconds:         float64(v.IdleUS) / MicrosPerSecond,
		UsedSeconds:         float64(v.UsedUS) / MicrosPerSecond,
		UnattributedSeconds: float64(v.UnattributedUS) / MicrosPerSecond,
		EnergyJoules:        float64(v.EnergyMJ) / MillijoulesPerJoule,
		IdleEnergyJoules:    float64(v.IdleEnergyMJ) / MillijoulesPerJoule,
		PeakUtil:            float64(v.PeakUtil) / UtilScale,
	}
}

// ContainerKey keys per-container rows.
type ContainerKey struct {
	Start int64
	Node  string
	ID    string
}

func (k ContainerKey) at(s int64) ContainerKey { k.Start = s; return k }
func (k ContainerKey) start() int64            { return k.Start }
func (k ContainerKey) compare(o ContainerKey) int {
	return cmp.Or(cmp.Compare(k.Start, o.Start), cmp.Compare(k.Node, o.Node), cmp.Compare(k.ID, o.ID))
}

// ContainerValues are a container's CPU and RAM in stored units.
type ContainerValues struct {
	CPUUS    int64
	RAMByteS int64
}

// Add sums v and w.
func (v ContainerValues) Add(w ContainerValues) ContainerValues {
	return ContainerValues{CPUUS: v.CPUUS + w.CPUUS, RAMByteS: v.RAMByteS + w.RAMByteS}
}

// GPURef names a GPU of a node.
type GPURef struct{ Node, UUID string }

// OwnerRef names an owner on a node.
type OwnerRef struct{ Node, Kind, Name string }

// Rows is a batch as the SQL stores write it: every key once per table, in
// key order (time first, which appends to the tables' primary keys and
// gives concurrent writers one lock order), plus the nodes, GPUs and
// owners the batch refers to, sorted.
type Rows struct {
	UsageMinute, UsageHour, UsageDay             []Row[UsageKey, UsageValues]
	GPUMinute, GPUHour, GPUDay                   []Row[GPUKey, GPUValues]
	ContainerMinute, ContainerHour, ContainerDay []Row[ContainerKey, ContainerValues]

	Nodes  []string
	GPUs   []GPURef
	Owners []OwnerRef
}

// Rollup validates b and turns it into Rows. Errors wrap
// ledger.ErrInvalidBatch.
func Rollup(b *ledger.Batch) (Rows, error) {
	if err := b.Validate(); err != nil {
		return Rows{}, err
	}
	var r Rows
	var err error
	r.UsageMinute, r.UsageHour, r.UsageDay, err = roll(len(b.Usage), func(i int) (UsageKey, UsageValues, error) {
		u := &b.Usage[i]
		k := UsageKey{Start: u.Start.Unix(), Node: u.Node, GPU: u.GPU, Kind: u.OwnerKind, Owner: u.OwnerID}
		var c conv
		v := UsageValues{
			AllocatedUS: c.fixed("AllocatedSeconds", u.AllocatedSeconds, MicrosPerSecond),
			HeldUS:      c.fixed("HeldSeconds", u.HeldSeconds, MicrosPerSecond),
			PresentUS:   c.fixed("PresentSeconds", u.PresentSeconds, MicrosPerSecond),
			UsedUS:      c.fixed("UsedSeconds", u.UsedSeconds, MicrosPerSecond),
			MemoryByteS: c.fixed("MemoryByteSeconds", u.MemoryByteSeconds, 1),
			EnergyMJ:    c.fixed("EnergyJoules", u.EnergyJoules, MillijoulesPerJoule),
			PeakMemory:  int64(u.PeakMemoryBytes), // Validate bounds it
			PeakUtil:    c.fixed("PeakUtil", u.PeakUtil, UtilScale),
		}
		if c.err != nil {
			return k, v, fmt.Errorf("%w: usage[%d]: %v", ledger.ErrInvalidBatch, i, c.err)
		}
		return k, v, nil
	})
	if err != nil {
		return Rows{}, err
	}
	r.GPUMinute, r.GPUHour, r.GPUDay, err = roll(len(b.GPUUsage), func(i int) (GPUKey, GPUValues, error) {
		g := &b.GPUUsage[i]
		k := GPUKey{Start: g.Start.Unix(), Node: g.Node, GPU: g.GPU}
		var c conv
		v := GPUValues{
			SecondsUS:      c.fixed("Seconds", g.Seconds, MicrosPerSecond),
			AllocatedUS:    c.fixed("AllocatedSeconds", g.AllocatedSeconds, MicrosPerSecond),
			IdleUS:         c.fixed("IdleSeconds", g.IdleSeconds, MicrosPerSecond),
			UsedUS:         c.fixed("UsedSeconds", g.UsedSeconds, MicrosPerSecond),
			UnattributedUS: c.fixed("UnattributedSeconds", g.UnattributedSeconds, MicrosPerSecond),
			EnergyMJ:       c.fixed("EnergyJoules", g.EnergyJoules, MillijoulesPerJoule),
			IdleEnergyMJ:   c.fixed("IdleEnergyJoules", g.IdleEnergyJoules, MillijoulesPerJoule),
			PeakUtil:       c.fixed("PeakUtil", g.PeakUtil, UtilScale),
			Gauges:         gaugeValues(&c, g.Gauges),
		}
		if c.err != nil {
			return k, v, fmt.Errorf("%w: gpu usage[%d]: %v", ledger.ErrInvalidBatch, i, c.err)
		}
		return k, v, nil
	})
	if err != nil {
		return Rows{}, err
	}
	r.ContainerMinute, r.ContainerHour, r.ContainerDay, err = roll(len(b.ContainerUsage), func(i int) (ContainerKey, ContainerValues, error) {
		u := &b.ContainerUsage[i]
		k := ContainerKey{Start: u.Start.Unix(), Node: u.Node, ID: u.ContainerID}
		var c conv
		v := ContainerValues{
			CPUUS:    c.fixed("CPUSeconds", u.CPUSeconds, MicrosPerSecond),
			RAMByteS: c.fixed("RAMByteSeconds", u.RAMByteSeconds, 1),
		}
		if c.err != nil {
			return k, v, fmt.Errorf("%w: container usage[%d]: %v", ledger.ErrInvalidBatch, i, c.err)
		}
		return k, v, nil
	})
	if err != nil {
		return Rows{}, err
	}

	nodes := map[string]bool{}
	gpus := map[GPURef]bool{}
	owners := map[OwnerRef]bool{}
	for _, n := range b.Nodes {
		nodes[n.Name] = true
	}
	for _, g := range b.GPUs {
		nodes[g.Node] = true
		gpus[GPURef{g.Node, g.UUID}] = true
	}
	for _, c := range b.Containers {
		nodes[c.Node] = true
		owners[OwnerRef{c.Node, ledger.KindContainer, c.ID}] = true
	}
	for _, u := range r.UsageMinute {
		nodes[u.Key.Node] = true
		gpus[GPURef{u.Key.Node, u.Key.GPU}] = true
		owners[OwnerRef{u.Key.Node, u.Key.Kind, u.Key.Owner}] = true
	}
	for _, g := range r.GPUMinute {
		nodes[g.Key.Node] = true
		gpus[GPURef{g.Key.Node, g.Key.GPU}] = true
	}
	for _, c := range r.ContainerMinute {
		nodes[c.Key.Node] = true
		owners[OwnerRef{c.Key.Node, ledger.KindContainer, c.Key.ID}] = true
	}
	r.Nodes = slices.Sorted(maps.Keys(nodes))
	r.GPUs = slices.SortedFunc(maps.Keys(gpus), func(a, b GPURef) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.UUID, b.UUID))
	})
	r.Owners = slices.SortedFunc(maps.Keys(owners), func(a, b OwnerRef) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return r, nil
}

// roll adds n input rows into minute, hour and day rows (days in UTC).
func roll[K Key[K], V Values[V]](n int, row func(int) (K, V, error)) (minute, hour, day []Row[K, V], err error) {
	if n == 0 {
		return nil, nil, nil, nil
	}
	m := make(map[K]V, n)
	h := make(map[K]V)
	d := make(map[K]V)
	add := func(to map[K]V, k K, v V) {
		if old, ok := to[k]; ok {
			to[k] = old.Add(v)
		} else {
			to[k] = v
		}
	}
	for i := range n {
		k, v, err := row(i)
		if err != nil {
			return nil, nil, nil, err
		}
		s := k.start()
		add(m, k.at(floor(s, 60)), v)
		add(h, k.at(floor(s, 3600)), v)
		add(d, k.at(floor(s, 86400)), v)
	}
	return sorted(m), sorted(h), sorted(d), nil
}

func sorted[K Key[K], V any](m map[K]V) []Row[K, V] {
	rows := make([]Row[K, V], 0, len(m))
	for k, v := range m {
		rows = append(rows, Row[K, V]{k, v})
	}
	slices.SortFunc(rows, func(a, b Row[K, V]) int { return a.Key.compare(b.Key) })
	return rows
}

// conv converts ledger floats to stored integers, keeping the first error.
type conv struct{ err error }

func (c *conv) fixed(name string, v, scale float64) int64 {
	r := math.Round(v * scale)
	if math.Abs(r) > maxFixed {
		if c.err == nil {
			c.err = fmt.Errorf("%s %v is out of range", name, v)
		}
		return 0
	}
	return int64(r)
}

// floor rounds s down to a multiple of unit, also below zero.
func floor(s, unit int64) int64 {
	r := s % unit
	if r < 0 {
		r += unit
	}
	return s - r
}

// Unix returns t in unix seconds, or nil for the zero time.
func Unix(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	s := t.Unix()
	return &s
}

// Time is the inverse of Unix.
func Time(s *int64) time.Time {
	if s == nil {
		return time.Time{}
	}
	return time.Unix(*s, 0).UTC()
}
