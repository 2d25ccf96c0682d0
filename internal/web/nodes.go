package web

// FleetNodes is the page at /nodes: a tile per node of the fleet.
type FleetNodes struct {
	Frame
	// Note says why there are no nodes to show (the agent is not in a
	// fleet); the rest is then empty.
	Note  string
	Nodes []NodeTile
}

// NodeDetail is the page at /nodes/{node}: one node's GPUs and the jobs
// that hold them.
type NodeDetail struct {
	Frame
	Tile NodeTile
}

// NodeTile is one node of the fleet as the pages show it.
type NodeTile struct {
	Name  string
	State string // up, draining or lost
	// LeaseAge is the seconds since its agent last renewed its ledger
	// lease.
	LeaseAge     float64
	AgentVersion string
	Score        float64
	SMUtil       float64 // 0..1
	GPUs         []NodeGPU
	// Free, Held and Outside count its GPUs in each state; Running its
	// jobs that are starting or running.
	Free, Held, Outside, Running int
}

// NodeGPU is one GPU of a node.
type NodeGPU struct {
	Index       int
	UUID, Model string
	MemoryBytes uint64
	State       string // free, held or outside
	// Job is the job that holds it, as the reader may see it; nil when
	// none does.
	Job *NodeJob
}

// NodeJob is a job that holds a node's GPU. A job of another user, to a
// reader who sees only their own, has no ID: it is "another user's job".
type NodeJob struct {
	ID, Name, User string
}
