package run

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// reconcile sets the store and the engine's job containers straight, at
// start-up and whenever the events stream was down:
//
//   - a starting or running job whose container runs is adopted (running);
//   - one whose container exited is ended with its exit code;
//   - a starting job whose container was created but never started, or
//     was never created, goes back to the queue: it never ran, so it
//     cannot run twice;
//   - a running job whose container is gone is lost (requeued or failed);
//   - in a fleet, a running container of a job the fleet requeued when
//     this node was lost, and has not started elsewhere, is adopted (see
//     adopt);
//   - a container whose job is not starting or running is stopped when it
//     runs (no job runs twice), and removed once past log retention;
//   - the staged mounts of every job that is not starting or running are
//     detached (it ended while the agent was down);
//   - a container whose job the ledger does not have, or cannot read, is
//     left alone: a lost ledger must not kill jobs.
func (q *Launcher) reconcile(ctx context.Context, l *loop) error {
	lctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	cs, err := q.engine.List(lctx)
	if err != nil {
		return err
	}
	active, err := q.store.ActiveJobs(ctx, queue.Starting, queue.Running)
	if err != nil {
		return err
	}
	var waiting map[string]bool
	if q.fleet != nil {
		// In a fleet the ledger holds every node's jobs: this node
		// settles its own, but for the starting ones whose intents wait
		// for this node's claim: no start of theirs was lost.
		cctx, cancel := q.fleet.call(ctx)
		var err error
		waiting, err = q.fleet.Store.Unclaimed(cctx, q.node)
		cancel()
		if err != nil {
			return err
		}
		active = slices.DeleteFunc(active, func(j queue.Job) bool { return !q.mine(j) || waiting[j.ID] })
		q.fleet.reconciled = q.now()
	}
	byJob := make(map[string]container.JobContainer, len(cs))
	for _, c := range cs {
		byJob[c.JobID] = c
	}
	isActive := make(map[string]bool, len(active))
	for _, j := range active {
		isActive[j.ID] = true
		jc, ok := byJob[j.ID]
		if ok && foreign(j, jc) {
			q.log.Warn("a container with this job's name started before the job was submitted; leaving it as it is", "container", jc.ID, "job", j.ID)
			ok = false
		}
		if ok {
			q.settle(ctx, l, j, jc)
			continue
		}
		if j.State == queue.Starting && l.unsure[j.ID] {
			q.requeueUnavailable(ctx, l, j, errors.New("its container was not created"))
		} else if j.State == queue.Starting {
			q.backToQueue(ctx, j, "the agent stopped before the job's container was created; back in the queue")
		} else if j.Reason == queue.ReasonPreempted {
			q.requeuePreempted(ctx, l, j, "", "its container was gone after a restart of the agent")
		} else {
			q.markLost(ctx, j, queue.Running)
		}
	}
	for _, c := range cs {
		if c.JobID == "" || isActive[c.JobID] {
			continue
		}
		j, err := q.store.Job(ctx, c.JobID)
		if err != nil {
			// A job the ledger does not have (a lost or older ledger,
			// which the agent refuses at start) or cannot read now is
			// no reason to kill its container: the operator decides.
			q.log.Warn("a job container's job cannot be read from the ledger; leaving the container as it is", "container", c.ID, "job", c.JobID, "err", err)
			continue
		}
		if foreign(j, c) {
			q.log.Warn("a job container started before its job was submitted: it belongs to a job of a lost ledger; leaving it as it is", "container", c.ID, "job", c.JobID)
			continue
		}
		ended := j.State.Ended()
		switch {
		case c.Running && q.fleet != nil && j.State == queue.Starting && j.Node == q.node && j.ContainerID == "":
			// Placed here again while its run from before kept running
			// (its intent waits for this node's claim, or came after the
			// active jobs were read): the claim adopts it (launchIntent).
			isActive[j.ID] = true // its staged mounts stay
		case c.Running && q.adopt(ctx, l, j, c):
			isActive[j.ID] = true // its staged mounts stay
		case c.Running:
			q.log.Warn("a job container runs while its job does not; stopping it", "container", c.ID, "job", c.JobID, "state", j.State)
			q.removeContainer(ctx, c.ID)
		case ended && q.logRetention > 0:
			l.retention[c.ID] = j.EndedAt.Add(q.logRetention)
		case !ended:
			q.removeContainer(ctx, c.ID) // never ran for a live job
		}
	}
	q.unstageEnded(isActive)
	return nil
}

// foreign reports whether container c, which carries job j's ID, was
// started before j was submitted: the container of another job that had
// the ID in a ledger since lost. It is neither adopted nor stopped.
func foreign(j queue.Job, c container.JobContainer) bool {
	return !c.StartedAt.IsZero() && !j.SubmittedAt.IsZero() && c.StartedAt.Before(j.SubmittedAt)
}

// settle sets starting or running job j straight with its container jc.
func (q *Launcher) settle(ctx context.Context, l *loop, j queue.Job, jc container.JobContainer) {
	st := j.State
	if jc.Running || jc.Exited {
		delete(l.unsure, j.ID) // it started
	}
	switch {
	case jc.Running:
		if st == queue.Starting {
			q.markRunning(ctx, j, jc.ID, jc.StartedAt.UTC())
		} else if j.ContainerID != jc.ID {
			q.log.Warn("adopt a job container under another id", "job", j.ID, "container", jc.ID)
		}
	case jc.Exited:
		if st == queue.Starting {
			q.markRunning(ctx, j, jc.ID, jc.StartedAt.UTC())
			var err error
			if j, err = q.store.Job(ctx, j.ID); err != nil || j.State != queue.Running {
				return
			}
		}
		if j.ContainerID == "" {
			j.ContainerID = jc.ID
		}
		q.finish(ctx, l, j, jc)
	case st == queue.Starting && l.unsure[j.ID]:
		q.removeContainer(ctx, jc.ID)
		q.requeueUnavailable(ctx, l, j, errors.New("its container was created but not started"))
	case st == queue.Starting:
		q.removeContainer(ctx, jc.ID)
		q.backToQueue(ctx, j, "the agent stopped between creating the job's container and starting it; back in the queue")
	default:
		q.removeContainer(ctx, jc.ID)
		q.markLost(ctx, j, st)
	}
}

// backToQueue puts a starting job that never ran back in the queue.
func (q *Launcher) backToQueue(ctx context.Context, j queue.Job, text string) {
	_, err := q.update(ctx, j.ID, queue.Starting, queue.Queued, func(j *queue.Job) {
		j.GPUs, j.ContainerID = nil, ""
		j.Reason, j.ReasonText = queue.ReasonStartFailed, text
	}, q.queueEvent("jobs.requeue", j.ID))
	q.unstage(j.ID)
	if err != nil {
		q.log.Error(fmt.Sprintf("requeue job %s", j.ID), "err", err)
	}
}
