package queue

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Defaults of the scheduler's settings, used where Config leaves a field
// at its zero value.
const (
	// DefaultMaxGPUsPerUser is queue.max_gpus_per_user's default.
	DefaultMaxGPUsPerUser = 4
	// DefaultOutsideMemoryThreshold is queue.outside_memory_threshold's
	// default: a GPU with more than 5% of its memory used by processes
	// outside the queue is not free.
	DefaultOutsideMemoryThreshold = 0.05
)

// Placement says which free GPUs a job is given.
type Placement string

// The placements.
const (
	// Binpack (the default) fills GPUs next to busy ones first, lowest
	// index first, so that whole free blocks stay for multi-GPU jobs.
	Binpack Placement = "binpack"
	// Spread takes GPUs away from busy ones first, lowest index first,
	// so that jobs share as little as possible (PCIe, power, heat).
	Spread Placement = "spread"
)

// ParsePlacement returns the placement named s ("" is Binpack), or an
// error naming the placements.
func ParsePlacement(s string) (Placement, error) {
	switch Placement(s) {
	case "", Binpack:
		return Binpack, nil
	case Spread:
		return Spread, nil
	}
	return "", fmt.Errorf("unknown placement %q (placements: binpack, spread)", s)
}

// QueuedJob is a job in state queued.
type QueuedJob struct {
	// ID is the job's id, such as j-000123; it breaks ties of SubmittedAt.
	ID string
	// User and Team are the submitter's.
	User, Team string
	// GPUs is the number of whole GPUs the job asks for.
	GPUs int
	// SubmittedAt orders the queue (first submitted, first served).
	SubmittedAt time.Time
	// Held jobs keep their place and do not start.
	Held bool
}

// RunningJob is a job that holds GPUs: starting or running.
type RunningJob struct {
	// ID is the job's id.
	ID string
	// User is the submitter; the job's GPUs count against their cap.
	User string
	// GPUs are the UUIDs of the GPUs the job holds.
	GPUs []string
	// StartedAt is when the job started (or began starting).
	StartedAt time.Time
	// TimeLimit is the job's time limit; 0 means none is known.
	TimeLimit time.Duration
}

// GPU is one GPU of the host.
type GPU struct {
	// UUID names the GPU; jobs are placed by UUID.
	UUID string
	// Index is NVML's index, which people see and placement orders by.
	Index int
	// MemoryTotal is the GPU's memory in bytes.
	MemoryTotal uint64
	// NVLink are the UUIDs of the GPUs this one reaches over NVLink
	// (directly or through an NVSwitch); nil when unknown. A link named by
	// either end counts for both.
	NVLink []string
	// PCIeSwitch names the PCIe switch the GPU sits under: GPUs with the
	// same non-empty name share it. "" when unknown.
	PCIeSwitch string
}

// Equal reports whether g and h are the same GPU with the same topology
// (GPU is not comparable with ==: it holds a slice).
func (g GPU) Equal(h GPU) bool {
	return g.UUID == h.UUID && g.Index == h.Index && g.MemoryTotal == h.MemoryTotal &&
		g.PCIeSwitch == h.PCIeSwitch && slices.Equal(g.NVLink, h.NVLink)
}

// OutsideContainer is a running container outside the queue that holds
// GPUs (from the Docker inventory's GPU assignment).
type OutsideContainer struct {
	// Name is the container's name, as people know it.
	Name string
	// User is who the container is attributed to; "" when unknown.
	User string
	// GPUs are the UUIDs of the GPUs assigned to it.
	GPUs []string
}

// Outside is the use of GPUs outside the queue.
type Outside struct {
	// Containers are the running containers outside the queue that hold
	// GPUs.
	Containers []OutsideContainer
	// MemoryUsed is, by GPU UUID, the memory in bytes used by processes
	// outside the queue (from the live tick), summed over the processes.
	MemoryUsed map[string]uint64
}

// Config is the scheduler's part of queue.* settings.
type Config struct {
	// Placement is binpack or spread; "" and anything else is binpack
	// (ParsePlacement refuses unknown names when the config is read).
	Placement Placement
	// MaxGPUsPerUser caps the GPUs one user's jobs hold at once; 0 means
	// DefaultMaxGPUsPerUser.
	MaxGPUsPerUser int
	// UserMaxGPUs overrides MaxGPUsPerUser for the users it names (a 0
	// there means that user's jobs do not start).
	UserMaxGPUs map[string]int
	// OutsideMemoryThreshold is the fraction of a GPU's memory that
	// processes outside the queue may use before the GPU is not free; 0
	// means DefaultOutsideMemoryThreshold.
	OutsideMemoryThreshold float64
}

// Input is everything one scheduling pass looks at.
type Input struct {
	// Queued are the jobs in state queued, in any order.
	Queued []QueuedJob
	// Running are the jobs that hold GPUs.
	Running []RunningJob
	// GPUs are the host's GPUs, in any order.
	GPUs []GPU
	// Outside is the use of the GPUs outside the queue.
	Outside Outside
	// Config holds the settings.
	Config Config
	// Now is the time of the pass; the scheduler reads no clock.
	Now time.Time
}

// Start is a decision to start a job on GPUs, all of them or none.
type Start struct {
	// JobID is the job to start.
	JobID string
	// GPUs are the UUIDs of the GPUs to give it, in placement order.
	GPUs []string
}

// Wait says why a queued job does not start in this pass.
type Wait struct {
	// JobID is the waiting job.
	JobID string
	// Reason is its reason code.
	Reason Reason
	// Text says the same to a person, with the figures that matter.
	Text string
}

// Plan is the outcome of a pass: the jobs to start and, for every other
// queued job, why it waits. Both are in queue order.
type Plan struct {
	// Starts are the jobs to start now.
	Starts []Start
	// Waits are the jobs that still wait, with their reasons.
	Waits []Wait
}

// heldText is the sentence of every held job.
const heldText = "held: it keeps its place in the queue and starts once released"

// Schedule makes one scheduling pass. The rules:
//
//   - Order: first submitted, first served (ties by job id).
//   - A held job keeps its place and does not start (held); it holds up no
//     one.
//   - A job whose start would take its user past the cap waits
//     (user_gpu_limit); it holds up no one.
//   - A job that asks for more GPUs than the host has waits (too_big); it
//     holds up no one.
//   - Strict FIFO otherwise: the first job that cannot get its GPUs waits
//     (resources, or outside_use when use outside the queue is what keeps
//     it out), and every later job that is not held or capped waits
//     behind it (resources), so that a big job is never starved by small
//     ones. Backfill comes with the next issue.
//   - A GPU is free when no job holds it, no container outside the queue
//     holds it, and processes outside the queue use no more than the
//     threshold of its memory.
//   - Placement is all or nothing, binpack or spread (see Placement), and
//     the same input always gives the same plan.
//   - Topology, where the GPUs carry it: a job of two or more GPUs gets
//     GPUs that all share NVLink with each other if such a set is free,
//     else GPUs under one PCIe switch, else the plain choice; binpack and
//     spread then count a GPU's topology peers instead of its neighbours
//     by index (see scoreGPU).
func Schedule(in Input) Plan {
	cfg := in.Config
	gs := filterGPUs(in)
	used := userGPUs(in.Running)
	order := queueOrder(in.Queued)

	plan := Plan{Starts: make([]Start, 0, min(len(order), len(gs))), Waits: make([]Wait, 0, len(order))}
	var blockedText string // set once a job waits for GPUs: later jobs wait behind it
	capTexts := map[capKey]string{}
	for _, j := range order {
		switch {
		case j.Held:
			plan.Waits = append(plan.Waits, Wait{j.ID, ReasonHeld, heldText})
			continue
		case j.GPUs < 1:
			plan.Waits = append(plan.Waits, Wait{j.ID, ReasonInvalidRequest,
				fmt.Sprintf("asks for %d GPUs; a job needs at least 1", j.GPUs)})
			continue
		case j.GPUs > len(gs):
			plan.Waits = append(plan.Waits, Wait{j.ID, ReasonTooBig,
				fmt.Sprintf("asks for %d GPUs; this host has %d", j.GPUs, len(gs))})
			continue
		}
		limit := cfg.userLimit(j.User)
		if have := used[j.User]; have+j.GPUs > limit {
			k := capKey{j.User, have, j.GPUs, limit}
			text, ok := capTexts[k]
			if !ok {
				text = capText(k)
				capTexts[k] = text
			}
			plan.Waits = append(plan.Waits, Wait{j.ID, ReasonUserGPULimit, text})
			continue
		}
		if blockedText != "" {
			plan.Waits = append(plan.Waits, Wait{j.ID, ReasonResources, blockedText})
			continue
		}
		picks := pickGPUs(cfg.Placement, gs, j.GPUs)
		if picks == nil {
			reason, text := waitText(j.GPUs, gs, in.Running, in.Now, cfg.threshold())
			plan.Waits = append(plan.Waits, Wait{j.ID, reason, text})
			blockedText = fmt.Sprintf("waiting behind %s (%s), first in the queue, which waits for %s", j.ID, j.User, gpusText(j.GPUs))
			continue
		}
		plan.Starts = append(plan.Starts, bind(gs, picks, j.ID))
		used[j.User] += j.GPUs
	}
	return plan
}

// userLimit returns the cap on the GPUs user's jobs may hold.
func (c Config) userLimit(user string) int {
	if n, ok := c.UserMaxGPUs[user]; ok {
		return n
	}
	if c.MaxGPUsPerUser > 0 {
		return c.MaxGPUsPerUser
	}
	return DefaultMaxGPUsPerUser
}

// threshold returns the outside memory threshold as a fraction.
func (c Config) threshold() float64 {
	if c.OutsideMemoryThreshold > 0 {
		return c.OutsideMemoryThreshold
	}
	return DefaultOutsideMemoryThreshold
}

// queueOrder returns the queued jobs first submitted first, ties by id,
// leaving in untouched.
func queueOrder(in []QueuedJob) []*QueuedJob {
	order := make([]*QueuedJob, len(in))
	for i := range in {
		order[i] = &in[i]
	}
	slices.SortFunc(order, func(a, b *QueuedJob) int {
		if c := a.SubmittedAt.Compare(b.SubmittedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return order
}

// userGPUs counts the GPUs each user's jobs hold.
func userGPUs(running []RunningJob) map[string]int {
	used := make(map[string]int)
	for _, r := range running {
		used[r.User] += len(r.GPUs)
	}
	return used
}

// capKey is what a user_gpu_limit sentence says.
type capKey struct {
	user             string
	have, ask, limit int
}

func capText(k capKey) string {
	if k.ask > k.limit {
		return fmt.Sprintf("asks for %s, more than %s's limit of %d (queue.max_gpus_per_user)", gpusText(k.ask), k.user, k.limit)
	}
	return fmt.Sprintf("%s's jobs hold %d of the %d GPUs queue.max_gpus_per_user allows; this job asks for %d more", k.user, k.have, k.limit, k.ask)
}

// gpusText says "1 free GPU" or "n free GPUs".
func gpusText(n int) string {
	if n == 1 {
		return "1 free GPU"
	}
	return fmt.Sprintf("%d free GPUs", n)
}
