// Package container describes a container as the inventory knows it: its
// identity, owner, GPU request and resource counters. Inventories (Docker,
// the simulator) fill it; the sampler and sinks read it.
package container

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// ErrNotFound is wrapped by the error of an action on a container that
// its runtime does not know, or no longer knows.
var ErrNotFound = errors.New("container not found")

// ErrNotConnected is an inventory's answer before its first connection
// to the runtime has been tried to the end: no failure yet, and nothing
// worth a warning.
var ErrNotConnected = errors.New("not connected yet")

// JobLabel is the label that names the queue job a container runs
// (j-000123). The queue sets it on every job container; the report, the
// exporter and ps read it, so it is defined down here where all of them
// can.
const JobLabel = "gpumeter.job"

// JobID is the queue job c runs, or "" when c is not a job's container.
// The id is its node's: Job says whose.
func (c *Container) JobID() string { return c.Labels[JobLabel] }

// NodeLabel is the label that names the node whose queue made a job's
// container (queue/spec sets it): on an engine two agents share, a job
// id is its node's, and reports key a job by both.
const NodeLabel = "gpumeter.node"

// JobRef names a queue job: the node whose queue made it and its id
// there. The same id on two nodes is two jobs.
type JobRef struct {
	Node, ID string
}

// JobOf is the queue job a container with these labels runs, as node
// here sees it: its gpumeter.job label, and the node of its
// gpumeter.node label, here when that is missing. The zero JobRef when
// the container runs no job.
func JobOf(labels map[string]string, here string) JobRef {
	id := labels[JobLabel]
	if id == "" {
		return JobRef{}
	}
	node := labels[NodeLabel]
	if node == "" {
		node = here
	}
	return JobRef{Node: node, ID: id}
}

// Job is the queue job c runs, as node here sees it (see JobOf).
func (c *Container) Job(here string) JobRef { return JobOf(c.Labels, here) }

// Ours says whether j is a job of node here's own queue.
func (j JobRef) Ours(here string) bool { return j.ID != "" && j.Node == here }

// On is how node here names j: its id for a job of its own, node/id for
// another node's (a container labelled with another node's job is that
// node's, never one of ours with the same id); "" for no job.
func (j JobRef) On(here string) string {
	if j.ID == "" || j.Node == here {
		return j.ID
	}
	return j.Node + "/" + j.ID
}

// Container is one container on the node.
type Container struct {
	ID      string // full ID
	Name    string // without the leading slash
	Image   string
	Labels  map[string]string
	User    string
	Team    string
	Project string
	Running bool
	// PID is the host PID of the container's main process; 0 when unknown.
	PID       int
	StartedAt time.Time
	// FinishedAt and ExitCode are set once the container has stopped.
	FinishedAt time.Time
	ExitCode   int
	GPUs       GPURequest

	// CPUSeconds is the container's CPU time counter (user+system) and
	// MemoryBytes its resident memory, both read from its cgroup.
	CPUSeconds  float64
	MemoryBytes uint64
	// StatsErr says why CPUSeconds and MemoryBytes could not be read.
	StatsErr string
}

// ShortID is the 12-character form of the ID that docker ps shows.
func (c *Container) ShortID() string { return ShortID(c.ID) }

// ShortID is the 12-character form of a container ID that docker ps
// shows; an ID that short or shorter is returned as it is.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// GPURequest is the set of GPUs a container was given: all of them, or a
// list of indexes, UUIDs or MIG device UUIDs.
type GPURequest struct {
	All bool
	IDs []string
}

// Empty reports whether the request names no GPU.
func (r GPURequest) Empty() bool { return !r.All && len(r.IDs) == 0 }

// Holds reports whether the request covers the GPU with this index and UUID.
// UUIDs compare without case; MIG device UUIDs that belong to the GPU count
// as the GPU when migUUIDs lists them.
func (r GPURequest) Holds(index int, uuid string, migUUIDs ...string) bool {
	if r.All {
		return true
	}
	idx := strconv.Itoa(index)
	for _, id := range r.IDs {
		if id == idx || (uuid != "" && strings.EqualFold(id, uuid)) {
			return true
		}
		for _, m := range migUUIDs {
			if strings.EqualFold(id, m) {
				return true
			}
		}
	}
	return false
}

// String renders the request the way --gpus takes it.
func (r GPURequest) String() string {
	if r.All {
		return "all"
	}
	return strings.Join(r.IDs, ",")
}

// OwnerKind says what kind of thing owns GPU work.
type OwnerKind uint8

// Owner kinds.
const (
	// OwnerNone is work nobody could be found for.
	OwnerNone OwnerKind = iota
	// OwnerContainer is a container; Owner.ID is its full container ID.
	OwnerContainer
	// OwnerHost is a process outside any container; Owner.ID is the Unix
	// user name (or the numeric uid when the name is unknown).
	OwnerHost
)

func (k OwnerKind) String() string {
	switch k {
	case OwnerContainer:
		return "container"
	case OwnerHost:
		return "host"
	default:
		return "none"
	}
}

// Owner is whoever a GPU process is attributed to.
type Owner struct {
	Kind OwnerKind
	ID   string
}
