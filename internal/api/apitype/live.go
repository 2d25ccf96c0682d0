package apitype

import "time"

// GPU is one GPU in /api/v1/gpus.
type GPU struct {
	Index            int        `json:"index"`
	UUID             string     `json:"uuid"`
	Model            string     `json:"model"`
	Error            string     `json:"error,omitempty"`
	MemoryTotalBytes uint64     `json:"memory_total_bytes"`
	MemoryUsedBytes  uint64     `json:"memory_used_bytes"`
	UtilPercent      *float64   `json:"utilization_percent"` // null where the GPU does not report it (MIG)
	PowerWatts       *float64   `json:"power_watts"`
	TemperatureC     *float64   `json:"temperature_c"`
	Unavailable      []string   `json:"unavailable,omitempty"`
	MIGEnabled       bool       `json:"mig_enabled"`
	MIG              []MIG      `json:"mig,omitempty"`
	Holders          int        `json:"holders"`
	UnattributedPct  float64    `json:"unattributed_utilization_percent"`
	Processes        []Process  `json:"processes"`
	Totals           GPUTotals  `json:"totals"`
	Owners           []GPUShare `json:"owners"`
}

// MIG is one MIG instance of a GPU.
type MIG struct {
	GPUInstanceID    int    `json:"gpu_instance"`
	UUID             string `json:"uuid"`
	Profile          string `json:"profile"`
	MemoryTotalBytes uint64 `json:"memory_total_bytes"`
	MemoryUsedBytes  uint64 `json:"memory_used_bytes"`
}

// Process is one process on a GPU with its owner.
type Process struct {
	PID         uint32  `json:"pid"`
	Type        string  `json:"type"`
	OwnerKind   string  `json:"owner_kind"` // container, host or none
	Owner       string  `json:"owner"`      // container ID or user name
	MemoryBytes uint64  `json:"memory_bytes"`
	SMPercent   float64 `json:"sm_util_percent"`
}

// GPUTotals are a GPU's counters since the agent started.
type GPUTotals struct {
	MeteredSeconds      float64 `json:"metered_seconds"`
	AllocatedSeconds    float64 `json:"allocated_seconds"`
	IdleSeconds         float64 `json:"idle_seconds"`
	UnattributedSeconds float64 `json:"unattributed_seconds"`
	EnergyJoules        float64 `json:"energy_joules"`
	IdleEnergyJoules    float64 `json:"idle_energy_joules"`
}

// GPUShare is one owner's use of one GPU: the rows of `gpumeter ps`.
type GPUShare struct {
	OwnerKind        string  `json:"owner_kind"`
	Owner            string  `json:"owner"`
	GPU              int     `json:"gpu"`
	UUID             string  `json:"uuid"`
	Share            float64 `json:"share"`
	SMPercent        float64 `json:"sm_util_percent"`
	MemoryBytes      uint64  `json:"memory_bytes"`
	Processes        int     `json:"processes"`
	AllocatedSeconds float64 `json:"allocated_seconds"`
	// HeldSeconds is the whole time a container held the GPU, shared or
	// not: used over held seconds is its efficiency.
	HeldSeconds     float64 `json:"held_seconds"`
	PresentSeconds  float64 `json:"present_seconds"`
	UsedSeconds     float64 `json:"used_seconds"`
	EnergyJoules    float64 `json:"energy_joules"`
	PeakMemoryBytes uint64  `json:"peak_memory_bytes"`
}

// Container is one container in /api/v1/containers.
type Container struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Image       string            `json:"image"`
	Labels      map[string]string `json:"labels"`
	User        string            `json:"user"`
	Team        string            `json:"team"`
	Project     string            `json:"project"`
	Running     bool              `json:"running"`
	Resolved    bool              `json:"resolved"` // false: seen on a GPU but unknown to the inventory
	GPURequest  string            `json:"gpu_request"`
	StartedAt   *time.Time        `json:"started_at,omitempty"`
	FinishedAt  *time.Time        `json:"finished_at,omitempty"`
	ExitCode    *int              `json:"exit_code,omitempty"`
	CPUSeconds  float64           `json:"cpu_seconds"`
	MemoryBytes uint64            `json:"memory_bytes"`
	StatsError  string            `json:"stats_error,omitempty"`
	GPUs        []GPUShare        `json:"gpus"`
}

// HostUser is a Unix user with GPU processes outside containers.
type HostUser struct {
	User string     `json:"user"`
	GPUs []GPUShare `json:"gpus"`
}

// GPUsResponse is the body of /api/v1/gpus.
type GPUsResponse struct {
	Node          string    `json:"node"`
	Time          time.Time `json:"time"`
	DriverVersion string    `json:"driver_version"`
	GPUs          []GPU     `json:"gpus"`
}

// ContainersResponse is the body of /api/v1/containers.
type ContainersResponse struct {
	Node       string      `json:"node"`
	Time       time.Time   `json:"time"`
	Containers []Container `json:"containers"`
	HostUsers  []HostUser  `json:"host_users"`
	// Unresolved are shares of processes whose owner could not be found.
	Unresolved []GPUShare `json:"unresolved"`
}
