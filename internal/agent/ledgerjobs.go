// The queue's start-up check of the ledger against the engine: the job
// containers of this node are the one record of its jobs outside the
// ledger, so a ledger that does not know them was lost or replaced, and
// the agent stops before the queue's reconciliation cleans up after it.

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// jobLister lists the job containers of the agent's node, in any state;
// docker.Jobs is one.
type jobLister interface {
	List(ctx context.Context) ([]container.JobContainer, error)
}

// listTimeout bounds the start-up list of job containers.
const listTimeout = time.Minute

// checkJobContainers compares the job containers of node with the jobs
// of the ledger at where, before the queue reconciles them:
//
//   - containers exist but the ledger has no job at all: the ledger was
//     lost (a new file, another database); refused, naming the fix;
//   - a container that runs, or was created and never ran, belongs to a
//     job the ledger does not have: the ledger is older than the node's
//     jobs (restored from an older copy); refused too, since the queue
//     would hand that job's GPUs to another;
//   - otherwise the job sequence is raised above the highest job number
//     the containers carry, so that no ID is given twice even when the
//     ledger forgot the jobs of containers that ended.
//
// An engine that cannot be reached is logged and the check skipped.
// Nothing is stopped or removed here: which containers go is the
// operator's choice once told.
func checkJobContainers(ctx context.Context, jobs ledger.JobStore, engine jobLister, node, where string, log *slog.Logger) error {
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	cs, err := engine.List(lctx)
	if err != nil {
		// An engine away at start is no fault of the ledger's: the agent
		// runs, the queue waits for the engine, and its reconciliation
		// leaves alone any container whose job the ledger lacks.
		log.Warn("cannot list the node's job containers to check them against the ledger; starting unchecked", "node", node, "err", err)
		return nil
	}
	if len(cs) == 0 {
		return nil
	}
	some, err := jobs.Jobs(ctx, ledger.JobFilter{IncludeEnded: true, Limit: 1})
	if err != nil {
		return fmt.Errorf("queue: check the ledger's jobs: %w", err)
	}
	rm := removeCommand(node)
	if len(some) == 0 {
		return fmt.Errorf("%d job containers of node %s exist but the ledger (%s) has no jobs: it was lost or replaced, and starting on it would reuse their job IDs and clean them up; "+
			"restore the ledger (stop, put the last copy `gpumeter ledger backup` made in its place, start again), "+
			"or remove them with %s", len(cs), node, where, rm)
	}
	var floor int64
	var unknown []string
	for _, c := range cs {
		seq, ok := ledger.JobSeq(c.JobID)
		if ok {
			floor = max(floor, seq)
		}
		if c.Exited {
			continue // holds no GPU; kept for its logs
		}
		_, err := jobs.Job(ctx, c.JobID)
		switch {
		case errors.Is(err, ledger.ErrJobNotFound):
			unknown = append(unknown, c.JobID)
		case err != nil:
			return fmt.Errorf("queue: check job %s of container %.12s against the ledger: %w", c.JobID, c.ID, err)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("%d job containers of node %s that run or are about to belong to jobs the ledger (%s) does not have (%s): the ledger is older than they are; "+
			"restore a newer copy, or remove them with %s", len(unknown), node, where, strings.Join(unknown, ", "), rm)
	}
	if floor > 0 {
		if err := jobs.RaiseJobSequence(ctx, floor); err != nil {
			return fmt.Errorf("queue: %w", err)
		}
	}
	return nil
}

// removeCommand is the command that removes every job container of node.
func removeCommand(node string) string {
	return "docker rm -f $(docker ps -aq --filter label=" + spec.JobLabel + " --filter " + shellQuote("label="+spec.NodeLabel+"="+node) + ")"
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.=:/@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
