package docker

import (
	"context"
	"time"

	"github.com/gpumeter/gpumeter/internal/queue"
)

// JobStops is the queue as a stop from outside it needs it: told first
// that a job's container is being stopped, and why, so that the job ends
// with that reason and not as an exit.
type JobStops interface {
	ExpectStop(containerID string, reason queue.Reason)
}

// Stopper is the one way a container is stopped from outside the queue,
// by the API or by the policy: when the inventory shows the container as
// a queue job's, the queue hears of the stop first, with the stopper's
// reason; any other container is stopped directly. Both end in the same
// engine call as the queue's own stops (Jobs.Stop), whose reason the
// queue knows already.
type Stopper struct {
	inv    *Inventory
	jobs   JobStops // nil: no queue on this node
	node   string   // whose queue jobs is
	reason queue.Reason
}

// NewStopper returns the stopper of inv's containers that tells jobs (nil
// when the node runs no queue), the queue of node, of the stop of one of
// its jobs' containers, for reason. A container labelled with another
// node's job is that node's: this queue is not told of it.
func NewStopper(inv *Inventory, jobs JobStops, node string, reason queue.Reason) Stopper {
	return Stopper{inv: inv, jobs: jobs, node: node, reason: reason}
}

// Stop stops container id: SIGTERM (or the container's stop signal),
// then SIGKILL once grace has passed. grace is rounded up to whole
// seconds; a negative grace means the container's own stop timeout. Stop
// returns once the container has stopped or ctx ends. An error for a
// container the daemon does not know wraps container.ErrNotFound, one of
// a daemon that cannot serve container.ErrUnavailable. Stopping a stopped
// container is not an error.
func (s Stopper) Stop(ctx context.Context, id string, grace time.Duration) error {
	if s.jobs != nil {
		if c, ok := s.inv.Lookup(id); ok && c.Job(s.node).Ours(s.node) {
			s.jobs.ExpectStop(c.ID, s.reason)
		}
	}
	return s.inv.cli.stop(ctx, id, grace)
}
