package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// job is an action the engine's loop decided on, for a worker to carry
// out.
type job struct {
	// kind is EventNotify, EventWarn or EventStop; a job without one only
	// writes its event.
	kind    string
	policy  config.Policy // in force when the job was decided
	finding waste.Finding
	stopAt  time.Time   // when a warning's stop is due
	event   audit.Event // what a job without a kind writes
}

// queue holds the jobs the loop decided on until a worker takes them.
// Adding never blocks. A job waits while another of the same finding
// runs, so that the jobs of a finding run one at a time and in order: a
// stop never overtakes its warning. It grows by a few jobs per finding as
// findings come and go, and the deadlines of the jobs under way keep it
// draining, however long a webhook or the ledger hangs.
type queue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	jobs   []*job
	busy   map[string]bool // findings with a job running
	closed bool
}

func newQueue() *queue {
	q := &queue{busy: map[string]bool{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// add queues j.
func (q *queue) add(j *job) {
	q.mu.Lock()
	q.jobs = append(q.jobs, j)
	q.mu.Unlock()
	q.cond.Signal()
}

// take waits for a job that may run now, and returns it; once the queue
// is closed and empty it returns false.
func (q *queue) take() (*job, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if j := q.nextLocked(); j != nil {
			return j, true
		}
		if q.closed && len(q.jobs) == 0 {
			return nil, false
		}
		q.cond.Wait()
	}
}

// tryTake returns a job that may run now, or nil.
func (q *queue) tryTake() *job {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.nextLocked()
}

func (q *queue) nextLocked() *job {
	for i, j := range q.jobs {
		if !q.busy[j.finding.ID] {
			q.jobs = slices.Delete(q.jobs, i, i+1)
			q.busy[j.finding.ID] = true
			return j
		}
	}
	return nil
}

// done says that j, taken from the queue, has run.
func (q *queue) done(j *job) {
	q.mu.Lock()
	delete(q.busy, j.finding.ID)
	q.mu.Unlock()
	q.cond.Broadcast()
}

// close lets take return false once the queue is empty.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// do carries out j under a deadline of its own (ctx ending cuts it
// short), then writes its audit event under another, from auditCtx.
func (e *Engine) do(ctx, auditCtx context.Context, j *job) {
	ev := j.event
	switch j.kind {
	case EventNotify, EventWarn:
		ev = e.notify(ctx, j.policy, j.kind, j.finding, j.stopAt)
	case EventStop:
		ev = e.stop(ctx, j.policy, j.finding)
	}
	e.audit(auditCtx, ev, j.finding)
}

// notify sends a notification (kind notify) or a warning (kind warn,
// stopAt set), and returns its audit event.
func (e *Engine) notify(ctx context.Context, p config.Policy, kind string, f waste.Finding, stopAt time.Time) audit.Event {
	m := Message{Kind: kind, DryRun: p.DryRun, Finding: f, Text: text(kind, f, stopAt)}
	if !stopAt.IsZero() {
		m.StopAt = &stopAt
	}
	ev := audit.Event{Kind: kind, DryRun: p.DryRun}
	log := e.cfg.Logger.With("rule", f.Rule, "container", f.Container, "container_id", f.ContainerID, "owner", f.Owner, "finding", f.ID)
	switch {
	case p.DryRun:
		ev.Outcome = OutcomeDryRun
		if kind == EventWarn {
			log.Info("policy dry run: would warn, then stop the container", "webhook", p.Webhook.URL, "stop_at", stopAt.UTC().Format(time.RFC3339), "text", m.Text)
		} else {
			log.Info("policy dry run: would notify", "webhook", p.Webhook.URL, "text", m.Text)
		}
	case p.Webhook.URL == "":
		ev.Outcome = OutcomeLogged
		log.Warn("policy: "+kind, "text", m.Text)
	default:
		actx, cancel := context.WithTimeout(ctx, e.cfg.ActionTimeout)
		n, err := post(actx, e.cfg.Client, p.Webhook, e.cfg.Backoff, m)
		cancel()
		ev.Attempts = n
		if err != nil {
			ev.Outcome, ev.Error = OutcomeFailed, err.Error()
			log.Warn("policy: webhook failed", "kind", kind, "attempts", n, "err", err)
		} else {
			ev.Outcome = OutcomeSent
			log.Info("policy: "+kind+" sent", "attempts", n)
		}
	}
	return ev
}

// stop re-checks f and stops its container, giving Docker the grace
// period and ActionTimeout more; it returns the audit event.
func (e *Engine) stop(ctx context.Context, p config.Policy, f waste.Finding) audit.Event {
	log := e.cfg.Logger.With("rule", f.Rule, "container", f.Container, "container_id", f.ContainerID, "owner", f.Owner, "finding", f.ID)
	ev := audit.Event{Kind: EventStop, DryRun: p.DryRun}
	if why := e.recheck(p, f); why != "" {
		ev.Outcome, ev.Error = why, recheckText[why]
		log.Info("policy: stop cancelled", "why", recheckText[why])
		return ev
	}
	if p.DryRun {
		ev.Outcome = OutcomeDryRun
		log.Info("policy dry run: would stop the container", "grace", p.Grace.String())
		return ev
	}
	var err error
	if e.cfg.Stopper == nil {
		err = errors.New("no container runtime to stop it with")
	} else {
		actx, cancel := context.WithTimeout(ctx, p.Grace+e.cfg.ActionTimeout)
		err = e.cfg.Stopper.Stop(actx, f.ContainerID, p.Grace)
		cancel()
	}
	switch {
	case err == nil:
		ev.Outcome = OutcomeStopped
		log.Warn("policy: stopped the container", "grace", p.Grace.String())
	case errors.Is(err, container.ErrNotFound):
		ev.Outcome = OutcomeGone
		log.Info("policy: the container disappeared before the stop")
	default:
		ev.Outcome, ev.Error = OutcomeFailed, err.Error()
		log.Warn("policy: stop failed", "err", err)
	}
	return ev
}

var recheckText = map[string]string{
	OutcomeCancelled: "the finding no longer holds",
	OutcomeGone:      "the container is gone or no longer running",
	OutcomeExempt:    "the container is exempt",
}

// recheck looks again, right before a stop, at the latest findings and
// the container: it returns the outcome that cancels the stop, or "".
func (e *Engine) recheck(p config.Policy, f waste.Finding) string {
	still := false
	for _, g := range e.cfg.Findings() {
		if g.ID == f.ID {
			still = g.Active
			break
		}
	}
	if !still {
		return OutcomeCancelled
	}
	if e.cfg.Containers != nil {
		c, ok := e.cfg.Containers.Lookup(f.ContainerID)
		if !ok || !c.Running {
			return OutcomeGone
		}
	}
	if e.exempt(p, f) != "" {
		return OutcomeExempt
	}
	return ""
}

// audit writes ev, about f, to the audit log, giving the write
// AuditTimeout.
func (e *Engine) audit(ctx context.Context, ev audit.Event, f waste.Finding) {
	ev.Time = e.cfg.Now().UTC()
	ev.Rule, ev.FindingID, ev.Node = f.Rule, f.ID, f.Node
	ev.ContainerID, ev.Container, ev.Owner, ev.Evidence = f.ContainerID, f.Container, f.Owner, f.Evidence
	if e.cfg.Audit == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.AuditTimeout)
	defer cancel()
	if err := e.cfg.Audit.Act(ctx, ev); err != nil {
		e.cfg.Logger.Error("policy: audit", "err", err)
	}
}

// text is the human line of a message.
func text(kind string, f waste.Finding, stopAt time.Time) string {
	who := f.Container
	if who == "" {
		who = f.OwnerKind + " " + f.Owner
	}
	if f.Owner != "" && f.Container != "" {
		who += " (" + f.Owner + ")"
	}
	var gpus []string
	for _, g := range f.GPUs {
		gpus = append(gpus, fmt.Sprint(g.Index))
	}
	s := fmt.Sprintf("gpumeter: %s is %s on GPU %s since %s (%.2f GPU-hours wasted)",
		who, strings.ReplaceAll(f.Rule, "_", " "), strings.Join(gpus, ","), f.Since.UTC().Format(time.RFC3339), f.WastedGPUHours)
	if kind == EventWarn {
		s += fmt.Sprintf("; it will be stopped at %s unless it gets busy", stopAt.UTC().Format(time.RFC3339))
	}
	return s
}
