package config

import "time"

// Queue is the GPU job queue's settings (queue.*). The queue is off by
// default; the agent turns these plain values into the allowlist
// (queue/spec's Rules) and the scheduler's settings (queue's Config).
type Queue struct {
	// Enabled runs the queue in `gpumeter serve`.
	Enabled bool

	// Images are the glob patterns (path.Match) of the images a job may
	// run; empty refuses every job, and says so.
	Images []string
	// MountRoots are the absolute directories under which a job may
	// mount host paths; empty allows no mount.
	MountRoots []string
	// RunAsRootImages are the glob patterns of images whose jobs may
	// run as uid 0.
	RunAsRootImages []string
	// CapAdd are the capabilities added to every job after all are
	// dropped.
	CapAdd []string
	// Network is the Docker network jobs join (bridge by default).
	Network string
	// PublishPorts are the host port ranges ("8000-8099" or "8888") a
	// job may publish; empty refuses every --publish.
	PublishPorts []string
	// PublishAddress is the host address published ports bind to.
	PublishAddress string

	// The most one job may ask for. A zero here is not "unlimited":
	// Default sets each.
	MaxGPUs      int
	MaxCPUs      float64
	MaxMemory    uint64
	MaxShmSize   uint64
	MaxTimeLimit time.Duration
	// DefaultTimeLimit is the time limit of a job that names none; 0
	// makes --time-limit required.
	DefaultTimeLimit time.Duration

	// Placement is binpack or spread.
	Placement string
	// MaxGPUsPerUser caps the GPUs one user's jobs hold at once: the
	// "default" entry for everyone, other entries by user name.
	MaxGPUsPerUser map[string]int
	// OutsideMemoryThreshold is the fraction (0..1) of a GPU's memory
	// processes outside the queue may use before the GPU is not free.
	OutsideMemoryThreshold float64
	// GPUPassing is how a job is given its GPUs: auto, device_requests,
	// cdi or env.
	GPUPassing string

	// StopGrace is how long docker stop waits at a time limit or a
	// cancel before it kills.
	StopGrace time.Duration
	// MaxRequeue is how many times a lost job goes back to the queue
	// before it fails.
	MaxRequeue int
	// MaxStartAttempts is how many failed starts a job gets before it
	// fails.
	MaxStartAttempts int
	// LogRetention is how long an ended job's container (and so its
	// logs) is kept before it is removed.
	LogRetention time.Duration
	// Notify lists the job events (start, end) the policy's webhook is
	// sent for every job; a job's --notify adds its own.
	Notify []string
}
