package run

import (
	"context"
	"fmt"
	"time"

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
	audited func(context.Context, ledger.AuditEvent)
}

// auditedLater hands an event the store committed to Config.Audited.
func (w writer) auditedLater(ctx context.Context, e ledger.AuditEvent) {
	if w.audited != nil && e.Kind != "" {
		w.audited(ctx, e)
	}
}

// fill completes an audit event of an action on job id.
func (w writer) fill(e ledger.AuditEvent, action, id string) ledger.AuditEvent {
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
func toState(j ledger.Job) (queue.State, error) {
	s, err := queue.ParseState(j.State)
	if err != nil {
		return "", fmt.Errorf("job %s: %w", j.ID, err)
	}
	return s, nil
}

// update writes a change of job id from state from, checking the
// transition table first when the change moves it to another state.
func (w writer) update(ctx context.Context, id string, from, to queue.State, change func(*ledger.Job), ev ledger.AuditEvent) (ledger.Job, error) {
	if from != to {
		if err := queue.Transition(from, to); err != nil {
			return ledger.Job{}, fmt.Errorf("job %s: %w", id, err)
		}
	}
	j, err := w.store.UpdateJob(ctx, id, string(from), func(j *ledger.Job) {
		change(j)
		j.State = string(to)
	}, ev)
	if err != nil {
		return ledger.Job{}, err
	}
	w.auditedLater(ctx, ev)
	return j, nil
}

// queueEvent is an audit event of something the queue did by itself.
func (w writer) queueEvent(action, id string) ledger.AuditEvent {
	return w.fill(ledger.AuditEvent{Caller: "queue", Outcome: "allowed"}, action, id)
}
