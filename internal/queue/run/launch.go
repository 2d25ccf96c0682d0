package run

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/units"
)

// opTimeout bounds one engine call of the loop.
const opTimeout = time.Minute

func formatLimit(d time.Duration) string { return units.FormatDuration(d) }

// start starts job j on gpus: the intent first (queued to starting, with
// the GPUs, audited), then create under the name derived from the job id
// (so a second create after a crash fails instead of starting the job
// twice), a check of the mounts Docker made, and start. It returns when
// the started job's time limit is due (zero: not started, or no limit),
// so that the loop's timer covers it.
func (q *Launcher) start(ctx context.Context, l *loop, j queue.Job, gpus []string, placement *queue.PlacementRecord) time.Time {
	if j.ID == "" {
		return time.Time{}
	}
	tr := l.trace.start()
	q.holds.Lock()
	if cur, err := q.store.Job(ctx, j.ID); err != nil || cur.Held {
		// Held (or gone) since the pass read it: it keeps its place.
		q.holds.Unlock()
		return time.Time{}
	}
	intent, err := q.update(ctx, j.ID, queue.Queued, queue.Starting, func(j *queue.Job) {
		j.GPUs, j.Reason = gpus, ""
		j.Placement = placement
		j.ReasonText = "starting on " + strings.Join(gpus, ", ")
	}, q.queueEvent("jobs.start", j.ID))
	q.holds.Unlock()
	if err != nil {
		var se *ledger.JobStateError
		if !errors.As(err, &se) {
			q.log.Error("write a job's start intent", "job", j.ID, "err", err)
		}
		return time.Time{}
	}
	tr.mark(q.now())
	return q.launchIntent(ctx, l, intent, tr)
}

// launchIntent starts the container of job intent, which is starting on its
// GPUs: this agent's own intent, or one the fleet's scheduler wrote and
// this node claimed. It returns as start does.
func (q *Launcher) launchIntent(ctx context.Context, l *loop, intent queue.Job, tr *startTrace) time.Time {
	j, gpus := intent, intent.GPUs
	s, err := q.buildSpec(intent, gpus)
	if err != nil {
		q.failStart(ctx, l, intent, queue.Starting, err)
		return time.Time{}
	}
	if err := q.stageMounts(intent, s); err != nil {
		q.failStart(ctx, l, intent, queue.Starting, err)
		return time.Time{}
	}
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if old, ok := l.stale[j.ID]; ok {
		// The container of a run the engine killed: it has the name this
		// run's container takes, and must not be taken for it.
		if err := q.engine.Remove(octx, old); err != nil {
			q.requeueStart(ctx, l, intent, err)
			return time.Time{}
		}
		delete(l.stale, j.ID)
	}
	cid, err := q.engine.Create(octx, s)
	if errors.Is(err, container.ErrExists) && q.fleet != nil {
		// The fleet placed the job here again while its run from before
		// kept its container (the node was lost and is back): that run
		// is adopted, on the GPUs it holds, as one the fleet has not
		// started elsewhere is. The scheduler may have chosen other GPUs
		// of this node: the job's record (and its allocations) move to
		// the container's, or, where another job holds one of those
		// now, the old run is removed and the job starts anew where the
		// scheduler placed it; never two runs, nor a record that names
		// GPUs its container does not hold.
		if jc, ierr := q.engine.Inspect(octx, s.Name); ierr == nil && !foreign(intent, jc) && jc.Running && !sameGPUs(jc.GPUs, gpus) {
			if moved, ok := q.adoptOnItsGPUs(ctx, intent, jc); ok {
				q.settle(ctx, l, moved, jc)
				return time.Time{}
			}
			if rerr := q.engine.Remove(octx, jc.ID); rerr != nil {
				q.requeueStart(ctx, l, intent, rerr)
				return time.Time{}
			}
			cid, err = q.engine.Create(octx, s)
		}
	}
	if errors.Is(err, container.ErrExists) {
		// Created before, by a life of the agent that the reconciliation
		// did not see: settle it as the reconciliation would.
		jc, ierr := q.engine.Inspect(octx, s.Name)
		if ierr == nil && foreign(intent, jc) {
			// Started before this job was submitted: the container of
			// another job that had this ID in a ledger since lost (the
			// start-up check could not list the engine). Never adopt
			// it, nor remove it: the operator is told.
			q.failStart(ctx, l, intent, queue.Starting, fmt.Errorf("container %s, started %s, before this job was submitted, holds the job's name: the ledger lost the job that made it; remove it with docker rm -f %s, then submit again",
				s.Name, jc.StartedAt.UTC().Format(time.RFC3339), s.Name))
			return time.Time{}
		}
		if ierr == nil {
			q.settle(ctx, l, intent, jc)
			return time.Time{}
		}
	}
	if err != nil {
		q.requeueStart(ctx, l, intent, err)
		return time.Time{}
	}
	tr.mark(q.now())
	jc, err := q.engine.Inspect(octx, cid)
	if err == nil {
		if verr := spec.Verify(jc.Mounts, s.HostConfig.Mounts); verr != nil {
			q.removeContainer(ctx, cid)
			q.failStart(ctx, l, intent, queue.Starting, fmt.Errorf("the engine did not mount what was asked: %w", verr))
			return time.Time{}
		}
	}
	tr.mark(q.now())
	if err == nil {
		err = q.engine.Start(octx, cid)
		tr.mark(q.now())
	}
	if errors.Is(err, container.ErrUnavailable) {
		// The engine may have started it before it went away: the job
		// stays starting, holding its GPUs, and the reconciliation that
		// follows the engine's return adopts its container or puts it
		// back in the queue, so that it never runs twice.
		l.unsure[j.ID] = true
		q.engineLost(l, err)
		return time.Time{}
	}
	if err != nil {
		q.removeContainer(ctx, cid)
		q.requeueStart(ctx, l, intent, err)
		return time.Time{}
	}
	startedAt := q.now().UTC()
	if !q.markRunning(ctx, intent, cid, startedAt) {
		l.reconciled = false // it runs; the reconciliation adopts it
	}
	q.observeStart(j.ID, tr)
	if intent.TimeLimit <= 0 {
		return time.Time{}
	}
	return startedAt.Add(intent.TimeLimit)
}

// buildSpec builds the container spec of a job from its stored request,
// its environment values and the submitter as the host knows them now.
func (q *Launcher) buildSpec(j queue.Job, gpus []string) (*spec.Spec, error) {
	req, err := specRequest(j)
	if err != nil {
		return nil, err
	}
	if req.Env, err = q.env.read(j); err != nil {
		return nil, err
	}
	who, err := q.identity(j.User)
	if err != nil {
		return nil, fmt.Errorf("user %s is no longer known to this host (host.passwd_file): %w", j.User, err)
	}
	who.User, who.Team = j.User, j.Team
	// The class was checked when the job was submitted; a right taken
	// away since does not keep a queued job from starting.
	who.High = req.Class == spec.ClassHigh
	rules := q.settings.jobRules()
	s, err := spec.Build(req, rules, who, j.ID, gpus, q.passing)
	if err != nil {
		return nil, err
	}
	if req.Preemptible {
		s.SetPreemptGrace(q.preemptGrace)
	}
	s.ForNode(q.node)
	return s, nil
}

// markRunning records that job j's container runs, and reports whether
// the store took it.
func (q *Launcher) markRunning(ctx context.Context, j queue.Job, cid string, startedAt time.Time) bool {
	out, err := q.update(ctx, j.ID, queue.Starting, queue.Running, func(j *queue.Job) {
		j.ContainerID, j.StartedAt, j.ReasonText = cid, startedAt, "running on "+strings.Join(j.GPUs, ", ")
	}, audit.Event{})
	if err != nil {
		q.log.Error("record a started job", "job", j.ID, "err", err)
		return false
	}
	q.metrics.observeWait(out.StartedAt.Sub(out.SubmittedAt))
	q.emit(config.NotifyStart, out)
	return true
}

// requeueStart puts a job whose start failed back in the queue with
// start_failed and the error, or fails it after max_start_attempts, and
// keeps it from starting again before a backoff of retryAfter times its
// attempts. A start that failed because the engine is unavailable is not
// the job's fault: it goes back as engine_unavailable, counting no
// attempt, and the loop starts nothing until the engine answers again.
func (q *Launcher) requeueStart(ctx context.Context, l *loop, j queue.Job, cause error) {
	if errors.Is(cause, container.ErrUnavailable) {
		q.engineLost(l, cause)
		q.requeueUnavailable(ctx, l, j, cause)
		return
	}
	if j.Attempts+1 >= q.maxStartAttempts {
		if !q.fail(ctx, j, queue.Starting, queue.ReasonStartAttempts,
			fmt.Sprintf("failed to start %d times (queue.max_start_attempts); last: %v", j.Attempts+1, cause), j.Attempts+1) {
			l.reconciled = false
		}
		return
	}
	_, err := q.update(ctx, j.ID, queue.Starting, queue.Queued, func(j *queue.Job) {
		j.GPUs, j.ContainerID, j.Attempts = nil, "", j.Attempts+1
		j.Reason = queue.ReasonStartFailed
		j.ReasonText = fmt.Sprintf("start %d failed, trying again: %v", j.Attempts, cause)
	}, q.queueEvent("jobs.start_failed", j.ID))
	q.unstage(j.ID)
	if err != nil {
		q.log.Error("put a job that failed to start back in the queue", "job", j.ID, "err", err)
		l.reconciled = false // it is left starting: the reconciliation requeues it
		return
	}
	l.retryAt[j.ID] = q.now().Add(time.Duration(j.Attempts+1) * retryAfter)
}

// requeueUnavailable puts starting job j back in the queue with
// engine_unavailable, its attempts as they were.
func (q *Launcher) requeueUnavailable(ctx context.Context, l *loop, j queue.Job, cause error) {
	_, err := q.update(ctx, j.ID, queue.Starting, queue.Queued, func(j *queue.Job) {
		j.GPUs, j.ContainerID = nil, ""
		j.Reason = queue.ReasonEngineUnavailable
		j.ReasonText = fmt.Sprintf("the Docker engine could not be reached; the job starts once it answers (no attempt counted): %v", cause)
	}, q.queueEvent("jobs.start_deferred", j.ID))
	q.unstage(j.ID) // staged again at its next start
	delete(l.unsure, j.ID)
	if err != nil {
		q.log.Error("put a job the engine could not start back in the queue", "job", j.ID, "err", err)
		l.reconciled = false
	}
}

// failStart fails a job that cannot start as it is.
func (q *Launcher) failStart(ctx context.Context, l *loop, j queue.Job, from queue.State, cause error) {
	if !q.fail(ctx, j, from, queue.ReasonStartRefused, "cannot start: "+cause.Error(), j.Attempts) {
		l.reconciled = false
	}
}

// fail ends job j failed, and reports whether the store took it.
func (q *Launcher) fail(ctx context.Context, j queue.Job, from queue.State, reason queue.Reason, text string, attempts int) bool {
	out, err := q.update(ctx, j.ID, from, queue.Failed, func(j *queue.Job) {
		j.Reason, j.ReasonText, j.EndedAt, j.Attempts = reason, text, q.now().UTC(), attempts
	}, q.queueEvent("jobs.fail", j.ID))
	if err != nil {
		q.log.Error("fail a job", "job", j.ID, "err", err)
		return false
	}
	q.jobEnded(out)
	return true
}

// removeContainer removes a container the queue created and will not use.
func (q *Launcher) removeContainer(ctx context.Context, cid string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	if err := q.engine.Remove(rctx, cid); err != nil {
		q.log.Warn("remove a job container", "container", cid, "err", err)
	}
}

// died looks at container cid, which died (or was told to stop), and
// ends its job when it ran.
func (q *Launcher) died(ctx context.Context, l *loop, cid string) {
	ictx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	jc, err := q.engine.Inspect(ictx, cid)
	if errors.Is(err, container.ErrNotFound) {
		// Removed before it was looked at: its job, if it ran, is lost.
		l.reconciled = false
		return
	}
	if err != nil {
		q.log.Warn("inspect a job container that died", "container", cid, "err", err)
		l.reconciled = false
		if errors.Is(err, container.ErrUnavailable) {
			q.engineLost(l, err)
		}
		return
	}
	if jc.JobID == "" || jc.Running {
		return
	}
	q.ended(ctx, l, jc)
}

// ended ends the running job of container jc, which exited. When the
// store cannot be read or written, jc is kept as a pending end and
// applied on the loop's next turns until the store takes it: the
// engine's record of the exit (code, finish time) is what the job ends
// with, however late the store comes back.
func (q *Launcher) ended(ctx context.Context, l *loop, jc container.JobContainer) {
	j, err := q.store.Job(ctx, jc.JobID)
	if errors.Is(err, ledger.ErrJobNotFound) {
		return
	}
	if err != nil {
		q.log.Warn("read the job of a container that exited; kept to apply later", "container", jc.ID, "job", jc.JobID, "err", err)
		l.pendingEnds[jc.ID] = jc
		return
	}
	if j.State != queue.Running || j.ContainerID != jc.ID {
		return
	}
	q.finish(ctx, l, j, jc)
}

// applyPendingEnds applies the exits the store could not take before,
// and keeps those it still cannot.
func (q *Launcher) applyPendingEnds(ctx context.Context, l *loop) {
	for cid, jc := range l.pendingEnds {
		delete(l.pendingEnds, cid)
		q.ended(ctx, l, jc) // kept again when the store still fails
		if _, again := l.pendingEnds[cid]; again {
			return // the store is still away: try the rest later
		}
	}
}

// finish ends running job j, whose container jc exited, with the state
// its cause gives: a cancel, a time limit, the policy, or its exit code.
func (q *Launcher) finish(ctx context.Context, l *loop, j queue.Job, jc container.JobContainer) {
	exit := jc.ExitCode
	state, reason := queue.Succeeded, queue.ReasonExitCode
	text := fmt.Sprintf("exited with code %d", exit)
	ev := q.queueEvent("jobs.end", j.ID)
	s, policy, byPolicy := q.stops.causes(j.ID, jc.ID)
	switch {
	case s != nil && s.preempt, s == nil && !byPolicy && j.Reason == queue.ReasonPreempted:
		// Whatever its exit code: a job that checkpoints on SIGTERM
		// and exits 0 has not finished.
		q.requeuePreempted(ctx, l, j, jc.ID, fmt.Sprintf("exit code %d after SIGTERM", exit))
		return
	case s != nil:
		state, reason, ev = s.state, s.reason, s.audit
		text = fmt.Sprintf("%s (exit code %d)", s.text, exit)
	case byPolicy:
		state, reason = queue.Failed, policy
		text = fmt.Sprintf("stopped by the waste policy (exit code %d)", exit)
	case q.engineMayHaveKilled(ctx, l, j, jc):
		return
	case exit != 0 && q.requeueFailed(ctx, l, j, jc):
		return
	case exit != 0:
		state = queue.Failed
		text += q.notRequeuedText(j)
		if jc.OOMKilled {
			text += ", killed for memory (--memory)"
		}
	}
	ended := jc.FinishedAt
	if ended.IsZero() {
		ended = q.now()
	}
	out, err := q.update(ctx, j.ID, queue.Running, state, func(j *queue.Job) {
		j.Reason, j.ReasonText, j.EndedAt, j.ExitCode = reason, text, ended.UTC(), &exit
	}, ev)
	var se *ledger.JobStateError
	if err != nil && !errors.As(err, &se) {
		q.log.Error("end a job; kept to apply later", "job", j.ID, "err", err)
		l.pendingEnds[jc.ID] = jc
		return
	}
	if err != nil {
		q.log.Warn("end a job", "job", j.ID, "err", err)
		return
	}
	if q.logRetention > 0 {
		l.retention[jc.ID] = ended.Add(q.logRetention)
	}
	q.jobEnded(out)
}

// killCheckDelay is how long the verdict on a job container killed by
// a signal waits for a sign that the engine is going away: a daemon that
// stops kills its containers first (SIGTERM, SIGKILL after their stop
// timeout) and stops answering only after them.
const killCheckDelay = 5 * time.Second

// engineMayHaveKilled reports whether the end of job j's container jc
// is not to be recorded now because the engine may have killed it: a
// signal's exit code (SIGKILL's 137, SIGTERM's 143), no OOM kill, no
// stop of the queue's. When the engine was lost since (the events stream
// broke and came back) or does not answer, the job is requeued as
// engine_failure; otherwise the verdict waits killCheckDelay for the
// engine to go away (see applyKillChecks), and the exit code decides
// after that.
func (q *Launcher) engineMayHaveKilled(ctx context.Context, l *loop, j queue.Job, jc container.JobContainer) bool {
	if jc.OOMKilled || jc.ExitCode != 137 && jc.ExitCode != 143 || l.killVerdict[jc.ID] {
		return false
	}
	if l.lostEngine || !q.engineAnswers(ctx) {
		q.requeueEngineFailure(ctx, l, j, jc)
		return true
	}
	l.killChecks[jc.ID] = killCheck{jc: jc, at: q.now().Add(killCheckDelay)}
	return true
}

// killCheck is an exit by a signal whose verdict waits until at.
type killCheck struct {
	jc container.JobContainer
	at time.Time
}

// applyKillChecks gives the exits by a signal that are due their
// verdict, and returns when the next is due (zero: none).
func (q *Launcher) applyKillChecks(ctx context.Context, l *loop) time.Time {
	var next time.Time
	for cid, k := range l.killChecks {
		if q.now().Before(k.at) {
			next = minTime(next, k.at)
			continue
		}
		delete(l.killChecks, cid)
		if !l.lostEngine && q.engineAnswers(ctx) {
			l.killVerdict[cid] = true // the job's own: its exit code decides
		}
		q.ended(ctx, l, k.jc)
		delete(l.killVerdict, cid)
	}
	return next
}

// engineAnswers reports whether the engine answers a ping.
func (q *Launcher) engineAnswers(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	return q.engine.Ping(pctx) == nil
}

// requeueEngineFailure puts running job j, whose container jc the engine
// killed, back in the queue as engine_failure, counting no requeue: it is
// not the job's fault. Its old container goes first, since it holds the
// name the next run's container takes.
func (q *Launcher) requeueEngineFailure(ctx context.Context, l *loop, j queue.Job, jc container.JobContainer) {
	if !q.requeueOn[config.RequeueEngineFailure] {
		q.failEngineKilled(ctx, l, j, jc)
		return
	}
	l.stale[j.ID] = jc.ID
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	if err := q.engine.Remove(rctx, jc.ID); err == nil {
		delete(l.stale, j.ID)
	}
	cancel()
	text := fmt.Sprintf("its container was killed when the Docker engine stopped (exit code %d); back in the queue, no requeue counted", jc.ExitCode)
	lost, err := q.update(ctx, j.ID, queue.Running, queue.Lost, func(j *queue.Job) {
		j.ReasonText = text
	}, q.queueEvent("jobs.lost", j.ID))
	if err == nil {
		_, err = q.update(ctx, j.ID, queue.Lost, queue.Queued, func(j *queue.Job) {
			j.GPUs, j.ContainerID, j.StartedAt = nil, "", time.Time{}
			j.Reason, j.ReasonText = queue.ReasonEngineFailure, text
		}, q.queueEvent("jobs.requeue", lost.ID))
	}
	var se *ledger.JobStateError
	if err != nil && !errors.As(err, &se) {
		q.log.Error("requeue a job the engine killed; kept to apply later", "job", j.ID, "err", err)
		l.pendingEnds[jc.ID] = jc
	}
}

// markLost records that job j's container vanished with no exit code,
// then requeues or fails it.
func (q *Launcher) markLost(ctx context.Context, j queue.Job, from queue.State) {
	out, err := q.update(ctx, j.ID, from, queue.Lost, func(j *queue.Job) {
		j.ReasonText = "its container vanished with no exit code"
	}, q.queueEvent("jobs.lost", j.ID))
	if err != nil {
		q.log.Error("mark a job lost", "job", j.ID, "err", err)
		return
	}
	q.resolveLost(ctx, out)
}

// resolveLost puts a lost job back in the queue, up to max_requeue
// times, and fails it after.
func (q *Launcher) resolveLost(ctx context.Context, j queue.Job) {
	if !q.requeueOn[config.RequeueLost] {
		q.fail(ctx, j, queue.Lost, queue.ReasonRequeueLimit,
			"its container vanished with no exit code; not requeued, as queue.requeue_on leaves out lost", j.Attempts)
		return
	}
	if j.Requeues >= q.maxRequeue {
		q.fail(ctx, j, queue.Lost, queue.ReasonRequeueLimit,
			fmt.Sprintf("its container vanished with no exit code, and it was requeued %d times already (queue.max_requeue)", j.Requeues), j.Attempts)
		return
	}
	_, err := q.update(ctx, j.ID, queue.Lost, queue.Queued, func(j *queue.Job) {
		j.Requeues++
		j.GPUs, j.ContainerID, j.StartedAt = nil, "", time.Time{}
		j.Reason = queue.ReasonLostRequeued
		j.ReasonText = fmt.Sprintf("its container vanished with no exit code; back in the queue (requeue %d of %d)", j.Requeues, q.maxRequeue)
	}, q.queueEvent("jobs.requeue", j.ID))
	q.unstage(j.ID)
	if err != nil {
		q.log.Error("requeue a lost job", "job", j.ID, "err", err)
	}
}

// sameGPUs reports whether a container's GPUs are the job's gpus, in any
// order.
func sameGPUs(have container.GPURequest, gpus []string) bool {
	if have.All || len(have.IDs) != len(gpus) {
		return false
	}
	a, b := slices.Clone(have.IDs), slices.Clone(gpus)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// adoptOnItsGPUs moves starting job j's GPUs to those its running
// container jc holds, so that the container can be adopted as the job's
// run; ok is false when the store refused (another job holds one of
// them now, or the job moved on).
func (q *Launcher) adoptOnItsGPUs(ctx context.Context, j queue.Job, jc container.JobContainer) (queue.Job, bool) {
	gpus := jc.GPUs.IDs
	if jc.GPUs.All || len(gpus) == 0 || info(j).memory == 0 && len(gpus) != j.GPUsRequested || info(j).memory > 0 && len(gpus) != 1 {
		return j, false // not a container this queue's spec made for j
	}
	moved, err := q.update(ctx, j.ID, queue.Starting, queue.Starting, func(x *queue.Job) {
		x.GPUs = slices.Clone(gpus)
		x.ReasonText = "its container kept running on " + q.node + " while the node was lost; adopted on " + strings.Join(gpus, ", ")
	}, q.queueEvent("jobs.adopt", j.ID))
	if err != nil {
		q.log.Info("a job's container from before its node was lost holds other GPUs than the fleet placed it on, and they are not free; removing it and starting anew",
			"job", j.ID, "container", jc.ID, "had", strings.Join(gpus, ","), "gpus", strings.Join(j.GPUs, ","), "err", err)
		return j, false
	}
	q.log.Info("adopted a job whose container kept running while the node was lost, on the GPUs it holds", "job", j.ID, "container", jc.ID,
		"gpus", strings.Join(gpus, ","), "placed_on", strings.Join(j.GPUs, ","))
	return moved, true
}
