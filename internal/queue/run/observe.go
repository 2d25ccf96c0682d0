// What the queue sees of one tick: the GPUs, and the use of them outside
// the queue.

package run

import (
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// ObservationOf is what the queue sees of tick t, but for Util, which the
// caller reads over the placement window. A container labelled as one of
// this node's jobs (container.JobOf, of the tick's node) is the queue's
// own; every other running container that holds GPUs, another node's
// job's among them, and every process that is not one of its jobs', is
// outside use. JobMemory is, by job id, the GPU memory the processes of
// each job's container hold (the queue's memory contract is checked
// against it).
func ObservationOf(t *sampler.Tick) Observation {
	out := queue.Outside{MemoryUsed: map[string]uint64{}}
	jobMemory := map[string]uint64{}
	if t == nil || t.Tick == nil {
		return Observation{Outside: out, JobMemory: jobMemory}
	}
	gpus := make([]queue.GPU, 0, len(t.Sample.Devices))
	for _, d := range t.Sample.Devices {
		gpus = append(gpus, queue.GPU{UUID: d.UUID, Index: d.Index, MemoryTotal: d.MemoryTotal, Model: d.Model,
			NVLink: d.Topology.NVLink, PCIeSwitch: d.Topology.PCIeSwitch})
	}
	jobs := map[string]string{} // container id -> job id
	for i := range t.Containers {
		c := &t.Containers[i].Container
		if j := c.Job(t.Node); j.Ours(t.Node) {
			jobs[c.ID] = j.ID
			continue
		}
		if !c.Running || c.GPUs.Empty() {
			continue
		}
		oc := queue.OutsideContainer{Name: c.Name, User: c.User}
		for _, d := range t.Sample.Devices {
			if c.GPUs.Holds(d.Index, d.UUID, migUUIDs(d.MIG)...) {
				oc.GPUs = append(oc.GPUs, d.UUID)
			}
		}
		if len(oc.GPUs) > 0 {
			out.Containers = append(out.Containers, oc)
		}
	}
	for i, d := range t.Sample.Devices {
		if d.Err != nil {
			continue
		}
		for j, p := range d.Processes {
			if i < len(t.Owners) && j < len(t.Owners[i]) {
				o := t.Owners[i][j]
				if id, ok := jobs[o.ID]; ok && o.Kind == container.OwnerContainer {
					jobMemory[id] += p.MemoryUsed
					continue
				}
			}
			out.MemoryUsed[d.UUID] += p.MemoryUsed
		}
	}
	return Observation{GPUs: gpus, Outside: out, JobMemory: jobMemory}
}

// migUUIDs are the UUIDs of a GPU's MIG instances, which a container's
// GPU request may name instead of the GPU's own.
func migUUIDs(mig []gpu.MIGInstance) []string {
	var ids []string
	for _, m := range mig {
		ids = append(ids, m.UUID)
	}
	return ids
}
