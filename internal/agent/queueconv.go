// The queue's view of the host: the settings turned into the allowlist
// and the scheduler's config, and each tick turned into the GPUs and the
// use outside the queue.

package agent

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// queueRules turns queue.* into the allowlist and the scheduler's
// settings for node: queue.network isolated becomes the node's own
// network, spec.NetworkName(node), which the agent makes before the queue
// starts. config has validated the values; what fails here is a port
// range config let through, named with its key.
func queueRules(q config.Queue, node, userLabel, teamLabel string) (spec.Rules, queue.Config, error) {
	rules := spec.Rules{
		Images:          q.Images,
		MountRoots:      q.MountRoots,
		MaxGPUs:         q.MaxGPUs,
		MaxCPUs:         q.MaxCPUs,
		MaxMemory:       q.MaxMemory,
		MaxShmSize:      q.MaxShmSize,
		MaxPids:         q.MaxPids,
		MaxOpenFiles:    q.MaxOpenFiles,
		MaxTimeLimit:    q.MaxTimeLimit,
		MinTimeLimit:    q.MinTimeLimit,
		PublishAddress:  q.PublishAddress,
		Network:         q.Network,
		CapAdd:          q.CapAdd,
		RunAsRootImages: q.RunAsRootImages,
		Labels:          q.Labels,
		UserLabel:       userLabel,
		TeamLabel:       teamLabel,
	}
	// runc cannot give a job more open files than the engine beside the
	// agent may have: a higher limit would fail every start.
	rules.MaxOpenFiles = spec.OpenFilesFor(q.MaxOpenFiles)
	if q.Network == config.NetworkIsolated {
		rules.Network = spec.NetworkName(node)
	}
	if n := float64(runtime.NumCPU()); rules.MaxCPUs > n {
		// A job that names no CPUs gets queue.max_cpus, and Docker
		// refuses a limit over the host's CPUs.
		rules.MaxCPUs = n
	}
	for _, s := range q.PublishPorts {
		r, err := portRange(s)
		if err != nil {
			return spec.Rules{}, queue.Config{}, fmt.Errorf("queue.publish_ports: %w", err)
		}
		rules.PublishPorts = append(rules.PublishPorts, r)
	}
	if err := rules.Validate(); err != nil {
		return spec.Rules{}, queue.Config{}, err
	}
	placement, err := queue.ParsePlacement(q.Placement)
	if err != nil {
		return spec.Rules{}, queue.Config{}, fmt.Errorf("queue.placement: %w", err)
	}
	sched := queue.Config{
		Placement:              placement,
		MaxGPUsPerUser:         queue.DefaultMaxGPUsPerUser,
		OutsideMemoryThreshold: q.OutsideMemoryThreshold,
	}
	sched.Weights = queue.Weights{FairShare: q.Priority.Weights.FairShare, Age: q.Priority.Weights.Age, Class: q.Priority.Weights.Class}
	sched.AgeMax = q.Priority.AgeMax
	sched.SharedMemoryFraction = q.SharedMemoryFraction
	sched.TargetUtilization = q.TargetUtilization
	// The shared GPUs may be named by index or as all: the queue
	// resolves them against the GPUs it sees.
	sched.SharedGPUs = q.SharedGPUs
	for team, n := range q.MaxGPUsPerTeam {
		if team == "default" {
			sched.MaxGPUsPerTeam = n
			continue
		}
		if sched.TeamMaxGPUs == nil {
			sched.TeamMaxGPUs = map[string]int{}
		}
		sched.TeamMaxGPUs[team] = n
	}
	for user, n := range q.MaxGPUsPerUser {
		if user == "default" {
			sched.MaxGPUsPerUser = n
			continue
		}
		if sched.UserMaxGPUs == nil {
			sched.UserMaxGPUs = map[string]int{}
		}
		sched.UserMaxGPUs[user] = n
	}
	return rules, sched, nil
}

// portRange reads "8000-8099" or "8888".
func portRange(s string) (spec.PortRange, error) {
	first, last, isRange := strings.Cut(strings.TrimSpace(s), "-")
	if !isRange {
		last = first
	}
	a, errA := strconv.ParseUint(strings.TrimSpace(first), 10, 16)
	b, errB := strconv.ParseUint(strings.TrimSpace(last), 10, 16)
	if errA != nil || errB != nil || a == 0 || b < a {
		return spec.PortRange{}, fmt.Errorf("%q is not a port or a range of ports such as 8000-8099", s)
	}
	return spec.PortRange{First: uint16(a), Last: uint16(b)}, nil
}

// queueView is what the queue sees of one tick: the GPUs, and the use of
// them outside the queue. A container labelled as a job is the queue's
// own; every other running container that holds GPUs, and every process
// that is not a job's, is outside use.
// jobMemory is, by job id, the GPU memory the processes of each job's
// container hold (the queue's memory contract is checked against it).
func queueView(t *sampler.Tick, jobLabel string) (gpus []queue.GPU, out queue.Outside, jobMemory map[string]uint64) {
	out = queue.Outside{MemoryUsed: map[string]uint64{}}
	jobMemory = map[string]uint64{}
	if t == nil || t.Tick == nil {
		return nil, out, jobMemory
	}
	gpus = make([]queue.GPU, 0, len(t.Sample.Devices))
	for _, d := range t.Sample.Devices {
		gpus = append(gpus, queue.GPU{UUID: d.UUID, Index: d.Index, MemoryTotal: d.MemoryTotal,
			NVLink: d.Topology.NVLink, PCIeSwitch: d.Topology.PCIeSwitch})
	}
	jobs := map[string]string{} // container id -> job id
	for i := range t.Containers {
		c := &t.Containers[i].Container
		if id, ok := c.Labels[jobLabel]; ok {
			jobs[c.ID] = id
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
	return gpus, out, jobMemory
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

// exemptKeys are the label keys of policy.exempt.labels (key=value or
// key), which a job may not set on its own container.
func exemptKeys(labels []string) []string {
	out := make([]string, 0, len(labels))
	for _, l := range labels {
		k, _, _ := strings.Cut(l, "=")
		out = append(out, k)
	}
	return out
}
