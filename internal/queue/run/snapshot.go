package run

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/queue"
)

// Observation is what a tick saw of the host: its GPUs and their use
// outside the queue.
type Observation struct {
	GPUs    []queue.GPU
	Outside queue.Outside
	// JobMemory is, by job id, the GPU memory in bytes the processes of
	// the job's container hold, summed over its GPUs: what the memory
	// contract of a job that declared GPU memory is checked against.
	JobMemory map[string]uint64
	// Util is, by GPU UUID, the GPU's mean SM utilisation (0..1) over
	// queue.placement_window, for target placement. A change in it
	// alone does not wake the loop.
	Util map[string]float64
}

// Snapshot is the queue's state for metrics, kept current by the loop.
type Snapshot struct {
	// Jobs counts the jobs in each state; every state is present.
	Jobs map[queue.State]int
	// GPUsHeld are held by jobs, GPUsOutside taken by use outside the
	// queue, GPUsFree neither.
	GPUsHeld, GPUsFree, GPUsOutside int
	// WaitBounds and WaitCounts are a cumulative histogram of the seconds
	// from submit to running; WaitCounts has one more count, for +Inf.
	WaitBounds []float64
	WaitCounts []uint64
	WaitSum    float64
	WaitCount  uint64
	// StartSteps are the histograms of each step of a job's start, from
	// the death that freed its GPUs to the engine's answer to start.
	StartSteps []StepHistogram
	// Fleet is the agent's part in a fleet; nil on one node.
	Fleet *FleetSnapshot
}

// FleetSnapshot is a fleet agent's state for metrics.
type FleetSnapshot struct {
	// Leader is set while the agent holds the scheduler lease.
	Leader bool
	// Nodes counts the fleet's nodes by state (up, draining, lost), as
	// the scheduler's last pass read them; empty on any other agent.
	Nodes map[string]int
	// PassSum and PassCount are the seconds the scheduler's passes
	// took, summed, and how many there were.
	PassSum   float64
	PassCount uint64
}

// waitBounds are the histogram's upper bounds in seconds: a second to a
// day.
var waitBounds = []float64{1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400}

type waitHistogram struct {
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	n      uint64
}

func newWaitHistogram() waitHistogram {
	return waitHistogram{counts: make([]uint64, len(waitBounds)+1)}
}

func (h *waitHistogram) observe(d time.Duration) {
	s := max(d.Seconds(), 0)
	i, _ := slices.BinarySearch(waitBounds, s)
	h.counts[i]++
	h.sum += s
	h.n++
}

// metrics are the launcher's counts for Snapshot: the last pass's jobs
// and GPUs, the wait histogram, and the jobs in ended states, loaded once
// by Run and kept by jobEnded, so that no pass reads every ended job.
type metrics struct {
	mu          sync.Mutex
	snap        Snapshot
	wait        waitHistogram
	endedCounts map[queue.State]int
	steps       stepHistograms
	stepSums    []float64
	fleet       *FleetSnapshot // nil on one node
}

func newMetrics() *metrics {
	return &metrics{snap: emptySnapshot(), wait: newWaitHistogram(), endedCounts: map[queue.State]int{}}
}

// Snapshot returns the queue's state for metrics; it is cheap and never
// waits on the store.
func (q *Queue) Snapshot() Snapshot { return q.metrics.snapshot() }

func (m *metrics) snapshot() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.snap
	s.Jobs = maps.Clone(m.snap.Jobs)
	s.WaitBounds = slices.Clone(waitBounds)
	s.WaitCounts = make([]uint64, len(m.wait.counts))
	var c uint64
	for i, n := range m.wait.counts {
		c += n
		s.WaitCounts[i] = c
	}
	s.WaitSum, s.WaitCount = m.wait.sum, m.wait.n
	s.StartSteps = m.startStepHistograms()
	if m.fleet != nil {
		f := *m.fleet
		f.Nodes = maps.Clone(m.fleet.Nodes)
		s.Fleet = &f
	}
	return s
}

// set keeps a pass's counts, with the ended jobs' added.
func (m *metrics) set(s Snapshot) {
	m.mu.Lock()
	for st, n := range m.endedCounts {
		s.Jobs[st] = n
	}
	m.snap = s
	m.mu.Unlock()
}

// setLeader records whether the agent holds the scheduler lease.
func (m *metrics) setLeader(on bool) {
	m.mu.Lock()
	m.fleetState().Leader = on
	if !on {
		m.fleet.Nodes = map[string]int{}
	}
	m.mu.Unlock()
}

// fleetPass records a scheduler's pass: how long it took and the nodes by
// state.
func (m *metrics) fleetPass(d time.Duration, nodes map[string]int) {
	m.mu.Lock()
	f := m.fleetState()
	f.PassSum += d.Seconds()
	f.PassCount++
	f.Nodes = nodes
	m.mu.Unlock()
}

// fleetState returns the fleet's part, made on first use; the caller
// holds m.mu.
func (m *metrics) fleetState() *FleetSnapshot {
	if m.fleet == nil {
		m.fleet = &FleetSnapshot{Nodes: map[string]int{}}
	}
	return m.fleet
}

// countEnded counts the ended jobs js, loaded once by Run.
func (m *metrics) countEnded(js []queue.Job) {
	m.mu.Lock()
	for _, j := range js {
		m.endedCounts[j.State]++
	}
	m.mu.Unlock()
}

// ended counts a job that ended in st.
func (m *metrics) ended(st queue.State) {
	m.mu.Lock()
	m.endedCounts[st]++
	m.mu.Unlock()
}

// observeWait counts a job that waited d from submit to running.
func (m *metrics) observeWait(d time.Duration) {
	m.mu.Lock()
	m.wait.observe(d)
	m.mu.Unlock()
}

func emptySnapshot() Snapshot {
	s := Snapshot{Jobs: map[queue.State]int{}}
	for _, st := range queue.States() {
		s.Jobs[st] = 0
	}
	return s
}
