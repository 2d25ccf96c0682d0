// Package queue holds the GPU job queue's pure parts: the job state
// machine, the fixed list of reason codes, and the scheduler, a function
// from the queue's state, the GPUs, the use outside the queue and now to
// a plan (which jobs start on which GPUs, and why every other job waits).
// Nothing here does I/O, starts goroutines or reads the clock.
package queue

import (
	"fmt"
	"strings"
)

// State is where a job is in its life.
type State string

// The job states. Queued, starting and running are live; lost waits for a
// decision (requeue or fail); the rest are ended and never change again.
const (
	// Queued: the job waits for GPUs; its reason says why.
	Queued State = "queued"
	// Starting: GPUs are allocated and the start intent is written; the
	// container is being created and started.
	Starting State = "starting"
	// Running: the job's container runs on its GPUs.
	Running State = "running"
	// Succeeded: the container exited with code 0.
	Succeeded State = "succeeded"
	// Failed: the container exited with a non-zero code, could not be
	// started, was stopped by the waste policy, or was lost too often.
	Failed State = "failed"
	// Timeout: the job reached its time limit and was stopped.
	Timeout State = "timeout"
	// Cancelled: its owner or an admin cancelled it.
	Cancelled State = "cancelled"
	// Lost: the container vanished with no exit code (found so at
	// reconciliation); the job goes back to queued or on to failed.
	Lost State = "lost"
)

// transitions is the one table of allowed state changes: for each state,
// the states it may go to. A state missing as a key has no way out.
//
// Queued goes to failed when a dependency can no longer be met; running
// goes back to queued when the job is preempted, or exits non-zero with
// --requeue, without passing through an ended state (which never
// changes).
var transitions = map[State][]State{
	Queued:   {Starting, Cancelled, Failed},
	Starting: {Running, Queued, Failed, Cancelled, Lost},
	Running:  {Succeeded, Failed, Timeout, Cancelled, Lost, Queued},
	Lost:     {Queued, Failed},
}

// states lists every state in the order of a job's life.
var states = []State{Queued, Starting, Running, Succeeded, Failed, Timeout, Cancelled, Lost}

// States returns every job state, in the order of a job's life.
func States() []State { return append([]State(nil), states...) }

// Valid reports whether s is one of the job states.
func (s State) Valid() bool {
	for _, k := range states {
		if s == k {
			return true
		}
	}
	return false
}

// Ended reports whether s is a final state, which a job never leaves.
func (s State) Ended() bool {
	return s.Valid() && len(transitions[s]) == 0
}

// ParseState returns the state named s, or an error listing the states.
func ParseState(s string) (State, error) {
	st := State(s)
	if !st.Valid() {
		return "", fmt.Errorf("unknown job state %q (states: %s)", s, joinStates(states))
	}
	return st, nil
}

// CanTransition reports whether a job in state from may go to state to.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Transition returns nil when a job in state from may go to state to, and
// otherwise an error naming both states and what from allows. The
// job store checks every write of a state with it.
func Transition(from, to State) error {
	if !from.Valid() {
		return fmt.Errorf("job state %q cannot go to %q: %q is not a job state", from, to, from)
	}
	if !to.Valid() {
		return fmt.Errorf("job state %q cannot go to %q: %q is not a job state", from, to, to)
	}
	if CanTransition(from, to) {
		return nil
	}
	if from.Ended() {
		return fmt.Errorf("job state %s cannot go to %s: %s is final", from, to, from)
	}
	return fmt.Errorf("job state %s cannot go to %s (from %s: %s)", from, to, from, joinStates(transitions[from]))
}

func joinStates(ss []State) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}
