package run

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/units"
)

// The queue's memory contract: a job that asked for GPU memory on a shared
// GPU instead of whole GPUs must stay within what it declared. The meter
// measures; the queue warns at the first tick over, and stops the job once
// it has stayed over for MemoryOverrunGrace, unless the action is warn.
// It is enforcement by measurement, not isolation: a job can exceed its
// memory between two ticks.

// DefaultMemoryOverrunGrace is queue.memory_overrun_grace's default.
const DefaultMemoryOverrunGrace = 2 * time.Minute

// EventWarn is the notify event of a job warned of a memory overrun.
const EventWarn = "warn"

// ReasonMemoryOverrun is the reason of a job stopped for holding more
// GPU memory than it declared.
const ReasonMemoryOverrun = queue.ReasonMemoryOverrun

// overrun is a memory job seen over its declared memory.
type overrun struct {
	since    time.Time // first tick over, of this run of ticks
	measured uint64    // the latest measure
	warned   bool      // the warning is written
}

// memoryJobs are the running jobs that declared GPU memory, by job id:
// the loop keeps it, Observe reads it.
type memoryJobs map[string]uint64

// memoryEnforcer holds the running memory jobs to what they declared:
// Observe hands it each tick's measure, the loop's pass asks it what to
// do of each memory job. Its state has its own lock.
type memoryEnforcer struct {
	writer
	onEvent func(event string, j queue.Job)
	stops   *stopRequests
	poke    func() // wakes the launcher's loop
	grace   time.Duration
	action  config.OverrunAction

	mu       sync.Mutex
	jobs     memoryJobs
	overruns map[string]*overrun
}

// observe compares a tick's measure of the memory jobs with what
// they declared, and says whether the loop has something to do (a job
// newly over, or back under).
func (q *memoryEnforcer) observe(measured map[string]uint64, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	changed := false
	for id, declared := range q.jobs {
		m := measured[id]
		o, over := q.overruns[id]
		switch {
		case m > declared && !over:
			q.overruns[id] = &overrun{since: now, measured: m}
			changed = true
		case m > declared:
			o.measured = m
		case over:
			delete(q.overruns, id)
			changed = true
		}
	}
	return changed
}

// enforce warns and stops the running memory jobs that stay over
// what they declared; it returns when the next stop is due (zero: none).
// It runs in the loop.
func (q *memoryEnforcer) enforce(ctx context.Context, j queue.Job, declared uint64, now time.Time) time.Time {
	q.mu.Lock()
	o, over := q.overruns[j.ID]
	var since time.Time
	var measured uint64
	warn := false
	if over {
		since, measured = o.since, o.measured
		warn = !o.warned
		o.warned = true
	}
	grace, action := q.grace, q.action
	q.mu.Unlock()
	if !over {
		return time.Time{}
	}
	due := since.Add(grace)
	what := fmt.Sprintf("its GPU memory is %s, more than the %s it declared", units.FormatSize(measured), units.FormatSize(declared))
	if warn {
		text := what + "; it is stopped at " + due.UTC().Format("15:04:05") + " UTC unless it goes back under"
		if action == config.OverrunWarn {
			text = what + " (queue.memory_overrun_action is warn: it is not stopped)"
		}
		ev := q.queueEvent("jobs.memory_warn", j.ID)
		ev.Error = what
		out, err := q.update(ctx, j.ID, queue.Running, queue.Running, func(j *queue.Job) { j.ReasonText = text }, ev)
		if err == nil && q.onEvent != nil {
			// The submitter accepted the contract: the warning goes to
			// the webhook whatever the job's notify list says.
			q.onEvent(EventWarn, out)
		}
	}
	if action == config.OverrunWarn {
		return time.Time{}
	}
	if now.Before(due) {
		return due
	}
	q.stops.ask(j.ID, &stop{state: queue.Failed, reason: ReasonMemoryOverrun,
		text:  what + " for " + units.FormatDuration(grace) + ", and was stopped (queue.memory_overrun_grace)",
		audit: q.fill(audit.Event{Caller: "queue", Outcome: "allowed", Error: what}, "jobs.memory_overrun", j.ID)})
	q.poke() // the next pass sends the stop
	return time.Time{}
}

// setJobs puts in force the running memory jobs of a pass, and
// forgets the overruns of those that are no longer running.
func (q *memoryEnforcer) setJobs(m memoryJobs) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.jobs = m
	for id := range q.overruns {
		if _, ok := m[id]; !ok {
			delete(q.overruns, id)
		}
	}
}
