package queue

import (
	"errors"
	"slices"
	"strings"
	"time"
)

// Job is one job of the GPU queue: the one shape the queue's runtime, the
// ledger's job store, reports and notices share. The store keeps it as it
// is given; the request and the placement are decoded once, where the
// store reads its rows.
type Job struct {
	ID         string // j-000123, from Seq; assigned by the store's SubmitJob
	Seq        int64  // the ledger's job sequence number
	Node       string
	Name       string
	User       string
	Team       string
	State      State
	Reason     Reason // also on ended jobs
	ReasonText string
	// GPUsRequested is how many whole GPUs the job asks for (0 for a
	// memory job); GPUs are the UUIDs it holds.
	GPUsRequested int
	GPUs          []string
	Image         string
	Command       []string
	// EnvKeys are the names of the job's environment variables. The
	// ledger never keeps their values.
	EnvKeys []string
	// Request is the rest of what was submitted; nil when the store has
	// none it can read (a damaged row), which the launcher refuses to
	// start.
	Request     *Request
	TimeLimit   time.Duration
	SubmittedAt time.Time // set by the store's SubmitJob when zero
	StartedAt   time.Time // zero when unknown
	EndedAt     time.Time // zero when unknown
	ExitCode    *int      // nil when none
	ContainerID string
	Held        bool
	Attempts    int
	Requeues    int
	// Placement is the scheduler's record of where the job was placed
	// and why; nil before it is placed.
	Placement *PlacementRecord
	UpdatedAt time.Time // set by every write
}

// Request is what a job asked for beyond the job's own fields (Name,
// Image, Command, EnvKeys, GPUsRequested and TimeLimit): everything the
// container spec is built from but the environment values, which the
// queue keeps out of the ledger. It is the queue's own type rather than
// spec.Request because that one carries the environment values, and
// because this package imports nothing of ours.
type Request struct {
	// GPUMemory, when not 0, is the memory in bytes the job asks for on
	// one shared GPU instead of whole GPUs.
	GPUMemory uint64
	// Class is the priority class as submitted; "" is normal.
	Class   Class
	Mounts  []string // SRC:DST[:ro|:rw]
	Workdir string
	CPUs    float64
	Memory  uint64 // bytes
	ShmSize uint64 // bytes
	Pids    int
	Publish []string // PORT[:CPORT]
	Labels  []string // K=V
	// Notify lists the job events a notice is sent for: start, end.
	Notify []string
	// Array is the job's place in an array job; nil for a job of its own.
	Array *ArrayTask
	// After are the jobs this one waits for (--after).
	After []Dependency
	// Preemptible jobs may lose their GPUs to jobs that wait for them
	// (--preemptible); they go back to the queue when they do.
	Preemptible bool
	// RequeueFailed puts the job back in the queue when it fails with a
	// non-zero exit (--requeue), within queue.max_requeue.
	RequeueFailed bool
	// RequeueOf is the ended job gpumeter requeue made this one from, and
	// Attempt its number among them (2 the first requeue); "" and 0 for
	// a job submitted afresh.
	RequeueOf string
	Attempt   int
	// Node is the --node constraint as submitted: a node's name or a
	// glob on the names (see ValidNodeGlob); "" is any node.
	Node string
	// Model is the --model constraint: a glob on the GPUs' model names;
	// "" is any model.
	Model string
}

// ParseStates reads a list of states given repeated or comma-separated,
// as ?state= and --state take them, without repeats.
func ParseStates(values []string) ([]State, error) {
	var out []State
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				return nil, errors.New("an empty state; name states such as queued,running")
			}
			st, err := ParseState(s)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(out, st) {
				out = append(out, st)
			}
		}
	}
	return out, nil
}

// StateNames returns the names of states, as a filter or a query string
// gives them.
func StateNames(states []State) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

// EndedStates returns the states a job never leaves, in the order of a
// job's life.
func EndedStates() []State {
	var out []State
	for _, s := range states {
		if s.Ended() {
			out = append(out, s)
		}
	}
	return out
}
