package exporter

import (
	"slices"
	"strconv"
)

// QueueStats are the GPU queue's figures at a scrape.
type QueueStats struct {
	// Jobs counts the jobs in each state. Every state should be there,
	// with 0 where no job is in it, so that a state's series does not
	// vanish when its last job leaves it.
	Jobs map[string]int
	// GPUsHeld are held by queue jobs; GPUsFree could start one now;
	// GPUsOutside are kept out of the queue by a container or process
	// outside it.
	GPUsHeld, GPUsFree, GPUsOutside int
	// The wait histogram: from submission to start, of the jobs that
	// started. WaitCounts[i] counts the waits of at most WaitBounds[i]
	// seconds (cumulative, as Prometheus' buckets are); WaitCount counts
	// all of them (the +Inf bucket) and WaitSum adds them up. Bounds
	// increase; the two slices are as long as each other.
	WaitBounds []float64
	WaitCounts []uint64
	WaitSum    float64
	WaitCount  uint64
	// StartSteps are a histogram per step of a job's start (from the
	// death of the container that freed its GPUs to the engine's answer
	// to start), each as the wait histogram is.
	StartSteps []StepHistogram
	// Fleet is the agent's part in a fleet (queue.fleet); nil on one
	// node, which serves no gpumeter_fleet_* series.
	Fleet *FleetStats
}

// FleetStats are a fleet agent's figures.
type FleetStats struct {
	// Leader is set while the agent holds the scheduler lease.
	Leader bool
	// Nodes counts the fleet's nodes by state (up, draining, lost) as
	// the scheduler's last pass read them; only the scheduler serves
	// them, so that a sum over agents counts each node once.
	Nodes map[string]int
	// PassSum and PassCount add up the scheduler's passes: seconds, and
	// how many.
	PassSum   float64
	PassCount uint64
}

// StepHistogram is one start step's histogram: Counts as WaitCounts.
type StepHistogram struct {
	Step   string
	Bounds []float64
	Counts []uint64
	Sum    float64
	Count  uint64
}

var (
	famQueueJobs   = family{"gpumeter_queue_jobs", "Jobs of the GPU queue in each state (queued, starting, running and the ended ones).", "gauge"}
	famQueueWait   = family{"gpumeter_queue_wait_seconds", "How long jobs of the GPU queue waited from submission to start.", "histogram"}
	famQueueStep   = family{"gpumeter_queue_start_step_seconds", "How long each step of a queue job's start took, from the death of the container that freed its GPUs to the engine's answer to start.", "histogram"}
	famFleetNodes  = family{"gpumeter_fleet_nodes", "The fleet's nodes by state (up, draining, lost), from the scheduler's last pass; served by the agent that holds the scheduler lease.", "gauge"}
	famFleetLeader = family{"gpumeter_fleet_scheduler_leader", "1 while this agent holds the fleet's scheduler lease, else 0.", "gauge"}
	famFleetPass   = family{"gpumeter_fleet_pass_seconds", "Seconds the fleet's scheduling passes took on this agent while it held the scheduler lease.", "summary"}
	famQueueGPUs   = family{"gpumeter_queue_gpus", "GPUs by what the queue may do with them: held by a job, free to start one, or kept out by use outside the queue.", "gauge"}
)

// RenderQueue appends the queue's metrics, labelled with the node, in the
// text exposition format to b. States come out sorted, so the same
// figures always render the same bytes.
func RenderQueue(b []byte, node string, q QueueStats) []byte {
	w := writer{b: b}
	w.family(famQueueJobs)
	states := make([]string, 0, len(q.Jobs))
	for s := range q.Jobs {
		states = append(states, s)
	}
	slices.Sort(states)
	for _, s := range states {
		w.sample(famQueueJobs.name, w.labels(nil, "Hostname", node, "state", s), float64(q.Jobs[s]))
	}

	w.family(famQueueWait)
	bucket := famQueueWait.name + "_bucket"
	for i := range min(len(q.WaitBounds), len(q.WaitCounts)) {
		le := strconv.FormatFloat(q.WaitBounds[i], 'g', -1, 64)
		w.sample(bucket, w.labels(nil, "Hostname", node, "le", le), float64(q.WaitCounts[i]))
	}
	nodeLabel := w.labels(nil, "Hostname", node)
	w.sample(bucket, w.labels(nil, "Hostname", node, "le", "+Inf"), float64(q.WaitCount))
	w.sample(famQueueWait.name+"_sum", nodeLabel, q.WaitSum)
	w.sample(famQueueWait.name+"_count", nodeLabel, float64(q.WaitCount))

	if len(q.StartSteps) > 0 {
		w.family(famQueueStep)
		for _, h := range q.StartSteps {
			bucket := famQueueStep.name + "_bucket"
			for i := range min(len(h.Bounds), len(h.Counts)) {
				le := strconv.FormatFloat(h.Bounds[i], 'g', -1, 64)
				w.sample(bucket, w.labels(nil, "Hostname", node, "step", h.Step, "le", le), float64(h.Counts[i]))
			}
			w.sample(bucket, w.labels(nil, "Hostname", node, "step", h.Step, "le", "+Inf"), float64(h.Count))
			stepLabel := w.labels(nil, "Hostname", node, "step", h.Step)
			w.sample(famQueueStep.name+"_sum", stepLabel, h.Sum)
			w.sample(famQueueStep.name+"_count", stepLabel, float64(h.Count))
		}
	}

	w.family(famQueueGPUs)
	for _, g := range []struct {
		state string
		n     int
	}{{"free", q.GPUsFree}, {"held", q.GPUsHeld}, {"outside", q.GPUsOutside}} {
		w.sample(famQueueGPUs.name, w.labels(nil, "Hostname", node, "state", g.state), float64(g.n))
	}
	if f := q.Fleet; f != nil {
		w.family(famFleetLeader)
		leader := 0.0
		if f.Leader {
			leader = 1
		}
		w.sample(famFleetLeader.name, nodeLabel, leader)
		w.family(famFleetPass)
		w.sample(famFleetPass.name+"_sum", nodeLabel, f.PassSum)
		w.sample(famFleetPass.name+"_count", nodeLabel, float64(f.PassCount))
		if f.Leader {
			w.family(famFleetNodes)
			for _, st := range []string{"draining", "lost", "up"} {
				w.sample(famFleetNodes.name, w.labels(nil, "Hostname", node, "state", st), float64(f.Nodes[st]))
			}
		}
	}
	return w.b
}
