package run

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// requeueCauses reads Config.RequeueOn: nil is every cause, the
// configuration's default; anything else is as named, checked.
func requeueCauses(names []string) (map[config.RequeueCause]bool, error) {
	if names == nil {
		names = make([]string, len(config.RequeueCauses))
		for i, c := range config.RequeueCauses {
			names[i] = string(c)
		}
	}
	out := make(map[config.RequeueCause]bool, len(names))
	for _, n := range names {
		c, err := config.ParseRequeueCause(n)
		if err != nil {
			return nil, fmt.Errorf("queue.requeue_on: %w", err)
		}
		out[c] = true
	}
	return out, nil
}

// requeueFailed puts running job j, whose container jc exited non-zero,
// back in the queue as failed_requeued when it was submitted with
// --requeue and has requeues left (queue.max_requeue), and reports
// whether it did (or will, once the store takes it). Its container goes
// first: it holds the name the next run's container takes.
func (q *Launcher) requeueFailed(ctx context.Context, l *loop, j queue.Job, jc container.JobContainer) bool {
	if j.Request == nil || !j.Request.RequeueFailed || j.Requeues >= q.maxRequeue {
		return false
	}
	l.stale[j.ID] = jc.ID
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	if err := q.engine.Remove(rctx, jc.ID); err == nil {
		delete(l.stale, j.ID)
	}
	cancel()
	_, err := q.update(ctx, j.ID, queue.Running, queue.Queued, func(j *queue.Job) {
		j.Requeues++
		j.GPUs, j.ContainerID, j.StartedAt, j.ExitCode = nil, "", time.Time{}, nil
		j.Reason = queue.ReasonFailedRequeued
		j.ReasonText = fmt.Sprintf("exited with code %d; back in the queue (--requeue: requeue %d of %d, queue.max_requeue)", jc.ExitCode, j.Requeues, q.maxRequeue)
	}, q.queueEvent("jobs.requeue", j.ID))
	q.unstage(j.ID)
	var se *ledger.JobStateError
	if err != nil && !errors.As(err, &se) {
		q.log.Error("requeue a job that exited non-zero; kept to apply later", "job", j.ID, "err", err)
		l.pendingEnds[jc.ID] = jc
	}
	return true
}

// notRequeuedText is what the sentence of a job that ended failed
// after a non-zero exit adds when it asked for --requeue and had no
// requeue left.
func (q *Launcher) notRequeuedText(j queue.Job) string {
	if j.Request == nil || !j.Request.RequeueFailed {
		return ""
	}
	return fmt.Sprintf("; not requeued: it went back to the queue %d times already (queue.max_requeue %d)", j.Requeues, q.maxRequeue)
}

// failEngineKilled ends running job j, whose container jc the engine
// killed as it stopped, failed with requeue_limit: queue.requeue_on
// leaves engine_failure out.
func (q *Launcher) failEngineKilled(ctx context.Context, l *loop, j queue.Job, jc container.JobContainer) {
	exit := jc.ExitCode
	ended := jc.FinishedAt
	if ended.IsZero() {
		ended = q.now()
	}
	out, err := q.update(ctx, j.ID, queue.Running, queue.Failed, func(j *queue.Job) {
		j.Reason, j.EndedAt, j.ExitCode = queue.ReasonRequeueLimit, ended.UTC(), &exit
		j.ReasonText = fmt.Sprintf("its container was killed when the Docker engine stopped (exit code %d); not requeued, as queue.requeue_on leaves out engine_failure", exit)
	}, q.queueEvent("jobs.fail", j.ID))
	var se *ledger.JobStateError
	if err != nil && !errors.As(err, &se) {
		q.log.Error("fail a job the engine killed; kept to apply later", "job", j.ID, "err", err)
		l.pendingEnds[jc.ID] = jc
		return
	}
	if err != nil {
		return
	}
	if q.logRetention > 0 {
		l.retention[jc.ID] = ended.Add(q.logRetention)
	}
	q.jobEnded(out)
}

// Requeue makes a new job from ended job id, as gpumeter requeue does:
// a new id, the same request and environment values, submitted as its
// owner (admin: the caller is an admin, for the class and the
// dependencies), with RequeueOf set to id and Attempt to id's attempt
// plus one. The ended job never changes. A live job is a *StateError;
// one whose environment values are gone a *BadRequest. ev is written
// in the new job's transaction.
func (q *Service) Requeue(ctx context.Context, id string, admin bool, ev audit.Event) (queue.Job, error) {
	ev = q.fill(ev, "jobs.requeue", id)
	j, err := q.store.Job(ctx, id)
	if err != nil {
		return queue.Job{}, err
	}
	st, err := toState(j)
	if err != nil {
		return queue.Job{}, err
	}
	if !st.Ended() {
		return queue.Job{}, &StateError{ID: id, State: st, Action: "requeue", Want: queue.EndedStates()}
	}
	req, err := specRequest(j)
	if err != nil {
		return queue.Job{}, &BadRequest{Field: "id", Text: err.Error() + "; submit it again"}
	}
	if req.Env, err = q.env.read(j); err != nil {
		if errors.Is(err, errEnvMissing) {
			err = fmt.Errorf("%s's environment values (%s) are gone: the queue keeps them queue.log_retention after a job ends, and this one's have expired (or the job was submitted while the agent stopped); submit it again with its --env values", id, strings.Join(j.EnvKeys, ", "))
		}
		return queue.Job{}, &BadRequest{Field: "id", Text: err.Error()}
	}
	r := j.Request
	attempt := max(r.Attempt, 1) + 1
	s := Submission{
		Request: req, User: j.User, Team: j.Team, Notify: r.Notify, High: admin, Admin: admin,
		After: r.After, RequeueFailed: r.RequeueFailed, Audit: ev,
	}
	return q.submit(ctx, s, func(n *queue.Request) {
		n.RequeueOf, n.Attempt, n.Preemptible = j.ID, attempt, r.Preemptible
		// A task made again keeps its place in its array: its index (the
		// work it does) and the array's cap on tasks running at once. It
		// is a job of its own id, so the array's listing does not count it.
		if a := r.Array; a != nil {
			n.Array = &queue.ArrayTask{ID: a.ID, Index: a.Index, Count: a.Count, MaxRunning: a.MaxRunning}
		}
	})
}
