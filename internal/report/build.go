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
	"github.com/gpumeter/gpumeter/internal/queue"
)

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
	if opt.By == ByJob {
		jobs := make(map[[2]string]*queue.Job, len(opt.Jobs))
		for i := range opt.Jobs {
			jobs[[2]string{opt.Jobs[i].Node, opt.Jobs[i].ID}] = &opt.Jobs[i]
		}
		now := cmp.Or(opt.Now, opt.To)
		for g, idx := range groups {
			rows[g].Job = jobInfo(rows[g].Key, lines[idx[0]].u, jobs, now)
		}
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
