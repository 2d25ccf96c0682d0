package run

import (
	"context"
	"strings"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// adopt takes back queued job j, whose container c kept running on this
// node while the fleet held the node for lost: the fleet's scheduler
// requeued the job when the node's lease expired, and for as long as it
// has not started the job elsewhere, the run that survived is the job's
// (issue 29: "a job that kept running there is adopted if the fleet has
// not started it elsewhere"). The job moves queued -> starting -> running
// on this node, on the GPUs c holds, through the store's compare-and-set:
// a start intent the scheduler wrote meanwhile (the job is no longer
// queued) or another job that holds one of those GPUs refuses the move,
// and the caller stops c, so that no job ever runs twice; but an intent
// that placed the job on this node again leaves c to that intent's
// claim, which adopts it. It reports whether c stays.
func (q *Launcher) adopt(ctx context.Context, l *loop, j queue.Job, c container.JobContainer) bool {
	if q.fleet == nil || j.State != queue.Queued || !c.Running || j.Held || q.stops.pending(j.ID) != nil {
		return false // held or cancelled since: its container is stopped
	}
	gpus := c.GPUs.IDs
	if c.GPUs.All || len(gpus) == 0 || info(j).memory == 0 && len(gpus) != j.GPUsRequested {
		return false // not a container this queue's spec made for j
	}
	starting, err := q.update(ctx, j.ID, queue.Queued, queue.Starting, func(j *queue.Job) {
		j.Node, j.GPUs, j.ContainerID, j.Reason = q.node, gpus, "", ""
		j.ReasonText = "its container kept running on " + q.node + " while the node was lost; adopted on " + strings.Join(gpus, ", ")
	}, q.queueEvent("jobs.adopt", j.ID))
	if err != nil {
		if cur, rerr := q.store.Job(ctx, j.ID); rerr == nil && cur.State == queue.Starting && cur.Node == q.node && cur.ContainerID == "" {
			// Placed on this node again meanwhile: the claim of its
			// intent adopts the run (launchIntent), on the GPUs it holds.
			q.log.Info("a job's container kept running while the node was lost, and the fleet has placed the job on this node again; its claim adopts the container",
				"job", j.ID, "container", c.ID)
			return true
		}
		q.log.Info("a job's container kept running while the node was lost, and the fleet has placed the job since; stopping the container",
			"job", j.ID, "container", c.ID, "err", err)
		return false
	}
	q.log.Info("adopted a job whose container kept running while the node was lost", "job", j.ID, "container", c.ID, "gpus", strings.Join(gpus, ","))
	if !q.markRunning(ctx, starting, c.ID, c.StartedAt.UTC()) {
		// Left starting on its GPUs here: the next reconciliation
		// finds its container running and marks it running.
		l.reconciled = false
	}
	return true
}
