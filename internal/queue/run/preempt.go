package run

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// Preemption, the launcher's part: the scheduler names the preemptible
// running jobs to stop for a job that waited (queue.Plan.Preemptions);
// the launcher writes the intent on the running job first (reason
// preempted, still running), then stops its container with
// queue.preempt_grace, and once the container has exited puts the job
// back in the queue: running → queued, reason preempted, its GPUs,
// container and start cleared, its SubmittedAt (its place by age) kept,
// no requeue counted. A crash at any point is finished by the next life
// of the agent from the intent: a running job whose reason is preempted
// is stopped again if its container still runs, requeued if it exited or
// is gone; it is never ended by its exit code, and never runs twice,
// since its old container is removed before the job is queued again.

// preemptInput marks, in a pass's input, the running jobs that are
// preemptible (with their class) or being preempted, and the queued jobs
// that are preemptible or were preempted.
func preemptInput(in *queue.Input, byID map[string]queue.Job) {
	for i := range in.Running {
		r := &in.Running[i]
		j := byID[r.ID]
		if req := j.Request; req != nil && req.Preemptible && j.State == queue.Running {
			r.Preemptible, r.Class = true, req.Class
		}
		r.Preempting = j.State == queue.Running && j.Reason == queue.ReasonPreempted
	}
	for i := range in.Queued {
		q := &in.Queued[i]
		j := byID[q.ID]
		q.Preemptible = j.Request != nil && j.Request.Preemptible
		q.Preempted = j.Reason == queue.ReasonPreempted
	}
}

// preempt acts on the plan's preemptions, and takes up again those whose
// intent a former life of the agent wrote but did not finish. It returns
// when the next pass is due for a preemption (zero: none).
//
// In a fleet the scheduler writes the intent of every preemption its pass
// makes, on any node, and each node stops its own jobs whose intent it
// finds: the intent in the store is how the one tells the other.
func (q *Launcher) preempt(ctx context.Context, l *loop, plan queue.Plan, byID map[string]queue.Job) time.Time {
	for _, j := range byID {
		if j.State == queue.Running && j.Reason == queue.ReasonPreempted && q.stops.pending(j.ID) == nil && q.mine(j) {
			q.askPreempt(ctx, l, j)
		}
	}
	for _, p := range plan.Preemptions {
		j := byID[p.JobID]
		if j.State != queue.Running || j.ContainerID == "" || j.Reason == queue.ReasonPreempted || q.stops.pending(j.ID) != nil {
			continue // under way, or taken up above
		}
		// The intent goes to the store before the signal: a crash after
		// it finishes the preemption rather than ends the job.
		out, err := q.update(ctx, j.ID, queue.Running, queue.Running, func(j *queue.Job) {
			j.Reason = queue.ReasonPreempted
			j.ReasonText = fmt.Sprintf("being preempted for %s, which waited queue.preempt_after for its GPUs: SIGTERM, a kill after %s, then back in the queue with its place by age",
				p.For, formatLimit(q.preemptGrace))
		}, q.queueEvent("jobs.preempt", j.ID))
		if err != nil {
			var se *ledger.JobStateError
			if !errors.As(err, &se) {
				q.log.Error("write a job's preemption", "job", j.ID, "err", err)
			}
			continue
		}
		q.log.Info("preempting a job", "job", j.ID, "node", j.Node, "for", p.For, "grace", q.preemptGrace)
		if q.mine(out) {
			q.askPreempt(ctx, l, out)
		}
	}
	return plan.PreemptAt
}

// askPreempt asks the stop of preempted job j and sends it now when it
// can.
func (q *Launcher) askPreempt(ctx context.Context, l *loop, j queue.Job) {
	q.stops.ask(j.ID, &stop{preempt: true, grace: q.preemptGrace, state: queue.Queued, reason: queue.ReasonPreempted, text: j.ReasonText})
	if s, send := q.stops.toSend(j.ID, j.ContainerID != "" && !l.engineDown); send {
		q.sendStop(ctx, l, j.ContainerID, s)
	}
}

// requeuePreempted puts preempted job j, whose container cid ("": gone)
// exited, back in the queue. The container goes first, since it holds
// the name the next run's container takes (its logs go with it; the
// run's use is in the ledger already); one that cannot be removed now is
// removed before the next start.
func (q *Launcher) requeuePreempted(ctx context.Context, l *loop, j queue.Job, cid, how string) {
	if cid != "" {
		l.stale[j.ID] = cid
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		if err := q.engine.Remove(rctx, cid); err == nil {
			delete(l.stale, j.ID)
		}
		cancel()
	}
	_, err := q.update(ctx, j.ID, queue.Running, queue.Queued, func(j *queue.Job) {
		j.GPUs, j.ContainerID, j.StartedAt = nil, "", time.Time{}
		j.Reason = queue.ReasonPreempted
		j.ReasonText = "preempted (" + how + "): its GPUs went to a job that had waited for them; back in the queue with its place by age, no requeue counted"
	}, q.queueEvent("jobs.requeue", j.ID))
	var se *ledger.JobStateError
	if err != nil && !errors.As(err, &se) {
		q.log.Error("requeue a preempted job", "job", j.ID, "err", err)
		l.reconciled = false // the reconciliation finds it preempted and tries again
		return
	}
	q.unstage(j.ID) // staged again at its next start
	if s := q.stops.end(j.ID, cid); s != nil {
		close(s.done)
	}
}
