package web

import "time"

// Jobs is the page at /jobs: the queue as the reader may see it.
type Jobs struct {
	Frame
	// Note says why there is no queue to show (it is off); the rest is
	// then empty.
	Note string
	// Everyone says the list holds every user's jobs, not only the
	// reader's.
	Everyone bool
	// States are the states the list is filtered to, none for every
	// live one; All includes the ended jobs.
	States []string
	All    bool
	// Filters are the links that change the filter, the current one
	// marked.
	Filters []NavItem
	// Fleet says the agent is in a fleet: each job runs on a node,
	// which the list shows.
	Fleet bool
	Jobs  []JobRow
}

// JobRow is one job.
type JobRow struct {
	ID, Name, User, Team, State string
	// Node is where the job runs or ran in a fleet; "" while it waits.
	Node               string
	Held               bool
	Reason, ReasonText string
	GPUsRequested      int
	GPUMemory          uint64 // bytes on one shared GPU; 0 for whole GPUs
	// GPUs are the GPUs the job holds, by index; the UUID is in the
	// title.
	GPUs                      []JobGPU
	Image                     string
	Command                   []string
	TimeLimit, Class          string
	Submitted, Started, Ended *time.Time
	Estimated                 *time.Time
	// Position is the job's place among the queued, 1 first; 0 when it
	// has none.
	Position int
	ExitCode *int
	// Buttons are what the reader may do with the job now.
	Buttons []Button
	// Use is how many of its GPUs the job computed on, where it held
	// more than one and the ledger has its minutes; nil otherwise.
	Use         *GPUUseHint
	containerID string
}

// JobGPU is a GPU a job holds: its name on this node ("GPU 3") and its
// UUID. A GPU the last tick does not know is named by its UUID.
type JobGPU struct {
	Name, UUID string
}

// GPUUseHint is a job's "used 1 of its 4 GPUs".
type GPUUseHint struct{ Used, Held int }
