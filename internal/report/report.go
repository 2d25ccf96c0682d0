// Package report turns ledger totals over a window into the usage and cost
// report: one row per user, team, project, container, image, GPU, node or
// queue job, the idle pool, and totals that reconcile with the host. It is pure
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
	"time"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
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
	ByJob       = "job"
)

// Groupings lists the valid Options.By values.
func Groupings() []string {
	return []string{ByUser, ByTeam, ByProject, ByContainer, ByImage, ByGPU, ByNode, ByJob}
}

// Keys that stand for something other than a name.
const (
	KeyNone         = "(none)"         // a container without the user, team, project or image
	KeyUnattributed = "(unattributed)" // GPU use no process accounts for
	KeyNoGPU        = "(no gpu)"       // a container's CPU and RAM when it used no GPU
	KeyHost         = "(host)"         // host processes, by image
	KeyNotJob       = "(not a job)"    // by job: containers outside the queue and host processes
)

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
	// Jobs are what the queue's job store knows of the jobs, for a report
	// by job: they fill Row.Job. Rows of jobs not among them still have
	// Row.Job, with the user from the container's labels and no times.
	// Other groupings ignore them.
	Jobs []queue.Job
	// Now is when a running job's run time is measured to; zero is To.
	Now time.Time
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
	// Job is set on the job rows of a report by job, and only there.
	Job *JobInfo `json:"job,omitempty"`
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
