package run

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// writer writes the jobs' changes to the store, checked against the
// state table, and hands their audit events on to Config.Audited. The
// service, the launcher and the memory enforcer each have a copy; it
// holds no state of its own.
type writer struct {
	store   ledger.JobStore
	node    string
	now     func() time.Time
	audited func(context.Context, audit.Event)
}

// auditedLater hands an event the store committed to Config.Audited.
func (w writer) auditedLater(ctx context.Context, e audit.Event) {
	if w.audited != nil && e.Kind != "" {
		w.audited(ctx, e)
	}
}

// fill completes an audit event of an action on job id.
func (w writer) fill(e audit.Event, action, id string) audit.Event {
	if e.Time.IsZero() {
		e.Time = w.now()
	}
	if e.Node == "" {
		e.Node = w.node
	}
	if e.Action == "" {
		e.Action = action
	}
	if e.Target == "" {
		e.Target = id
	}
	if e.Kind == "" {
		e.Kind = KindQueue
	}
	return e
}

// toState returns the job's state, checked against the state table.
func toState(j queue.Job) (queue.State, error) {
	s, err := queue.ParseState(string(j.State))
	if err != nil {
		return "", fmt.Errorf("job %s: %w", j.ID, err)
	}
	return s, nil
}

// update writes a change of job id from state from, checking the
// transition table first when the change moves it to another state.
func (w writer) update(ctx context.Context, id string, from, to queue.State, change func(*queue.Job), ev audit.Event) (queue.Job, error) {
	if from != to {
		if err := queue.Transition(from, to); err != nil {
			return queue.Job{}, fmt.Errorf("job %s: %w", id, err)
		}
	}
	j, err := w.store.UpdateJob(ctx, id, from, func(j *queue.Job) {
		change(j)
		j.State = to
	}, ev)
	if err != nil {
		return queue.Job{}, err
	}
	w.auditedLater(ctx, ev)
	return j, nil
}

// queueEvent is an audit event of something the queue did by itself.
func (w writer) queueEvent(action, id string) audit.Event {
	return w.fill(audit.Event{Caller: "queue", Outcome: "allowed"}, action, id)
}
