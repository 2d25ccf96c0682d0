package queue

import (
	"strconv"
	"time"
)

// The fleet's nodes as people see them (gpumeter nodes, the console's
// Nodes page): what run.Nodes reads from the ledger, in the shape every
// view shares.

// NodeState is what a registered node of the fleet is to the scheduler.
type NodeState string

// The states of a node.
const (
	// NodeUp: its agent holds its ledger lease, and jobs may start there.
	NodeUp NodeState = "up"
	// NodeDraining: an admin drained it; its running jobs finish, no new
	// one starts there.
	NodeDraining NodeState = "draining"
	// NodeLost: its lease may be taken over (its agent has been silent
	// for longer than ledger.lease_takeover, or let the lease go).
	NodeLost NodeState = "lost"
)

// GPUState is what a node's GPU is to the queue.
type GPUState string

// The states of a node's GPU.
const (
	GPUFree GPUState = "free"
	// GPUHeld: a job holds it (an allocation, or a memory job on a
	// shared GPU).
	GPUHeld GPUState = "held"
	// GPUOutside: a container outside the queue holds it, or processes
	// outside the queue use more than the threshold of its memory.
	GPUOutside GPUState = "outside"
)

// NodeView is one registered node as `gpumeter nodes` shows it.
type NodeView struct {
	Node  string
	State NodeState
	// LeaseAge is the time since its ledger lease's heartbeat, by the
	// store's clock.
	LeaseAge     time.Duration
	AgentVersion string
	// API is the base URL other agents reach the node's agent at
	// (queue.fleet_api there); "" when it serves none.
	API string
	// SMUtil is the mean of its GPUs' measured SM utilisation (0..1) when
	// its agent last registered; 0 for a node without GPUs.
	SMUtil float64
	// Score is the node score 100 × (1 − |SMUtil − target|).
	Score float64
	GPUs  []NodeGPUView
}

// NodeGPUView is one GPU of a node.
type NodeGPUView struct {
	UUID        string
	Index       int
	Model       string
	MemoryBytes uint64
	State       GPUState
	// Job is the job that holds it when it is held; for a shared GPU,
	// the first of its memory jobs.
	Job string
}

// NodeNotFound is the sentence for a node the ledger has no registration
// of.
func NodeNotFound(node string) string {
	return "node " + strconv.Quote(node) + " is not in the fleet: `gpumeter nodes` lists the nodes that registered"
}
