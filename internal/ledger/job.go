package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// JobFilter selects jobs. Without states, Jobs returns the live ones
// (those not in a state queue.State.Ended reports) and, with
// IncludeEnded, the ended ones too.
type JobFilter struct {
	User         string        // empty: every user
	States       []queue.State // empty: every state (see IncludeEnded)
	IncludeEnded bool
	Limit        int // 0: no limit
	// ArrayID selects the tasks of one array job: the jobs whose IDs are
	// ArrayID_<index> (j-000123_0, j-000123_1, ...). Empty: every job.
	ArrayID string
	// After keeps the jobs whose Seq is above it, for keyset paging: the
	// Seq of the last job of the page before. 0: from the first.
	After int64
}

// JobCancel is how CancelJobs ends the queued jobs it cancels.
type JobCancel struct {
	Reason     queue.Reason
	ReasonText string
	EndedAt    time.Time
}

// ArrayTaskID is the ID of task index of array job arrayID: j-000123_4.
func ArrayTaskID(arrayID string, index int) string { return arrayID + "_" + strconv.Itoa(index) }

// JobStore keeps the queue's jobs as queue.Job, the queue's own type; the
// backends decode its request and placement where they read their rows.
// Both backends implement it. The store changes a job's state by
// compare-and-set on the state only: which changes are allowed is the
// queue's transition table (queue.CanTransition), which the caller checks
// before it calls UpdateJob.
type JobStore interface {
	// SubmitJob adds job, with the next ID from the ledger's job
	// sequence, and audit (its Target set to the ID when empty) in one
	// transaction: both are written, or neither. It returns the job as
	// stored.
	SubmitJob(ctx context.Context, job queue.Job, audit audit.Event) (queue.Job, error)
	// Job returns the job with id, or an error wrapping ErrJobNotFound.
	Job(ctx context.Context, id string) (queue.Job, error)
	// Jobs returns the jobs f selects, by ID (oldest first).
	Jobs(ctx context.Context, f JobFilter) ([]queue.Job, error)
	// CountJobs returns how many jobs f selects, its Limit and After
	// aside: the total a page of Jobs is one part of, in one query.
	CountJobs(ctx context.Context, f JobFilter) (int, error)
	// CancelJobs moves the jobs among ids that are still queued to
	// cancelled as c says, and writes audit (when its Kind is set; its
	// Count raised by the number of jobs cancelled) in the same
	// transaction: one write for many jobs, as a bulk cancel needs. It
	// returns the jobs it cancelled, oldest first; an id that is not
	// queued (it started or ended meanwhile, or is unknown) is left as it
	// is. The caller checks the transition, as for UpdateJob.
	CancelJobs(ctx context.Context, ids []string, c JobCancel, audit audit.Event) ([]queue.Job, error)
	// UpdateJob applies change to the job with id and writes it, with
	// audit (when its Kind is set), in one transaction, but only while
	// the job's state is still from; otherwise it returns a
	// *JobStateError naming the state the job is in, and writes nothing.
	// change may set State, Reason, ReasonText, GPUs, StartedAt, EndedAt,
	// ExitCode, ContainerID, Held, Attempts, Requeues, Placement and Node
	// (a fleet's job leaves its lost node as it goes back to the queue);
	// other fields are kept. A job it leaves starting or running holds
	// its GPUs on its node in the same transaction (Fleet's allocations),
	// and one it moves out of those states lets them go: a GPU that
	// another job holds whole is an error wrapping ErrDoubleAllocation,
	// and nothing is written.
	UpdateJob(ctx context.Context, id string, from queue.State, change func(*queue.Job), audit audit.Event) (queue.Job, error)
	// SetHeld sets the job's Held flag while its state is from, as
	// UpdateJob does.
	SetHeld(ctx context.Context, id string, from queue.State, held bool, audit audit.Event) (queue.Job, error)
	// ActiveJobs returns the jobs in the given states (for restart
	// reconciliation: those starting and running), oldest first.
	ActiveJobs(ctx context.Context, states ...queue.State) ([]queue.Job, error)
	// RaiseJobSequence makes the next ID SubmitJob gives at least
	// floor+1, and leaves a sequence already past floor as it is: after a
	// ledger was lost or restored from an older copy, the agent passes
	// the highest job number its node's containers carry, so that no ID
	// is given twice.
	RaiseJobSequence(ctx context.Context, floor int64) error
	// SubmitArray adds an array job: one task for each of indices, each
	// a copy of template with its Request's Array set (the array's id,
	// the task's index, len(indices), maxRunning), and audit (its Target
	// set to the array's id when empty) in one transaction. The array
	// takes one number of the job sequence for its id (j-000123, never
	// also a plain job's) and one more for each task's row, in the
	// order of indices, so that tasks list in that order after it; the
	// tasks' IDs are ArrayTaskID(id, index). It returns the tasks as
	// stored.
	SubmitArray(ctx context.Context, template queue.Job, indices []int, maxRunning int, audit audit.Event) ([]queue.Job, error)
}

// ErrJobNotFound is wrapped by errors for a job ID the ledger does not have.
var ErrJobNotFound = errors.New("no such job")

// JobStateError is returned by a compare-and-set write when the job's
// state is no longer the one the caller expected.
type JobStateError struct {
	ID     string
	Want   queue.State // the state the caller expected
	Actual queue.State // the state the job is in
}

func (e *JobStateError) Error() string {
	return fmt.Sprintf("job %s is %s, not %s", e.ID, e.Actual, e.Want)
}

// SplitArrayTaskID reads a task's ID, j-000123_4, as its array's ID and
// its index; ok is false for an ID that is no array task's.
func SplitArrayTaskID(id string) (arrayID string, index int, ok bool) {
	i := strings.LastIndexByte(id, '_')
	if i < 0 {
		return "", 0, false
	}
	arrayID, n := id[:i], id[i+1:]
	if _, isJob := plainJobSeq(arrayID); !isJob || n == "" || len(n) > 7 || strings.TrimLeft(n, "0123456789") != "" || len(n) > 1 && n[0] == '0' {
		return "", 0, false
	}
	index, err := strconv.Atoi(n)
	return arrayID, index, err == nil
}

// JobSeq is the sequence number of job ID id (j-000123: 123), and of an
// array task's ID its array's (j-000123_4: 123), the number no later ID
// may take; ok is false for a string that is no job ID.
func JobSeq(id string) (seq int64, ok bool) {
	if arrayID, _, isTask := SplitArrayTaskID(id); isTask {
		id = arrayID
	}
	return plainJobSeq(id)
}

// plainJobSeq is JobSeq of an ID that is no task's.
func plainJobSeq(id string) (seq int64, ok bool) {
	n, found := strings.CutPrefix(id, "j-")
	if !found || len(n) < 6 {
		return 0, false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	seq, err := strconv.ParseInt(n, 10, 64)
	return seq, err == nil && seq > 0
}

// JobID is the ID of the job with sequence number seq: j-000123. IDs
// sort as their numbers do up to 999999; past it they grow a digit.
func JobID(seq int64) string { return fmt.Sprintf("j-%06d", seq) }
