package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// The fleet: many agents, one per node, sharing one ledger (PostgreSQL)
// and one queue. Each agent registers its node; a node is alive while its
// ledger lease (Lease) is, so there is no second heartbeat. At most one
// agent at a time, the scheduler, holds the fleet's scheduler lease and
// runs the scheduling pass over every node's GPUs; it writes start intents
// under the lease's fencing token, and the node each intent names claims
// it and starts the job. The database refuses a double allocation: an
// allocation row per (node, GPU) that a starting or running job holds
// (whole, or a memory job's share), unique over the whole ones, kept by
// the store in the same transaction as the job's state.

// NodeGPU is one GPU of a node, as its agent registers it.
type NodeGPU struct {
	UUID        string   `json:"uuid"`
	Index       int      `json:"index"`
	Model       string   `json:"model"`
	MemoryBytes uint64   `json:"memory_bytes"`
	NVLink      []string `json:"nvlink,omitempty"`
	PCIeSwitch  string   `json:"pcie_switch,omitempty"`
	// Shared is set for a GPU the node's queue.shared_gpus marks for
	// memory jobs.
	Shared bool `json:"shared,omitempty"`
	// Util is the GPU's measured SM utilisation (0..1) over the
	// placement window when the agent last registered.
	Util float64 `json:"util"`
	// MemoryUsedOutside is the memory processes outside the queue use on
	// it, in bytes; OutsideContainer names a container outside the queue
	// that holds it ("" when none).
	MemoryUsedOutside uint64 `json:"memory_used_outside,omitempty"`
	OutsideContainer  string `json:"outside_container,omitempty"`
}

// NodeInfo is what an agent registers about its node.
type NodeInfo struct {
	Node         string
	AgentVersion string
	GPUs         []NodeGPU
	// Images are the node's queue.images (the images its jobs may use);
	// the scheduler places a job only where its image is allowed.
	Images []string
	// API is the base URL of the node's agent API ("" when it serves
	// none other agents can reach), for proxying a job's logs.
	API string
}

// NodeStatus is a registered node as Nodes reads it.
type NodeStatus struct {
	NodeInfo
	Drained bool
	// Registered is when the node first registered; Updated when its
	// agent last did.
	Registered, Updated time.Time
	// Heartbeat is its ledger lease's heartbeat (for a released lease,
	// when it was released), zero when the node never held one;
	// LeaseAge is the time since it by the store's clock, zero with it.
	Heartbeat time.Time
	LeaseAge  time.Duration
	// Lost is set when the node's lease may be taken over (silent for
	// longer than the takeover time Nodes was given), was released, or
	// was never taken.
	Lost bool
}

// SchedulerLease is the fleet's one scheduler's claim. Token, the fencing
// token, rises every time the lease changes hands; an intent written under
// a token that is no longer the lease's is refused.
type SchedulerLease struct {
	Instance  string // the holding agent's instance (its Lease.Instance)
	Node      string // the holding agent's node
	Token     int64
	Acquired  time.Time
	Heartbeat time.Time // by the store's clock
	// Released is set once the holder gave the lease up: the next
	// AcquireScheduler takes it at once, under a higher token.
	Released bool
}

// Intent is the scheduler's decision to start a queued job on a node's
// GPUs: the job moves from queued to starting with Node, GPUs and
// Placement set, and its allocations are added, in one transaction.
type Intent struct {
	JobID string
	Node  string
	GPUs  []string // UUIDs on Node
	// Shared is set for a memory job on a shared GPU: its allocation is
	// a share, not the GPU whole. The store reads it from the job (a
	// Request with GPUMemory) and refuses an intent that says otherwise.
	Shared    bool
	Placement *queue.PlacementRecord
}

// Fleet is a store that coordinates a fleet. Both backends implement it;
// on SQLite (one host) it serves the same calls for the one node.
type Fleet interface {
	// RegisterNode adds or updates the node's registration; a node's
	// Drained flag and Registered time are kept.
	RegisterNode(ctx context.Context, n NodeInfo) error
	// Nodes returns every registered node, by name, with its lease's
	// state: Lost when the lease is older than takeover or released.
	Nodes(ctx context.Context, takeover time.Duration) ([]NodeStatus, error)
	// SetDrained sets the node's Drained flag and writes audit (when its
	// Kind is set) in one transaction; an unknown node is an error
	// wrapping ErrNodeNotFound.
	SetDrained(ctx context.Context, node string, drained bool, audit audit.Event) error
	// AcquireScheduler takes or renews the scheduler lease for
	// instance. It succeeds when nobody holds it, when instance holds it
	// (a renewal: the token stays), when its holder released it, or when
	// the holder has been silent for longer than takeover (the token
	// rises); otherwise it fails with a *SchedulerHeldError naming the
	// holder.
	AcquireScheduler(ctx context.Context, instance, node string, takeover time.Duration) (SchedulerLease, error)
	// ReleaseScheduler gives the lease up while token is still its.
	ReleaseScheduler(ctx context.Context, token int64) error
	// Scheduler returns the lease as it stands (zero when never taken).
	Scheduler(ctx context.Context) (SchedulerLease, error)
	// WriteIntents writes intents in one transaction under token, with
	// audit (the events whose Kind is set), and renews the lease's
	// heartbeat: all or nothing. It fails with an error wrapping
	// ErrStaleToken when token is no longer the lease's or the lease was
	// released, with a *JobStateError when a job is no longer queued, and
	// with an error wrapping ErrDoubleAllocation when a GPU is held whole
	// already, or is shared by memory jobs and an intent would take it
	// whole.
	WriteIntents(ctx context.Context, token int64, intents []Intent, audit []audit.Event) error
	// ClaimIntents returns the jobs of node's intents that no instance
	// has claimed yet, oldest first, at most limit of them (0: all), and
	// marks them claimed by instance, skipping those another transaction
	// is claiming (FOR UPDATE SKIP LOCKED on PostgreSQL): each intent is
	// returned once.
	ClaimIntents(ctx context.Context, node, instance string, limit int) ([]queue.Job, error)
	// Unclaimed returns the IDs of the jobs of node's intents that no
	// instance has claimed yet: starting jobs without a container that
	// are waiting for their claim, not lost in a start.
	Unclaimed(ctx context.Context, node string) (map[string]bool, error)
	// Listen returns the fleet's wake-ups until ctx ends: each channel
	// receives a value soon after an agent of the fleet committed a
	// change of its kind (see FleetWakes), and once after each
	// reconnection (changes may have been missed). They are hints:
	// callers poll behind them. PostgreSQL's LISTEN/NOTIFY, on a
	// connection of its own; SQLite, which runs no fleet, never sends.
	Listen(ctx context.Context) FleetWakes
	// Allocations returns the active exclusive allocations: (node, GPU
	// UUID) -> job ID.
	Allocations(ctx context.Context) (map[NodeGPUKey]string, error)
	// PublishRanks replaces the fleet's ranking of its queued jobs (the
	// scheduler's last plan, encoded by queue.AppendRanking) under token
	// and returns its new version; it fails with an error wrapping
	// ErrStaleToken when token is no longer the lease's or the lease was
	// released.
	PublishRanks(ctx context.Context, token int64, body []byte) (version int64, err error)
	// Ranks returns the fleet's ranking when its version is newer than
	// since; else Ranks.Body is nil. Version 0 is none published yet.
	Ranks(ctx context.Context, since int64) (Ranks, error)
}

// Ranks is the fleet's ranking of its queued jobs as its scheduler last
// published it, so that every agent's API can say where a queued job
// stands and why it waits.
type Ranks struct {
	Version   int64
	Token     int64 // the scheduler lease's token it was published under
	Published time.Time
	Body      []byte
}

// FleetWakes are the fleet's wake-ups, by who acts on them.
type FleetWakes struct {
	// Queue receives when the queue changed in a way the scheduler may
	// act on: a submission, GPUs freed, a job back in the queue or
	// released, a drain. Only the scheduler's agent passes on it.
	Queue <-chan struct{}
	// Intents receives when start intents were written: every agent
	// looks for its own.
	Intents <-chan struct{}
}

// NodeGPUKey names one GPU of one node.
type NodeGPUKey struct{ Node, UUID string }

// ErrNodeNotFound is wrapped by errors for a node the ledger has no
// registration of.
var ErrNodeNotFound = errors.New("no such node")

// ErrStaleToken is returned by WriteIntents when the scheduler lease
// changed hands since the token was given.
var ErrStaleToken = errors.New("the scheduler lease is held under a newer token")

// ErrDoubleAllocation is wrapped by a write that would give a GPU that a
// job holds whole to another job, or take whole a GPU that memory jobs
// share: WriteIntents, and UpdateJob (or SubmitJob) of a job that starts
// or runs on GPUs. Nothing of such a write is written.
var ErrDoubleAllocation = errors.New("GPU already allocated")

// SchedulerHeldError is returned by AcquireScheduler when another
// instance holds the lease.
type SchedulerHeldError struct {
	Holder SchedulerLease
	Silent time.Duration
}

func (e *SchedulerHeldError) Error() string {
	return fmt.Sprintf("the fleet's scheduler is node %s (instance %s, token %d), last seen %s ago",
		e.Holder.Node, e.Holder.Instance, e.Holder.Token, e.Silent.Round(time.Second))
}
