package run

import (
	"slices"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// Observe takes what a tick saw of the GPUs and their use outside the
// queue, and wakes the loop when it changes what the scheduler sees: the
// GPUs, the containers outside the queue, or a GPU's outside memory
// crossing the threshold.
func (q *Launcher) Observe(o Observation) {
	changed := q.settings.observe(o)
	if q.memory.observe(o.JobMemory, q.now()) {
		changed = true
	}
	if changed {
		q.poke()
	}
}

// sameObservation reports whether a and b look the same to the scheduler.
func sameObservation(a, b Observation, cfg queue.Config) bool {
	if !slices.EqualFunc(a.GPUs, b.GPUs, queue.GPU.Equal) || len(a.Outside.Containers) != len(b.Outside.Containers) {
		return false
	}
	for i, c := range a.Outside.Containers {
		d := b.Outside.Containers[i]
		if c.Name != d.Name || c.User != d.User || !slices.Equal(c.GPUs, d.GPUs) {
			return false
		}
	}
	threshold := cfg.OutsideMemoryThreshold
	if threshold <= 0 {
		threshold = queue.DefaultOutsideMemoryThreshold
	}
	for _, g := range b.GPUs {
		over := func(o Observation) bool {
			return float64(o.Outside.MemoryUsed[g.UUID]) > threshold*float64(g.MemoryTotal)
		}
		if over(a) != over(b) {
			return false
		}
	}
	return true
}

// ExpectStop tells the queue that the waste policy is stopping container
// id: if it is a job's, the job ends failed with reason
// stopped_by_policy rather than by its exit code.
func (q *Launcher) ExpectStop(containerID string, reason queue.Reason) {
	q.stops.expect(containerID, reason)
}

// jobEnded does what follows a job's end: its environment values and
// staged mounts go, the end is notified, and whoever waits for the stop
// is told.
func (q *Launcher) jobEnded(j queue.Job) {
	q.env.remove(j.ID)
	q.unstage(j.ID)
	q.ranks.forget(j.ID)
	q.deps.ended(j)
	s := q.stops.end(j.ID, j.ContainerID)
	if j.State.Valid() {
		q.metrics.ended(j.State)
	}
	q.emit(config.NotifyEnd, j)
	if s != nil {
		close(s.done) // last, so that whoever waits sees all of the above
	}
}

// emit calls OnEvent when the job's notify list, or Config.Notify, names
// event.
func (q *Launcher) emit(event config.NotifyEvent, j queue.Job) {
	if q.onEvent == nil {
		return
	}
	want := slices.Contains(q.notify, string(event))
	if !want {
		if r := j.Request; r != nil {
			want = slices.Contains(r.Notify, string(event))
		}
	}
	if want {
		q.onEvent(string(event), j)
	}
}
