package apitype

import "time"

// WhatIf is the body of GET /api/v1/whatif, in the form `gpumeter whatif
// --format json` prints too: a replay of the window's measured use under
// each sharing mode. It is a contract: fields may be added, never
// changed.
type WhatIf struct {
	Window   WhatIfWindow   `json:"window"`
	Model    WhatIfModel    `json:"model"`
	Measured WhatIfMeasured `json:"measured"`
	Modes    []WhatIfMode   `json:"modes"`
}

// WhatIfWindow is the window asked for and where the replay begins:
// ReplayedFrom is later than From where the ledger keeps no minutes
// (retention).
type WhatIfWindow struct {
	From         time.Time `json:"from"`
	To           time.Time `json:"to"`
	ReplayedFrom time.Time `json:"replayed_from"`
}

// WhatIfModel says what the figures are and what they assume.
type WhatIfModel struct {
	Kind           string   `json:"kind"`
	Share          int      `json:"share"`
	MemoryFraction float64  `json:"memory_fraction"`
	SwitchOverhead float64  `json:"switch_overhead"`
	Placement      string   `json:"placement"`
	Holders        int      `json:"holders"`
	QueueJobs      int      `json:"queue_jobs"`
	Assumptions    []string `json:"assumptions"`
	Notes          []string `json:"notes"`
}

// WhatIfMeasured is what really happened in the replayed window.
type WhatIfMeasured struct {
	GPUs         int        `json:"gpus"`
	UtilMean     float64    `json:"util_mean"`
	GPUHoursHeld float64    `json:"gpu_hours_held"`
	Wait         WaitSpread `json:"wait_s"`
	MakespanS    float64    `json:"makespan_s"`
}

// WaitSpread is p50, p95 and the largest wait in seconds.
type WaitSpread struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	Max float64 `json:"max"`
}

// Stretch is p50 and p95 of the replayed run time over the measured one.
type Stretch struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
}

// Money is an amount in a currency.
type Money struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

// WhatIfMode is one mode's replay at one GPU count.
type WhatIfMode struct {
	Mode         string     `json:"mode"`
	GPUs         int        `json:"gpus"`
	UtilMean     float64    `json:"util_mean"`
	GPUHoursHeld float64    `json:"gpu_hours_held"`
	Wait         WaitSpread `json:"wait_s"`
	MakespanS    float64    `json:"makespan_s"`
	Stretch      Stretch    `json:"stretch"`
	JobsSlowed   int        `json:"jobs_slowed"`
	// GPUsForP95Wait is null when there is no queue job to measure the
	// wait by, or it was not searched (search=0).
	GPUsForP95Wait *int  `json:"gpus_for_p95_wait"`
	Cost           Money `json:"cost"`
	OverTimeLimit  int   `json:"over_time_limit"`
	Unplaced       int   `json:"unplaced"`
	// UtilStepS is UtilSeries' step in seconds; UtilSeries the
	// utilisation in each step from replayed_from.
	UtilStepS  float64   `json:"util_step_s"`
	UtilSeries []float64 `json:"util_series"`
}

// AdviceList is the body of GET /api/v1/advice, in the form `gpumeter
// advise --format json` prints too. A user sees their own advice. It is
// a contract: fields may be added, never changed.
type AdviceList struct {
	Window WhatIfWindow `json:"window"`
	Advice []Advice     `json:"advice"`
	Notes  []string     `json:"notes"`
}

// Advice is one piece of advice: what to ask for, on what evidence, and
// what it would have saved over the window.
type Advice struct {
	User  string `json:"user"`
	Team  string `json:"team"`
	Group string `json:"group"`
	// Kind is gpus, gpu_memory, time_limit, idle_policy or data_loading.
	Kind string `json:"kind"`
	// Flag is the submit flag or the settings to use; "" for a pointer
	// (data_loading).
	Flag          string         `json:"flag"`
	Evidence      map[string]any `json:"evidence"`
	SavedGPUHours float64        `json:"saved_gpu_hours"`
	SavedCost     Money          `json:"saved_cost"`
	Holders       []string       `json:"holders"`
}
