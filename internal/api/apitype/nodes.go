package apitype

// Nodes is the body of GET /api/v1/nodes: every node of the fleet that
// registered in the ledger, by name. It is a contract: fields may be
// added, never changed.
type Nodes struct {
	Nodes []Node `json:"nodes"`
}

// The states of a Node.
const (
	NodeUp       = "up"
	NodeDraining = "draining"
	NodeLost     = "lost"
)

// Node is one node of the fleet.
type Node struct {
	Node string `json:"node"`
	// State is up, draining (an admin drained it: its running jobs
	// finish, no new one starts there) or lost (its ledger lease may be
	// taken over: its agent has been silent for longer than
	// ledger.lease_takeover).
	State string `json:"state"`
	// LeaseAgeSeconds is the time since its ledger lease's heartbeat.
	LeaseAgeSeconds float64 `json:"lease_age_s"`
	AgentVersion    string  `json:"agent_version"`
	// Score is the node score 100 × (1 − |sm_util − queue.target_utilization|).
	Score float64 `json:"score"`
	// SMUtil is the mean of its GPUs' SM utilisation (0..1).
	SMUtil float64   `json:"sm_util"`
	GPUs   []NodeGPU `json:"gpus"`
}

// GPUCounts counts n's GPUs in each state.
func (n Node) GPUCounts() (free, held, outside int) {
	for _, g := range n.GPUs {
		switch g.State {
		case GPUFree:
			free++
		case GPUHeld:
			held++
		case GPUOutside:
			outside++
		}
	}
	return free, held, outside
}

// The states of a NodeGPU.
const (
	GPUFree    = "free"
	GPUHeld    = "held"
	GPUOutside = "outside"
)

// NodeGPU is one GPU of a node.
type NodeGPU struct {
	UUID        string `json:"uuid"`
	Index       int    `json:"index"`
	Model       string `json:"model"`
	MemoryBytes uint64 `json:"memory_bytes"`
	// State is free, held (a job holds it) or outside (a container or
	// processes outside the queue use it).
	State string `json:"state"`
}

// NodeDrain is the answer to POST /api/v1/nodes/{node}/drain and
// /undrain: the node, and whether it is drained now.
type NodeDrain struct {
	Node    string `json:"node"`
	Drained bool   `json:"drained"`
}

// Consolidation is the body of GET /api/v1/nodes/consolidate: for every
// node that is not lost, whether it could be drained now, its running
// jobs fitting on the other nodes at queue.target_utilization. Advice
// only: nothing moves.
type Consolidation struct {
	Advice []ConsolidateAdvice `json:"advice"`
}

// ConsolidateAdvice is the advice on one node.
type ConsolidateAdvice struct {
	Node string `json:"node"`
	// Drain is true when the node could be drained, with every node
	// advised before it.
	Drain bool `json:"drain"`
	// Drained is true for a node drained already.
	Drained bool `json:"drained"`
	// Jobs are the queue's jobs running there; [] when none.
	Jobs []string `json:"jobs"`
	// Moves say where each job would fit, when Drain; [] otherwise.
	Moves []ConsolidateMove `json:"moves"`
	Why   string            `json:"why"`
}

// ConsolidateMove is a running job and the node it would fit on.
type ConsolidateMove struct {
	Job  string `json:"job"`
	Node string `json:"node"`
}
