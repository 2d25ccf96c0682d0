package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
)

// Job is one job of the GPU queue as the ledger keeps it. The store does
// not interpret State, Reason or Request: the queue owns their meaning.
type Job struct {
	ID         string // j-000123, from Seq; assigned by SubmitJob
	Seq        int64  // the ledger's job sequence number
	Node       string
	Name       string
	User       string
	Team       string
	State      string
	Reason     string // a reason code, also on ended jobs
	ReasonText string
	// GPUsRequested is how many GPUs the job asks for; GPUs are the UUIDs
	// it holds.
	GPUsRequested int
	GPUs          []string
	Image         string
	Command       []string
	// EnvKeys are the names of the job's environment variables. The
	// ledger never keeps their values.
	EnvKeys []string
	// Request is the submitted request, as the queue encodes it (without
	// environment values); the store keeps it as it is.
	Request     json.RawMessage
	TimeLimit   time.Duration
	SubmittedAt time.Time // set by SubmitJob when zero
	StartedAt   time.Time // zero when unknown
	EndedAt     time.Time // zero when unknown
	ExitCode    *int      // nil when none
	ContainerID string
	Held        bool
	Attempts    int
	Requeues    int
	// Placement is the scheduler's record of where the job was placed
	// and why (JSON, as the queue encodes it); nil before it is placed.
	// The store keeps it as it is.
	Placement json.RawMessage
	UpdatedAt time.Time // set by every write
}

// JobFilter selects jobs. Without states, Jobs returns the live ones
// (those not in an ended state) and, with IncludeEnded, the ended ones too.
type JobFilter struct {
	User   string   // empty: every user
	States []string // empty: every state (see IncludeEnded)
	// Ended lists the states in which a job has ended; IncludeEnded
	// false leaves jobs in them out. The store knows no state's meaning,
	// so the caller names them.
	Ended        []string
	IncludeEnded bool
	Limit        int // 0: no limit
}

// JobStore keeps the queue's jobs. Both backends implement it. The store
// changes a job's state by compare-and-set on the state's name only: which
// changes are allowed is the queue's transition table (queue.CanTransition),
// which the caller checks before it calls UpdateJob.
type JobStore interface {
	// SubmitJob adds job, with the next ID from the ledger's job
	// sequence, and audit (its Target set to the ID when empty) in one
	// transaction: both are written, or neither. It returns the job as
	// stored.
	SubmitJob(ctx context.Context, job Job, audit audit.Event) (Job, error)
	// Job returns the job with id, or an error wrapping ErrJobNotFound.
	Job(ctx context.Context, id string) (Job, error)
	// Jobs returns the jobs f selects, by ID (oldest first).
	Jobs(ctx context.Context, f JobFilter) ([]Job, error)
	// UpdateJob applies change to the job with id and writes it, with
	// audit (when its Kind is set), in one transaction, but only while
	// the job's state is still from; otherwise it returns a
	// *JobStateError naming the state the job is in, and writes nothing.
	// change may set State, Reason, ReasonText, GPUs, StartedAt, EndedAt,
	// ExitCode, ContainerID, Held, Attempts, Requeues and Placement;
	// other fields are kept.
	UpdateJob(ctx context.Context, id, from string, change func(*Job), audit audit.Event) (Job, error)
	// SetHeld sets the job's Held flag while its state is from, as
	// UpdateJob does.
	SetHeld(ctx context.Context, id, from string, held bool, audit audit.Event) (Job, error)
	// ActiveJobs returns the jobs in the given states (for restart
	// reconciliation: those starting and running), oldest first.
	ActiveJobs(ctx context.Context, states ...string) ([]Job, error)
	// RaiseJobSequence makes the next ID SubmitJob gives at least
	// floor+1, and leaves a sequence already past floor as it is: after a
	// ledger was lost or restored from an older copy, the agent passes
	// the highest job number its node's containers carry, so that no ID
	// is given twice.
	RaiseJobSequence(ctx context.Context, floor int64) error
}

// ErrJobNotFound is wrapped by errors for a job ID the ledger does not have.
var ErrJobNotFound = errors.New("no such job")

// JobStateError is returned by a compare-and-set write when the job's
// state is no longer the one the caller expected.
type JobStateError struct {
	ID     string
	Want   string // the state the caller expected
	Actual string // the state the job is in
}

func (e *JobStateError) Error() string {
	return fmt.Sprintf("job %s is %s, not %s", e.ID, e.Actual, e.Want)
}

// JobSeq is the sequence number of job ID id (j-000123: 123); ok is
// false for a string that is no job ID.
func JobSeq(id string) (seq int64, ok bool) {
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
