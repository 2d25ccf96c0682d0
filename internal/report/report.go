// Package report turns ledger totals over a window into the usage and cost
// report: one row per user, team, project, container, image, GPU or node,
// the idle pool, and totals that reconcile with the host. It is pure
// arithmetic on what it is handed and writes only to the io.Writer it is
// given, so every figure can be checked by hand in a test.
//
// # Units
//
// GPU-hours, CPU core-hours and RAM GB-hours are seconds / 3600; "GB" in
// ram_gb_hours and in cost.Model.RAMGBHour is the GiB, 2^30 bytes, as cgroup
// memory figures are binary. Energy is metered kWh (joules / 3.6e6), before
// PUE; PUE only scales what energy costs.
//
// # Cost
//
// With the weights w (cost.Model.Weights) and prices p of the cost model, a
// ledger record (one owner on one GPU) costs
//
//	gpu    = w_gpu    · charged GPU-hours · p_gpu(model)
//	cpu    = w_cpu    · CPU core-hours    · p_cpu
//	ram    = w_ram    · RAM GiB-hours     · p_ram
//	energy = w_energy · kWh · PUE         · p_kWh
//
// where the charged GPU-hours are the record's allocated, present or used
// GPU-hours (cost.Model.Basis) and p_gpu(model) is the price of the record's
// GPU model, else the "default" price, else 0. A row costs the sum over its
// records, plus its share of the idle pool when the pool is shared.
//
// The idle pool is what no owner held: per GPU, w_gpu · IdleSeconds/3600 ·
// p_gpu(model) + w_energy · IdleEnergyJoules/3.6e6 · PUE · p_kWh.
//
// # Host cost and the invariants
//
// The host's cost over the window is
//
//	host = Σ_GPUs  w_gpu · (AllocatedSeconds + IdleSeconds)/3600 · p_gpu(model)
//	     + w_energy · PUE · p_kWh · (Σ_records energy kWh + Σ_GPUs idle kWh)
//	     + w_cpu · p_cpu · Σ_records CPU core-hours
//	     + w_ram · p_ram · Σ_records RAM GiB-hours
//
// that is every GPU-hour the ledger metered (held or idle) at its model's
// price, and every metered joule, core-second and byte-second at theirs.
// The GPU part reads the GPU totals; it equals what the records add up to
// because the meter books each GPU's allocated time to its holders in full
// (the stores keep both to the microsecond, so the two can differ by that).
//
// Basis "present" and "used" charge other GPU-hours than were allocated.
// The difference, Σ_records (allocated − charged) GPU-hours and their cost,
// is not charged to anyone and not shared: the report shows it as Unbilled,
// the holders' allocated-but-not-charged time. It is negative where rows
// are charged for more than they were allocated, as host processes are,
// which hold no allocation: their GPU-hours are also in the idle pool.
//
// For an unfiltered report, to float rounding:
//
//	Σ rows.cost + idle.cost (pool not shared) + unbilled.cost == host.cost
//	Σ rows.cost_idle_share == idle.cost                       (pool shared)
//	Σ rows.gpu_hours_allocated + idle.gpu_hours == host.gpu_hours
//	Σ rows.energy_kwh + idle.energy_kwh == host.energy_kwh
//
// and host.gpu_hours is GPUs × window hours when the ledger covers the
// whole window. Unbilled is zero on basis "allocated". Every figure of a
// Report is rounded to 12 significant digits, so that outputs read as
// decimals and the identities hold to about 1e-12 of the host's cost.
//
// # Sharing the idle pool
//
// cost.Model.Idle "none" leaves the pool as its own line, paid by nobody.
// "weighted" shares it in proportion to each record's allocated GPU cost
// (w_gpu · allocated GPU-hours · p_gpu), so a row's share is in proportion
// to the row's allocated GPU cost whatever the grouping. "even" gives each
// row with GPU use (allocated, present or used time) an equal share, split
// inside the row in proportion to allocated GPU cost (evenly among the
// records with GPU use when the row has none). Unattributed use never takes
// a share: nobody could be billed for it. Weighted falls back to even when
// no record has an allocated GPU cost; even falls back to none when no row
// has GPU use.
//
// Shares are computed before Options.Filter applies, so a filtered report
// shows each row exactly as the unfiltered one does.
package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Groupings a report can be built by.
const (
	ByUser      = "user"
	ByTeam      = "team"
	ByProject   = "project"
	ByContainer = "container"
	ByImage     = "image"
	ByGPU       = "gpu"
	ByNode      = "node"
)

// Groupings lists the valid Options.By values.
func Groupings() []string {
	return []string{ByUser, ByTeam, ByProject, ByContainer, ByImage, ByGPU, ByNode}
}

// Keys that stand for something other than a name.
const (
	KeyNone         = "(none)"         // a container without the user, team, project or image
	KeyUnattributed = "(unattributed)" // GPU use no process accounts for
	KeyNoGPU        = "(no gpu)"       // a container's CPU and RAM when it used no GPU
	KeyHost         = "(host)"         // host processes, by image
)

// ErrInvalidCost is cost.ErrInvalidCost, which the errors of a price
// list that does not fit the ledger are wrapped in.
var ErrInvalidCost = cost.ErrInvalidCost

// Options say what to report.
type Options struct {
	// By is one of Groupings.
	By string
	// From and To are the window the totals cover, for the report's
	// header and the hours of the FOCUS charge period.
	From, To time.Time
	Cost     cost.Model
	// Filter keeps the records it returns true for; nil keeps all. It
	// selects rows, it does not change them: idle shares, the idle pool,
	// Unbilled and Host are the host's whatever the filter.
	Filter func(*ledger.UsageTotal) bool
}

// Report is the usage and cost report over a window. Its JSON form is a
// contract other tools read: fields may be added, never changed.
type Report struct {
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	By       string    `json:"by"`
	Currency string    `json:"currency"`
	Rows     []Row     `json:"rows"`
	Idle     Idle      `json:"idle"`
	// Totals sum the rows (containers counts distinct containers); the
	// idle pool and Unbilled are not in them.
	Totals Row `json:"totals"`

	Basis      string   `json:"basis"`
	IdlePolicy string   `json:"idle_policy"`
	Unbilled   Unbilled `json:"unbilled"`
	Host       Host     `json:"host"`
	// Filtered is set when Options.Filter left records out, so that the
	// rows need not add up to the host.
	Filtered bool `json:"filtered,omitempty"`
	// Notes say, in sentences, what limits the figures: that some usage
	// has no held GPU-hours (NoteHeldUnknown), for one.
	Notes []string `json:"notes,omitempty"`

	lines   []line     // per ledger record, for FOCUS
	kept    []int      // lines the filter kept, in row order
	idleGPU []idleLine // per GPU with an idle pool, for FOCUS
	pue     float64
	unit    unitPrices
}

// unitPrices are weighted prices of one kWh drawn (PUE included), one
// core-hour and one GiB-hour.
type unitPrices struct{ kWh, cpu, ram float64 }

// Row is one group's usage and cost. Costs are weighted; Cost is the sum
// of the five parts.
type Row struct {
	Key               string  `json:"key"`
	GPUHoursAllocated float64 `json:"gpu_hours_allocated"`
	GPUHoursUsed      float64 `json:"gpu_hours_used"`
	// Efficiency is used / held GPU-hours over the records (an owner on a
	// GPU) that held GPU time: the share of the GPU time the row held
	// that it used, within 0..1, as Slurm's GPU efficiency. Use of GPUs a
	// record did not hold (host processes) counts in GPUHoursUsed, not
	// here; 0 when the row held nothing. Usage without held GPU-hours
	// (see GPUHoursHeld) is left out of both sides. Before gpumeter kept
	// held time, efficiency was used / allocated and passed 1 on shared
	// GPUs.
	Efficiency         float64 `json:"efficiency"`
	EnergyKWh          float64 `json:"energy_kwh"`
	PeakGPUMemoryBytes uint64  `json:"peak_gpu_memory_bytes"`
	CPUCoreHours       float64 `json:"cpu_core_hours"`
	RAMGBHours         float64 `json:"ram_gb_hours"` // GiB-hours
	Cost               float64 `json:"cost"`
	Containers         int     `json:"containers"` // distinct containers

	GPUHoursPresent float64 `json:"gpu_hours_present"`
	// GPUHoursHeld is the GPU time the row's containers held, each the
	// whole time it held a GPU, not the 1/n share of GPUHoursAllocated.
	// Ledger rows written before gpumeter kept it (schema 4 and older)
	// have none: it is null when none of the row's GPU usage has it, and
	// otherwise covers only the usage that has it (the report then
	// carries NoteHeldUnknown).
	GPUHoursHeld           *float64 `json:"gpu_hours_held"`
	PeakUtilizationPercent float64  `json:"peak_utilization_percent"`
	CostGPU                float64  `json:"cost_gpu"`
	CostCPU                float64  `json:"cost_cpu"`
	CostRAM                float64  `json:"cost_ram"`
	CostEnergy             float64  `json:"cost_energy"`
	CostIdleShare          float64  `json:"cost_idle_share"`
}

// Idle is the idle pool: GPU time nobody held and energy booked to
// nobody, at the GPUs' prices. Cost is the pool's whether or not it was
// shared into the rows.
type Idle struct {
	GPUHours  float64 `json:"gpu_hours"`
	EnergyKWh float64 `json:"energy_kwh"`
	Cost      float64 `json:"cost"`
	// Shared is set when the cost went into the rows' cost_idle_share.
	Shared bool `json:"shared"`
}

// Unbilled is allocated GPU time that the cost basis did not charge:
// Σ (allocated − charged) GPU-hours and their cost. Zero on the allocated
// basis; negative where more was charged than allocated.
type Unbilled struct {
	GPUHours float64 `json:"gpu_hours"`
	Cost     float64 `json:"cost"`
}

// Host is what the host metered over the window, unfiltered: see the
// package documentation for the cost.
type Host struct {
	GPUs      int     `json:"gpus"`
	GPUHours  float64 `json:"gpu_hours"` // allocated + idle
	EnergyKWh float64 `json:"energy_kwh"`
	Cost      float64 `json:"cost"`
}

// line is one ledger record with its weighted costs.
type line struct {
	u                           *ledger.UsageTotal
	key                         string
	ctr                         int     // ordinal of the container, -1 for other owners
	charged                     float64 // GPU-hours on the cost basis
	gpuPrice                    float64 // price of one GPU-hour
	gpu, cpu, ram, energy, idle float64
	allocCost                   float64 // allocated GPU cost
}

// idleLine is one GPU's idle pool.
type idleLine struct {
	gpu             ledger.GPU
	hours, kWh      float64
	costGPU, costEn float64
	price           float64 // weighted price of one GPU-hour
}

const (
	secondsPerHour = 3600
	joulesPerKWh   = 3.6e6
	bytesPerGiB    = 1 << 30
)

// Build computes the report from the ledger's usage and GPU totals over
// one window. gpus should cover the nodes usage does; Options.Filter does
// not apply to them. The report refers to usage for WriteFOCUS, so usage
// must not change while the report is in use.
func Build(usage []ledger.UsageTotal, gpus []ledger.GPUTotal, opt Options) (*Report, error) {
	if !slices.Contains(Groupings(), opt.By) {
		return nil, fmt.Errorf("unknown report grouping %q (want one of %s)", opt.By, strings.Join(Groupings(), ", "))
	}
	if err := opt.Cost.Validate(nil); err != nil {
		return nil, fmt.Errorf("cost model: %w", err)
	}
	if !opt.From.IsZero() && !opt.To.IsZero() && opt.To.Before(opt.From) {
		return nil, fmt.Errorf("report window ends (%s) before it starts (%s)", opt.To.UTC().Format(time.RFC3339), opt.From.UTC().Format(time.RFC3339))
	}
	m := opt.Cost.WithDefaults()
	wGPU, wCPU, wRAM, wEn := m.Weight(cost.WeightGPU), m.Weight(cost.WeightCPU), m.Weight(cost.WeightRAM), m.Weight(cost.WeightEnergy)
	kWhPrice := wEn * m.PUE * m.KWh

	r := &Report{
		From:       opt.From.UTC(),
		To:         opt.To.UTC(),
		By:         opt.By,
		Currency:   m.Currency,
		Basis:      m.Basis,
		IdlePolicy: m.Idle,
		pue:        m.PUE,
		unit:       unitPrices{kWh: wEn * m.KWh, cpu: wCPU * m.CPUCoreHour, ram: wRAM * m.RAMGBHour},
	}

	keyOf := keyer(opt.By, usage)
	lines := make([]line, len(usage))
	ctrs := map[[2]string]int{}
	var energyKWh float64
	for i := range usage {
		u := &usage[i]
		l := line{u: u, key: keyOf(u), ctr: -1}
		if u.OwnerKind == ledger.KindContainer {
			k := [2]string{u.Node, u.OwnerID}
			n, ok := ctrs[k]
			if !ok {
				n = len(ctrs)
				ctrs[k] = n
			}
			l.ctr = n
		}
		l.gpuPrice = wGPU * m.GPUPrice(u.GPU.Model)
		switch m.Basis {
		case cost.BasisAllocated:
			l.charged = u.AllocatedSeconds / secondsPerHour
		case cost.BasisPresent:
			l.charged = u.PresentSeconds / secondsPerHour
		case cost.BasisUsed:
			l.charged = u.UsedSeconds / secondsPerHour
		}
		alloc := u.AllocatedSeconds / secondsPerHour
		l.gpu = l.charged * l.gpuPrice
		l.allocCost = alloc * l.gpuPrice
		l.cpu = wCPU * m.CPUCoreHour * u.CPUSeconds / secondsPerHour
		l.ram = wRAM * m.RAMGBHour * u.RAMByteSeconds / bytesPerGiB / secondsPerHour
		kWh := u.EnergyJoules / joulesPerKWh
		l.energy = kWhPrice * kWh
		lines[i] = l

		energyKWh += kWh
		r.Unbilled.GPUHours += alloc - l.charged
		r.Unbilled.Cost += l.allocCost - l.gpu
		r.Host.Cost += l.cpu + l.ram + l.energy
	}

	for _, g := range gpus {
		p := wGPU * m.GPUPrice(g.GPU.Model)
		r.Host.GPUs++
		r.Host.GPUHours += (g.AllocatedSeconds + g.IdleSeconds) / secondsPerHour
		r.Host.Cost += (g.AllocatedSeconds + g.IdleSeconds) / secondsPerHour * p
		if g.IdleSeconds == 0 && g.IdleEnergyJoules == 0 {
			continue
		}
		il := idleLine{gpu: g.GPU, hours: g.IdleSeconds / secondsPerHour, kWh: g.IdleEnergyJoules / joulesPerKWh, price: p}
		il.costGPU = il.hours * p
		il.costEn = il.kWh * kWhPrice
		r.idleGPU = append(r.idleGPU, il)
		r.Idle.GPUHours += il.hours
		r.Idle.EnergyKWh += il.kWh
		r.Idle.Cost += il.costGPU + il.costEn
		r.Host.Cost += il.costEn
	}
	r.Host.EnergyKWh = energyKWh + r.Idle.EnergyKWh

	r.Idle.Shared = shareIdle(lines, m.Idle, r.Idle.Cost)

	// Rows from the records the filter keeps, in order of first record.
	index := map[string]int{}
	var groups [][]int
	for i := range lines {
		if opt.Filter != nil && !opt.Filter(lines[i].u) {
			r.Filtered = true
			continue
		}
		g, ok := index[lines[i].key]
		if !ok {
			g = len(groups)
			index[lines[i].key] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	seen := make([]int, len(ctrs)) // the last row + 1 that counted each container
	rows := make([]Row, len(groups))
	for g, idx := range groups {
		rows[g] = sum(lines[idx[0]].key, lines, idx, seen, g+1)
	}
	order := make([]int, len(rows))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ra, rb := &rows[a], &rows[b]
		return cmp.Or(cmp.Compare(rb.Cost, ra.Cost), strings.Compare(ra.Key, rb.Key))
	})
	r.Rows = make([]Row, 0, len(rows))
	r.lines = lines
	for _, g := range order {
		r.Rows = append(r.Rows, rows[g])
		r.kept = append(r.kept, groups[g]...)
	}
	r.Totals = sum("(total)", lines, r.kept, seen, len(groups)+1)
	for _, i := range r.kept {
		if lines[i].u.Unheld.Rows > 0 {
			r.Notes = append(r.Notes, NoteHeldUnknown)
			break
		}
	}
	r.round()
	return r, nil
}

// NoteHeldUnknown is the note of a report over usage that has no held
// GPU-hours.
const NoteHeldUnknown = "some usage was recorded before gpumeter kept held GPU-hours (ledger schema 4 and older): " +
	"gpu_hours_held and efficiency cover only the usage that has them, and gpu_hours_held is null for rows with none"

// round rounds every figure of the report to 12 significant digits, so
// that sums read as the decimals they are (0.3, not 0.30000000000000004)
// in every format, and the formats agree.
func (r *Report) round() {
	for i := range r.Rows {
		r.Rows[i].round()
	}
	r.Totals.round()
	for _, v := range []*float64{&r.Idle.GPUHours, &r.Idle.EnergyKWh, &r.Idle.Cost,
		&r.Unbilled.GPUHours, &r.Unbilled.Cost, &r.Host.GPUHours, &r.Host.EnergyKWh, &r.Host.Cost} {
		*v = round(*v)
	}
}

func (x *Row) round() {
	for _, v := range []*float64{&x.GPUHoursAllocated, &x.GPUHoursUsed, &x.Efficiency, &x.EnergyKWh,
		&x.CPUCoreHours, &x.RAMGBHours, &x.Cost, &x.GPUHoursPresent, &x.PeakUtilizationPercent,
		&x.CostGPU, &x.CostCPU, &x.CostRAM, &x.CostEnergy, &x.CostIdleShare} {
		*v = round(*v)
	}
	if x.GPUHoursHeld != nil {
		h := round(*x.GPUHoursHeld)
		x.GPUHoursHeld = &h
	}
}

// round rounds v to 12 significant digits: far finer than any meter or
// price, far coarser than float64 noise.
func round(v float64) float64 {
	switch {
	case v == 0:
		return 0 // and never -0
	case math.IsInf(v, 0) || math.IsNaN(v):
		return v
	}
	// Dividing an integer by an exact power of ten (up to 1e22) rounds
	// correctly, to the float64 nearest the decimal, which strconv then
	// writes as that decimal.
	e := int(math.Floor(math.Log10(math.Abs(v))))
	switch {
	case e >= -10 && e <= 11:
		p := math.Pow10(11 - e)
		return math.Round(v*p) / p
	case e > 11 && e <= 33:
		p := math.Pow10(e - 11)
		return math.Round(v/p) * p
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	return r
}

// sum adds up the records idx into one row. Containers are counted once
// each, by marking seen[ctr] with stamp, which no other sum uses.
func sum(key string, lines []line, idx []int, seen []int, stamp int) Row {
	row := Row{Key: key}
	var (
		held, heldUsed     float64 // seconds, over the records that held
		onGPU, heldUnknown int     // records on a GPU, and those without held seconds
	)
	for _, i := range idx {
		l := &lines[i]
		u := l.u
		if u.GPU.UUID != "" {
			onGPU++
			if u.Unheld.All {
				heldUnknown++
			}
		}
		if u.HeldSeconds > 0 {
			held += u.HeldSeconds
			heldUsed += u.UsedSeconds - u.Unheld.UsedSeconds
		}
		row.GPUHoursAllocated += u.AllocatedSeconds / secondsPerHour
		row.GPUHoursPresent += u.PresentSeconds / secondsPerHour
		row.GPUHoursUsed += u.UsedSeconds / secondsPerHour
		row.EnergyKWh += u.EnergyJoules / joulesPerKWh
		row.PeakGPUMemoryBytes = max(row.PeakGPUMemoryBytes, u.PeakMemoryBytes)
		row.PeakUtilizationPercent = max(row.PeakUtilizationPercent, u.PeakUtil)
		row.CPUCoreHours += u.CPUSeconds / secondsPerHour
		row.RAMGBHours += u.RAMByteSeconds / bytesPerGiB / secondsPerHour
		row.CostGPU += l.gpu
		row.CostCPU += l.cpu
		row.CostRAM += l.ram
		row.CostEnergy += l.energy
		row.CostIdleShare += l.idle
		if l.ctr >= 0 && seen[l.ctr] != stamp {
			seen[l.ctr] = stamp
			row.Containers++
		}
	}
	row.Cost = row.CostGPU + row.CostCPU + row.CostRAM + row.CostEnergy + row.CostIdleShare
	if onGPU == 0 || heldUnknown < onGPU {
		h := held / secondsPerHour
		row.GPUHoursHeld = &h
	}
	if held > 0 {
		row.Efficiency = heldUsed / held
	}
	return row
}

// shareIdle books each record's share of the idle pool's cost into
// lines[i].idle and reports whether the pool was shared.
func shareIdle(lines []line, policy string, pool float64) bool {
	if policy == cost.IdleNone || pool == 0 {
		return false
	}
	if policy == cost.IdleWeighted {
		var total float64
		for i := range lines {
			if attributed(lines[i].u) {
				total += lines[i].allocCost
			}
		}
		if total > 0 {
			for i := range lines {
				if attributed(lines[i].u) && lines[i].allocCost > 0 {
					lines[i].idle = pool * lines[i].allocCost / total
				}
			}
			return true
		}
	}
	// Evenly among rows with attributed GPU use, grouped over every record.
	index := map[string]int{}
	var groups [][]int
	for i := range lines {
		l := &lines[i]
		if !attributed(l.u) || !gpuUse(l.u) {
			continue
		}
		g, ok := index[l.key]
		if !ok {
			g = len(groups)
			index[l.key] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	if len(groups) == 0 {
		return false
	}
	each := pool / float64(len(groups))
	for _, idx := range groups {
		var alloc float64
		for _, i := range idx {
			alloc += lines[i].allocCost
		}
		for _, i := range idx {
			if alloc > 0 {
				lines[i].idle = each * lines[i].allocCost / alloc
			} else {
				lines[i].idle = each / float64(len(idx))
			}
		}
	}
	return true
}

func attributed(u *ledger.UsageTotal) bool { return u.OwnerKind != ledger.KindNone }

func gpuUse(u *ledger.UsageTotal) bool {
	return u.AllocatedSeconds > 0 || u.PresentSeconds > 0 || u.UsedSeconds > 0
}

// keyer returns the grouping key of a record. Container names are keyed
// over every record, not only those a filter keeps, so that a filter does
// not rename rows.
func keyer(by string, usage []ledger.UsageTotal) func(*ledger.UsageTotal) string {
	switch by {
	case ByUser, ByTeam, ByProject, ByImage:
		return func(u *ledger.UsageTotal) string {
			switch u.OwnerKind {
			case ledger.KindNone:
				return KeyUnattributed
			case ledger.KindHost:
				if by == ByUser {
					return u.OwnerID
				}
				if by == ByImage {
					return KeyHost
				}
				return KeyNone
			}
			var s string
			if c := u.Container; c != nil {
				switch by {
				case ByUser:
					s = c.User
				case ByTeam:
					s = c.Team
				case ByProject:
					s = c.Project
				case ByImage:
					s = c.Image
				}
			}
			return cmp.Or(s, KeyNone)
		}
	case ByGPU:
		return func(u *ledger.UsageTotal) string {
			if u.GPU.UUID == "" {
				return KeyNoGPU
			}
			g := u.GPU
			g.Node = u.Node
			return gpuName(g)
		}
	case ByNode:
		return func(u *ledger.UsageTotal) string { return u.Node }
	}
	return containerKeyer(usage)
}

// containerKeyer keys containers by name, adding the short ID where two
// containers share a name and the node where that is not enough either.
func containerKeyer(usage []ledger.UsageTotal) func(*ledger.UsageTotal) string {
	type ctr struct{ node, id string }
	var ctrs []ctr
	names := map[ctr]string{}
	for i := range usage {
		u := &usage[i]
		c := ctr{u.Node, u.OwnerID}
		if _, ok := names[c]; u.OwnerKind == ledger.KindContainer && !ok {
			names[c] = containerName(u)
			ctrs = append(ctrs, c)
		}
	}
	count := func(key func(ctr) string) map[string]int {
		n := map[string]int{}
		for _, c := range ctrs {
			n[key(c)]++
		}
		return n
	}
	name := func(c ctr) string { return names[c] }
	withID := func(c ctr) string { return names[c] + " (" + shortID(c.id) + ")" }
	byName, byID := count(name), count(withID)
	keys := make(map[ctr]string, len(ctrs))
	for _, c := range ctrs {
		switch {
		case byName[name(c)] < 2:
			keys[c] = name(c)
		case byID[withID(c)] < 2:
			keys[c] = withID(c)
		default:
			keys[c] = c.node + "/" + withID(c)
		}
	}
	return func(u *ledger.UsageTotal) string {
		switch u.OwnerKind {
		case ledger.KindNone:
			return KeyUnattributed
		case ledger.KindHost:
			return "(host " + u.OwnerID + ")"
		}
		return keys[ctr{u.Node, u.OwnerID}]
	}
}

// gpuName names a GPU "<node>/<index> <model>", or by its UUID when the
// ledger knows nothing more of it.
func gpuName(g ledger.GPU) string {
	if g.Index < 0 {
		return g.UUID
	}
	return g.Node + "/" + strconv.Itoa(g.Index) + " " + g.Model
}

// containerName is a container's name without Docker's leading slash, or
// its short ID when the ledger has no name.
func containerName(u *ledger.UsageTotal) string {
	if u.Container != nil && u.Container.Name != "" {
		return strings.TrimPrefix(u.Container.Name, "/")
	}
	return shortID(u.OwnerID)
}

// shortID is a container ID as docker ps shows it.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
