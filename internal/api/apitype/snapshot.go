package apitype

import "time"

// SnapshotJobs is the most jobs a snapshot lists; the counts cover them
// all.
const SnapshotJobs = 50

// Snapshot is the body of GET /api/v1/snapshot: everything a live view
// shows, taken from one tick, so that `gpumeter top` asks once per
// redraw. Each part is filtered for the caller as its own route filters
// it: GPUs as /api/v1/gpus, Containers, HostUsers and Unresolved as
// /api/v1/containers, Waste as /api/v1/waste and Queue as /api/v1/jobs.
type Snapshot struct {
	Node          string      `json:"node"`
	Time          time.Time   `json:"time"`
	DriverVersion string      `json:"driver_version"`
	GPUs          []GPU       `json:"gpus"`
	Containers    []Container `json:"containers"`
	HostUsers     []HostUser  `json:"host_users"`
	Unresolved    []GPUShare  `json:"unresolved"`
	// Waste is the live waste findings; null when the live rules are off.
	Waste *WasteReport `json:"waste"`
	// Queue sums the job queue; null when the queue is off.
	Queue *QueueSummary `json:"queue"`
}

// QueueSummary is the job queue as the caller may see it: the jobs that
// have not ended, counted by state, and the first SnapshotJobs of them.
type QueueSummary struct {
	// Counts are the jobs by state (queued, starting, running); a state
	// without jobs is left out.
	Counts map[string]int `json:"counts"`
	Jobs   []JobBrief     `json:"jobs"`
	// Truncated says that Jobs lists fewer jobs than Counts sums.
	Truncated bool `json:"truncated"`
}

// JobBrief is a job in a snapshot: what a live view shows of it. GET
// /api/v1/jobs/{id} has the rest.
type JobBrief struct {
	ID            string     `json:"id"`
	Name          string     `json:"name"`
	User          string     `json:"user"`
	State         string     `json:"state"`
	Reason        string     `json:"reason"`
	GPUsRequested int        `json:"gpus_requested"`
	GPUs          []string   `json:"gpus"`
	ContainerID   string     `json:"container_id"`
	SubmittedAt   *time.Time `json:"submitted_at"`
	StartedAt     *time.Time `json:"started_at"`
}
