package apitype

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/units"
)

// JobRequest is the body of POST /api/v1/jobs: what gpumeter submit
// sends. Sizes and durations are strings in the units grammar ("4h",
// "32GiB"); the server parses them with ParseJobRequest and checks the
// rest against the queue's rules.
type JobRequest struct {
	GPUs int `json:"gpus"`
	// GPUMemory is a size such as "20GiB" on one shared GPU, asked for
	// instead of whole GPUs: gpus is then 0.
	GPUMemory string `json:"gpu_memory,omitempty"`
	// Priority is the job's class: low, normal or high; "" is normal.
	// High is for admins and queue.priority.high_users.
	Priority string `json:"priority,omitempty"`
	// TimeLimit is a duration such as "4h"; "" takes the queue's
	// queue.default_time_limit, and is refused where there is none.
	TimeLimit string   `json:"time_limit,omitempty"`
	Image     string   `json:"image"`
	Name      string   `json:"name,omitempty"`
	Env       []string `json:"env,omitempty"`    // KEY=VALUE
	Mounts    []string `json:"mounts,omitempty"` // SRC:DST[:ro]
	Workdir   string   `json:"workdir,omitempty"`
	CPUs      float64  `json:"cpus,omitempty"`
	Memory    string   `json:"memory,omitempty"`   // a size: "32GiB"
	ShmSize   string   `json:"shm_size,omitempty"` // a size: "8GiB"
	// Pids is the most processes and threads the job may have at once;
	// 0 takes queue.max_pids, and more is refused.
	Pids    int      `json:"pids,omitempty"`
	Publish []string `json:"publish,omitempty"` // PORT[:CPORT]
	// Labels are K=V labels on the job's container, with keys the
	// queue.labels patterns allow (gpumeter.project for chargeback).
	Labels []string `json:"labels,omitempty"`
	// Notify lists the job events the policy's webhook is sent for:
	// start, end.
	Notify  []string `json:"notify,omitempty"`
	Command []string `json:"command"`
	// AsUser submits for another user; only root on the agent's socket
	// may.
	AsUser string `json:"as_user,omitempty"`
	// Array makes an array job of tasks, as --array takes it: "0-99",
	// "0-99%8" (at most 8 running at once), "1,3,5".
	Array string `json:"array,omitempty"`
	// After are the jobs this one waits for; an array's id stands for
	// every task of the array.
	After []Dependency `json:"after,omitempty"`
	// Preemptible lets the job's GPUs go to jobs that wait for them; it
	// is stopped and requeued when they do.
	Preemptible bool `json:"preemptible,omitempty"`
	// Requeue puts the job back in the queue when it exits non-zero,
	// within queue.max_requeue.
	Requeue bool `json:"requeue,omitempty"`
	// Node and Model constrain where a fleet places the job: a node
	// name or a shell pattern of node names, and a pattern of GPU model
	// names ("" any).
	Node  string `json:"node,omitempty"`
	Model string `json:"model,omitempty"`
}

// Dependency is one job another waits for: type ok (it succeeded), any
// (it ended) or fail (it ended other than succeeded).
type Dependency struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// NotifyEvents are the job events --notify may name.
var NotifyEvents = []string{"start", "end"}

// JobValues are the parsed sizes and durations of a JobRequest.
type JobValues struct {
	TimeLimit time.Duration // 0: the request named none
	GPUMemory uint64        // 0: whole GPUs
	Memory    uint64
	ShmSize   uint64
}

// FieldError is a job request field that cannot be parsed.
type FieldError struct {
	Field string // as on the wire: time_limit, memory
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// ParseJobRequest parses the sizes and durations of r and checks its
// notify events. An error is a *FieldError naming the field.
func ParseJobRequest(r JobRequest) (JobValues, error) {
	var v JobValues
	if r.TimeLimit != "" {
		d, err := units.ParseDuration(r.TimeLimit)
		if err != nil {
			return v, &FieldError{"time_limit", err.Error()}
		}
		if d <= 0 {
			return v, &FieldError{"time_limit", fmt.Sprintf("%q is no time at all; give a time limit above 0, such as 4h", r.TimeLimit)}
		}
		v.TimeLimit = d
	}
	for _, f := range []struct {
		name, s string
		dst     *uint64
	}{{"gpu_memory", r.GPUMemory, &v.GPUMemory}, {"memory", r.Memory, &v.Memory}, {"shm_size", r.ShmSize, &v.ShmSize}} {
		if f.s == "" {
			continue
		}
		n, err := units.ParseSize(f.s)
		if err != nil {
			return v, &FieldError{f.name, err.Error()}
		}
		if n == 0 {
			return v, &FieldError{f.name, fmt.Sprintf("%q is no memory at all; give a size such as 32GiB, or leave it out", f.s)}
		}
		*f.dst = n
	}
	seen := map[string]bool{}
	for _, n := range r.Notify {
		if !contains(NotifyEvents, n) {
			return v, &FieldError{"notify", fmt.Sprintf("%q is not a job event; name %s", n, strings.Join(NotifyEvents, " or "))}
		}
		if seen[n] {
			return v, &FieldError{"notify", n + " is named twice"}
		}
		seen[n] = true
	}
	return v, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Job is a job of the GPU queue on the wire, the body of GET
// /api/v1/jobs/{id} and of the answers to submit, cancel, hold and
// release. It is a contract: fields may be added, never changed. Times
// are RFC 3339 in UTC, null when unknown.
type Job struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	User  string `json:"user"`
	Team  string `json:"team"`
	State string `json:"state"`
	// Reason is a code: why the job waits, or why it ended.
	Reason        string   `json:"reason"`
	ReasonText    string   `json:"reason_text"`
	GPUsRequested int      `json:"gpus_requested"`
	GPUs          []string `json:"gpus"` // UUIDs held; [] when none
	Image         string   `json:"image"`
	Command       []string `json:"command"`
	// EnvKeys names the job's environment variables; their values are
	// never shown.
	EnvKeys     []string   `json:"env_keys"`
	TimeLimit   string     `json:"time_limit"`
	SubmittedAt *time.Time `json:"submitted_at"`
	StartedAt   *time.Time `json:"started_at"`
	EndedAt     *time.Time `json:"ended_at"`
	ExitCode    *int       `json:"exit_code"`
	ContainerID string     `json:"container_id"`
	// EstimatedStart is when a waiting job is expected to start; null
	// when that is not known.
	EstimatedStart *time.Time `json:"estimated_start"`
	Held           bool       `json:"held"`
	// GPUMemoryRequested is the memory a job asks for on one shared GPU,
	// in bytes; 0 for a job of whole GPUs.
	GPUMemoryRequested uint64 `json:"gpu_memory_requested"`
	// Class is the job's priority class: low, normal or high.
	Class string `json:"class"`
	// Priority is the job's place in the scheduler's order, higher first;
	// null until the scheduler has ranked it, and for a job that is no
	// longer queued.
	Priority *float64 `json:"priority"`
	// Position is the job's place among the queued jobs, 1 first; null
	// when the job is not queued.
	Position *int `json:"position"`
	// Placement is why the job got its GPUs; null until it has some.
	Placement *Placement `json:"placement"`
	// ArrayID is the array job the job is a task of, "" for none;
	// ArrayIndex its index (null for none), ArrayCount the array's tasks
	// and ArrayMaxRunning how many may run at once (0: no cap).
	ArrayID         string `json:"array_id"`
	ArrayIndex      *int   `json:"array_index"`
	ArrayCount      int    `json:"array_count"`
	ArrayMaxRunning int    `json:"array_max_running"`
	// After are the jobs this one waits for; [] when none.
	After []Dependency `json:"after"`
	// Attempt is the job's number among the jobs gpumeter requeue made
	// of one submission (1 for the first), and RequeueOf the job it was
	// made from ("" for the first).
	Attempt   int    `json:"attempt"`
	RequeueOf string `json:"requeue_of"`
	// Requeues is how often the queue put this job back for a cause that
	// counts towards queue.max_requeue (lost, --requeue); an engine
	// failure or a preemption is not the job's fault and counts none.
	Requeues    int  `json:"requeues"`
	Preemptible bool `json:"preemptible"`
	// Node is the node the job runs or ran on; "" while a fleet's job
	// is queued. NodeConstraint and ModelConstraint are the --node and
	// --model it was submitted with ("" none).
	Node            string `json:"node"`
	NodeConstraint  string `json:"node_constraint"`
	ModelConstraint string `json:"model_constraint"`
}

// Placement is the scheduler's choice of GPU for a job and the score of
// every candidate, for an operator to see why.
type Placement struct {
	// Policy is queue.placement: binpack, spread or target.
	Policy     string               `json:"policy"`
	Candidates []PlacementCandidate `json:"candidates"`
	// Nodes are, in a fleet, the nodes the job could have gone to, the
	// chosen one first; Candidates are then the chosen node's GPUs.
	// Absent on one host.
	Nodes []PlacementNode `json:"nodes,omitempty"`
}

// PlacementCandidate is one GPU the job fitted on.
type PlacementCandidate struct {
	UUID  string  `json:"uuid"`
	Index int     `json:"index"`
	Score float64 `json:"score"`
	// Util is the GPU's measured SM utilisation over
	// queue.placement_window, 0 to 1.
	Util   float64 `json:"util"`
	Chosen bool    `json:"chosen"`
	// Node is the GPU's node in a fleet; absent on one host.
	Node string `json:"node,omitempty"`
}

// PlacementNode is one node a fleet's job could have gone to: the node
// score (target) or binpack's or spread's rank of the node, its mean
// utilisation with the job's expected share, and whether it was chosen.
type PlacementNode struct {
	Node   string  `json:"node"`
	Score  float64 `json:"score"`
	Util   float64 `json:"util"`
	Chosen bool    `json:"chosen"`
}

// JobsResponse is the body of GET /api/v1/jobs: a page of jobs, oldest
// first, and which page it is.
type JobsResponse struct {
	Jobs []Job `json:"jobs"`
	Page *Page `json:"page,omitempty"`
}
