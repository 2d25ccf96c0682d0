package apitype

import "time"

// Usage is the body of GET /api/v1/usage in JSON, the usage and cost
// report over a window, in the form `gpumeter report --format json`
// prints too (docs/design.md's JSON report contract). It is a contract:
// fields may be added, never changed.
type Usage struct {
	From     time.Time  `json:"from"`
	To       time.Time  `json:"to"`
	By       string     `json:"by"`
	Currency string     `json:"currency"`
	Rows     []UsageRow `json:"rows"`
	Idle     UsageIdle  `json:"idle"`
	// Totals sum the rows (containers counts distinct containers); the
	// idle pool and Unbilled are not in them.
	Totals UsageRow `json:"totals"`

	// Basis is the cost basis: allocated, present or used GPU-hours.
	Basis string `json:"basis"`
	// IdlePolicy says what became of the idle pool's cost: unshared,
	// shared by allocated cost, or shared evenly.
	IdlePolicy string        `json:"idle_policy"`
	Unbilled   UsageUnbilled `json:"unbilled"`
	Host       UsageHost     `json:"host"`
	// Filtered is set when the request left records out, so that the
	// rows need not add up to the host.
	Filtered bool `json:"filtered,omitempty"`
	// Notes say, in sentences, what limits the figures.
	Notes []string `json:"notes,omitempty"`
}

// UsageRow is one group's usage and cost. Costs are weighted; Cost is the
// sum of the five parts.
type UsageRow struct {
	Key               string  `json:"key"`
	GPUHoursAllocated float64 `json:"gpu_hours_allocated"`
	GPUHoursUsed      float64 `json:"gpu_hours_used"`
	// Efficiency is used / held GPU-hours, within 0..1; 0 when the row
	// held nothing.
	Efficiency         float64 `json:"efficiency"`
	EnergyKWh          float64 `json:"energy_kwh"`
	PeakGPUMemoryBytes uint64  `json:"peak_gpu_memory_bytes"`
	CPUCoreHours       float64 `json:"cpu_core_hours"`
	RAMGBHours         float64 `json:"ram_gb_hours"` // GiB-hours
	Cost               float64 `json:"cost"`
	Containers         int     `json:"containers"` // distinct containers

	GPUHoursPresent float64 `json:"gpu_hours_present"`
	// GPUHoursHeld is the GPU time the row's containers held, each the
	// whole time it held a GPU; null when none of the row's usage was
	// recorded with it (ledger schema 4 and older).
	GPUHoursHeld           *float64 `json:"gpu_hours_held"`
	PeakUtilizationPercent float64  `json:"peak_utilization_percent"`
	CostGPU                float64  `json:"cost_gpu"`
	CostCPU                float64  `json:"cost_cpu"`
	CostRAM                float64  `json:"cost_ram"`
	CostEnergy             float64  `json:"cost_energy"`
	CostIdleShare          float64  `json:"cost_idle_share"`
	// Job is set on the job rows of a report by job, and only there.
	Job *UsageJob `json:"job,omitempty"`
}

// UsageJob is the queue job of a row in a report by job: its whole life
// as the job store has it. A job the store does not know has the user of
// its container's labels, state "" and no times.
type UsageJob struct {
	User          string     `json:"user"`
	State         string     `json:"state"`
	GPUsRequested int        `json:"gpus_requested"` // 0 when the store does not know the job
	SubmittedAt   *time.Time `json:"submitted_at"`
	StartedAt     *time.Time `json:"started_at"`
	EndedAt       *time.Time `json:"ended_at"`
	// WaitedSeconds is from submission to start; RanSeconds from start to
	// the end, or to the report's time while it runs. Null when unknown.
	WaitedSeconds *float64 `json:"waited_seconds"`
	RanSeconds    *float64 `json:"ran_seconds"`
}

// UsageIdle is the idle pool: GPU time nobody held and energy booked to
// nobody, at the GPUs' prices.
type UsageIdle struct {
	GPUHours  float64 `json:"gpu_hours"`
	EnergyKWh float64 `json:"energy_kwh"`
	Cost      float64 `json:"cost"`
	// Shared is set when the cost went into the rows' cost_idle_share.
	Shared bool `json:"shared"`
}

// UsageUnbilled is allocated GPU time that the cost basis did not charge,
// and its cost.
type UsageUnbilled struct {
	GPUHours float64 `json:"gpu_hours"`
	Cost     float64 `json:"cost"`
}

// UsageHost is what the host metered over the window, whatever the
// request's filter.
type UsageHost struct {
	GPUs      int     `json:"gpus"`
	GPUHours  float64 `json:"gpu_hours"` // allocated + idle
	EnergyKWh float64 `json:"energy_kwh"`
	Cost      float64 `json:"cost"`
}
