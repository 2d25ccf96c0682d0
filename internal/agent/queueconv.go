// The queue's view of the host: the settings turned into the allowlist
// and the scheduler's config.

package agent

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
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
	sched.PreemptAfter = q.PreemptAfter
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
