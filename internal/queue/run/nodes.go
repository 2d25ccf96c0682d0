package run

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// Nodes is the fleet's nodes as the API and the command line show them:
// the ledger's registrations and leases, the active allocations and the
// jobs that hold GPUs, read on every call (nothing is cached: a drain is
// seen at once).
type Nodes struct {
	Fleet ledger.Fleet
	Jobs  ledger.JobStore
	// Takeover is the node lease's takeover time the agent runs with
	// (ledger.lease_takeover, or its default): a node silent for longer
	// is lost.
	Takeover time.Duration
	// Target is queue.target_utilization; 0 is
	// queue.DefaultTargetUtilization.
	Target float64
	// OutsideThreshold is queue.outside_memory_threshold, a fraction of
	// a GPU's memory; 0 is queue.DefaultOutsideMemoryThreshold.
	OutsideThreshold float64
}

// Nodes returns every registered node, by name.
func (n *Nodes) Nodes(ctx context.Context) ([]queue.NodeView, error) {
	statuses, err := n.Fleet.Nodes(ctx, n.Takeover)
	if err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	allocs, err := n.Fleet.Allocations(ctx)
	if err != nil {
		return nil, fmt.Errorf("allocations: %w", err)
	}
	if allocs == nil {
		allocs = map[ledger.NodeGPUKey]string{}
	}
	// A memory job on a shared GPU holds no exclusive allocation: the
	// jobs themselves say which GPUs they hold.
	active, err := n.Jobs.ActiveJobs(ctx, queue.Starting, queue.Running)
	if err != nil {
		return nil, fmt.Errorf("active jobs: %w", err)
	}
	for _, j := range active {
		for _, uuid := range j.GPUs {
			k := ledger.NodeGPUKey{Node: j.Node, UUID: uuid}
			if _, ok := allocs[k]; !ok {
				allocs[k] = j.ID
			}
		}
	}
	target := n.Target
	if target <= 0 {
		target = queue.DefaultTargetUtilization
	}
	threshold := n.OutsideThreshold
	if threshold <= 0 {
		threshold = queue.DefaultOutsideMemoryThreshold
	}
	out := make([]queue.NodeView, 0, len(statuses))
	for _, s := range statuses {
		v := queue.NodeView{Node: s.Node, State: nodeState(s), LeaseAge: s.LeaseAge, AgentVersion: s.AgentVersion, API: s.API, GPUs: []queue.NodeGPUView{}}
		var util float64
		for _, g := range s.GPUs {
			util += g.Util
			gv := queue.NodeGPUView{UUID: g.UUID, Index: g.Index, Model: g.Model, MemoryBytes: g.MemoryBytes, State: queue.GPUFree}
			switch job, held := allocs[ledger.NodeGPUKey{Node: s.Node, UUID: g.UUID}]; {
			case held:
				gv.State, gv.Job = queue.GPUHeld, job
			case g.OutsideContainer != "" || float64(g.MemoryUsedOutside) > threshold*float64(g.MemoryBytes):
				gv.State = queue.GPUOutside
			}
			v.GPUs = append(v.GPUs, gv)
		}
		if len(s.GPUs) > 0 {
			v.SMUtil = util / float64(len(s.GPUs))
		}
		v.Score = 100 * (1 - math.Abs(v.SMUtil-target))
		out = append(out, v)
	}
	return out, nil
}

// nodeState is s's state: lost before draining, since a lost node runs
// nothing whether drained or not.
func nodeState(s ledger.NodeStatus) queue.NodeState {
	switch {
	case s.Lost:
		return queue.NodeLost
	case s.Drained:
		return queue.NodeDraining
	}
	return queue.NodeUp
}

// SetDrained drains node (no new job starts there; its running jobs
// finish) or undrains it, writing ev in the same transaction. An unknown
// node is an error wrapping ledger.ErrNodeNotFound.
func (n *Nodes) SetDrained(ctx context.Context, node string, drained bool, ev audit.Event) error {
	return n.Fleet.SetDrained(ctx, node, drained, ev)
}

// Consolidate says which nodes could be drained now: those whose running
// jobs would all fit on the other nodes at the target utilisation (see
// queue.Consolidate). Lost nodes are left out, as the scheduler leaves
// them out.
func (n *Nodes) Consolidate(ctx context.Context) ([]queue.ConsolidateAdvice, error) {
	statuses, err := n.Fleet.Nodes(ctx, n.Takeover)
	if err != nil {
		return nil, err
	}
	jobs, err := n.Jobs.ActiveJobs(ctx, queue.Starting, queue.Running)
	if err != nil {
		return nil, err
	}
	in := queue.Input{Config: queue.Config{Placement: queue.Target, TargetUtilization: n.Target, OutsideMemoryThreshold: n.OutsideThreshold}}
	lost := fleetInput(statuses, &in)
	for _, j := range jobs {
		if lost[j.Node] {
			continue
		}
		in.Running = append(in.Running, queue.RunningJob{ID: j.ID, User: j.User, Team: j.Team, GPUs: j.GPUs, StartedAt: j.StartedAt,
			TimeLimit: j.TimeLimit, GPUMemory: info(j).memory, Array: arrayOf(j), Node: j.Node,
			NodeGlob: info(j).node, ModelGlob: info(j).model, Image: j.Image})
	}
	return queue.Consolidate(in), nil
}
