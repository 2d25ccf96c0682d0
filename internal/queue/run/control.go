package run

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// ErrLogsRemoved is wrapped by Logs' error for a job whose container was
// removed, queue.log_retention after it ended.
var ErrLogsRemoved = errors.New("the job's container and its logs were removed (queue.log_retention)")

// Job returns the job with id; an unknown id wraps ledger.ErrJobNotFound.
func (q *Service) Job(ctx context.Context, id string) (queue.Job, error) {
	j, err := q.store.Job(ctx, id)
	if err != nil {
		return j, err
	}
	return q.ranks.waiting(j), nil
}

// Jobs returns the jobs f selects, oldest first. Without states, it
// returns the live jobs, and the ended ones too with f.IncludeEnded; with
// states, the jobs in them, ended or not.
func (q *Service) Jobs(ctx context.Context, f ledger.JobFilter) ([]queue.Job, error) {
	for _, s := range f.States {
		if _, err := queue.ParseState(string(s)); err != nil {
			return nil, &BadRequest{Field: "state", Text: err.Error()}
		}
	}
	if len(f.States) > 0 {
		f.IncludeEnded = true // the states named are what is asked for
	}
	js, err := q.store.Jobs(ctx, f)
	for i := range js {
		js[i] = q.ranks.waiting(js[i])
	}
	return js, err
}

// Cancel cancels job id. A queued job ends at once; a starting or running
// one is stopped (stop_grace, then killed) and Cancel returns once it has
// ended, with its exit code kept, or when ctx ends. An ended job is a
// *StateError. ev is written in the transaction that ends the job.
func (q *Service) Cancel(ctx context.Context, id string, ev audit.Event) (queue.Job, error) {
	ev = q.fill(ev, "jobs.cancel", id)
	text := "cancelled"
	if ev.Caller != "" {
		text = "cancelled by " + ev.Caller
	}
	for {
		j, err := q.store.Job(ctx, id)
		if err != nil {
			return queue.Job{}, err
		}
		st, err := toState(j)
		if err != nil {
			return queue.Job{}, err
		}
		switch {
		case st == queue.Queued, (st == queue.Starting || st == queue.Running) && !q.launch.runs():
			out, err := q.update(ctx, id, st, queue.Cancelled, func(j *queue.Job) {
				j.Reason, j.ReasonText, j.EndedAt, j.GPUs = queue.ReasonCancelled, text, q.now().UTC(), nil
			}, ev)
			var se *ledger.JobStateError
			if errors.As(err, &se) {
				continue // it moved on meanwhile: look again
			}
			if err != nil {
				return queue.Job{}, err
			}
			q.launch.jobEnded(out)
			q.launch.poke()
			return out, nil
		case st == queue.Starting || st == queue.Running:
			done := q.launch.askStop(id, &stop{state: queue.Cancelled, reason: queue.ReasonCancelled, text: text, audit: ev})
			q.launch.poke()
			select {
			case <-done:
				return q.store.Job(context.WithoutCancel(ctx), id)
			case <-ctx.Done():
				return queue.Job{}, fmt.Errorf("cancel %s: the job is being stopped: %w", id, ctx.Err())
			}
		default:
			return queue.Job{}, &StateError{ID: id, State: st, Action: "cancel", Want: []queue.State{queue.Queued, queue.Starting, queue.Running}}
		}
	}
}

// heldText and releasedText are the sentences of a job held or just
// released.
const (
	heldText     = "held: it keeps its place in the queue and starts once released"
	releasedText = "released; waiting for the scheduler's next look"
)

// Hold keeps queued job id from starting; it keeps its place. Any other
// state is a *StateError.
func (q *Service) Hold(ctx context.Context, id string, ev audit.Event) (queue.Job, error) {
	return q.setHeld(ctx, id, true, q.fill(ev, "jobs.hold", id))
}

// Release lets held job id start again, and wakes the loop.
func (q *Service) Release(ctx context.Context, id string, ev audit.Event) (queue.Job, error) {
	j, err := q.setHeld(ctx, id, false, q.fill(ev, "jobs.release", id))
	if err == nil {
		q.launch.poke()
	}
	return j, err
}

func (q *Service) setHeld(ctx context.Context, id string, held bool, ev audit.Event) (queue.Job, error) {
	action := "release"
	if held {
		action = "hold"
	}
	// A hold must not land between a pass deciding to start the job and
	// its start intent: start takes the same lock, and reads the job
	// again under it.
	q.holds.Lock()
	defer q.holds.Unlock()
	j, err := q.update(ctx, id, queue.Queued, queue.Queued, func(j *queue.Job) {
		j.Held = held
		if held {
			j.Reason, j.ReasonText = queue.ReasonHeld, heldText
		} else if j.Reason == queue.ReasonHeld {
			j.Reason, j.ReasonText = queue.ReasonResources, releasedText
		}
	}, ev)
	var se *ledger.JobStateError
	if errors.As(err, &se) {
		st, perr := queue.ParseState(string(se.Actual))
		if perr != nil {
			return queue.Job{}, fmt.Errorf("job %s: %w", id, perr)
		}
		return queue.Job{}, &StateError{ID: id, State: st, Action: action, Want: []queue.State{queue.Queued}}
	}
	return j, err
}

// Logs copies job id's output to w, following it while the job runs when
// follow is set. A job that never had a container is a *StateError; one
// whose container was removed wraps ErrLogsRemoved.
func (q *Service) Logs(ctx context.Context, id string, follow bool, w io.Writer) error {
	j, err := q.store.Job(ctx, id)
	if err != nil {
		return err
	}
	if j.ContainerID == "" {
		st, err := toState(j)
		if err != nil {
			return err
		}
		return &StateError{ID: id, State: st, Action: "logs", Want: []queue.State{queue.Running}}
	}
	if !q.launch.runs() {
		return fmt.Errorf("logs of %s: the queue runs no containers on this agent", id)
	}
	err = q.launch.logs(ctx, j.ContainerID, follow, w)
	if errors.Is(err, container.ErrNotFound) {
		return fmt.Errorf("logs of %s: %w", id, ErrLogsRemoved)
	}
	return err
}
