package run

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// ActionCancelBulk is the audit action of a bulk cancel: one event for
// all the jobs it cancels, its Count how many.
const ActionCancelBulk = "job.cancel_bulk"

// cancelText is the reason text of a job cancelled by caller ("": by
// nobody named).
func cancelText(caller string) string {
	if caller == "" {
		return "cancelled"
	}
	return "cancelled by " + caller
}

// stoppingText is the reason text of a started job Cancel answers for:
// it is being stopped, and ends with text once it has.
func stoppingText(text string) string {
	return "being stopped (" + text + "): SIGTERM, then SIGKILL after queue.stop_grace; it ends cancelled once its container has stopped"
}

// CancelWait is Cancel that returns once the job has ended, or when ctx
// ends: a started job's stop takes up to queue.stop_grace and a kill.
func (q *Service) CancelWait(ctx context.Context, id string, ev audit.Event) (queue.Job, error) {
	j, done, err := q.cancel(ctx, id, ev)
	if err != nil || done == nil {
		return j, err
	}
	select {
	case <-done:
		return q.store.Job(context.WithoutCancel(ctx), id)
	case <-ctx.Done():
		return queue.Job{}, fmt.Errorf("cancel %s: the job is being stopped: %w", id, ctx.Err())
	}
}

// CancelFilter selects the jobs CancelMatching cancels: every one of
// User's (every user's when "") in one of States whose name matches Name
// (a path.Match pattern; "" matches any), held ones only with Held.
type CancelFilter struct {
	User   string
	States []queue.State // at least one, of queued, starting and running
	Held   bool          // only held jobs: States may then name queued only
	Name   string
}

// cancelStates are the states a bulk cancel may name.
var cancelStates = []queue.State{queue.Queued, queue.Starting, queue.Running}

// check says what is wrong with f, as a *BadRequest naming the field.
func (f CancelFilter) check() error {
	if len(f.States) == 0 {
		return &BadRequest{Field: "state", Text: "name the states of the jobs to cancel: queued, starting or running; a bulk cancel without one would cancel everything"}
	}
	for _, s := range f.States {
		if !slices.Contains(cancelStates, s) {
			return &BadRequest{Field: "state", Text: fmt.Sprintf("%q jobs cannot be cancelled; name queued, starting or running", s)}
		}
	}
	if f.Held && slices.ContainsFunc(f.States, func(s queue.State) bool { return s != queue.Queued }) {
		return &BadRequest{Field: "held", Text: "only queued jobs are held; with held, name state queued alone"}
	}
	if _, err := path.Match(f.Name, ""); err != nil {
		return &BadRequest{Field: "name", Text: fmt.Sprintf("%q is not a pattern (%v); give a shell pattern such as train-[0-9]", f.Name, err)}
	}
	return nil
}

// BulkCancel is what CancelMatching did.
type BulkCancel struct {
	// IDs are the jobs cancelled, oldest first: the queued ones it ended
	// and the started ones it asked to stop.
	IDs []string
	// Stopping is how many of IDs were started: they end once their
	// containers have stopped, in the background.
	Stopping int
}

// CancelMatching cancels every job f selects: the queued ones in one
// write of the store, with ev as one audit event (action
// job.cancel_bulk, its Count the jobs cancelled); the started ones are
// asked to stop, as Cancel does, without waiting for them. A job that
// started between the listing and the write is asked to stop too, and is
// not in the event's count. A bad filter is a *BadRequest.
func (q *Service) CancelMatching(ctx context.Context, f CancelFilter, ev audit.Event) (BulkCancel, error) {
	if err := f.check(); err != nil {
		return BulkCancel{}, err
	}
	if err := queue.Transition(queue.Queued, queue.Cancelled); err != nil {
		return BulkCancel{}, err
	}
	ev.Action, ev.Target = ActionCancelBulk, filterTarget(f)
	ev = q.fill(ev, ActionCancelBulk, "")
	text := cancelText(ev.Caller)
	jobs, err := q.store.Jobs(ctx, ledger.JobFilter{User: f.User, States: f.States, IncludeEnded: true})
	if err != nil {
		return BulkCancel{}, err
	}
	var queued []string
	var started []queue.Job
	byID := map[string]queue.Job{}
	seq := make(map[string]int64, len(jobs))
	for _, j := range jobs {
		seq[j.ID] = j.Seq
		if f.Held && !j.Held {
			continue
		}
		if ok, _ := path.Match(f.Name, j.Name); f.Name != "" && !ok {
			continue
		}
		if j.State == queue.Queued {
			queued = append(queued, j.ID)
			byID[j.ID] = j
		} else {
			started = append(started, j)
		}
	}
	ev.Count = int64(len(started)) // the store adds the queued ones it ends
	ended, err := q.store.CancelJobs(ctx, queued, ledger.JobCancel{Reason: queue.ReasonCancelled, ReasonText: text, EndedAt: q.now().UTC()}, ev)
	if err != nil {
		return BulkCancel{}, err
	}
	ev.Count += int64(len(ended))
	q.auditedLater(ctx, ev)
	out := BulkCancel{}
	for _, j := range ended {
		q.launch.jobEnded(j)
		out.IDs = append(out.IDs, j.ID)
		delete(byID, j.ID)
	}
	// The ones left in byID moved on meanwhile: those that started are
	// stopped as the others.
	for _, j := range byID {
		now, err := q.store.Job(ctx, j.ID)
		if err != nil {
			return out, err
		}
		if now.State == queue.Starting || now.State == queue.Running {
			started = append(started, now)
		}
	}
	for _, j := range started {
		ok, err := q.stopStarted(ctx, j, text)
		if err != nil {
			return out, err
		}
		if ok {
			out.IDs = append(out.IDs, j.ID)
			out.Stopping++
		}
	}
	if len(out.IDs) > 0 {
		q.launch.poke()
	}
	slices.SortFunc(out.IDs, func(a, b string) int { return cmp.Compare(seq[a], seq[b]) })
	return out, nil
}

// stopStarted asks for the stop of started job j as a cancel with text,
// with no audit event of its own (the bulk cancel's covers it), and
// reports whether it did: false for a job that ended meanwhile. A queue
// that runs no containers ends it itself.
func (q *Service) stopStarted(ctx context.Context, j queue.Job, text string) (bool, error) {
	if q.launch.runs() {
		q.launch.askStop(j.ID, &stop{state: queue.Cancelled, reason: queue.ReasonCancelled, text: text})
		return true, nil
	}
	out, err := q.update(ctx, j.ID, j.State, queue.Cancelled, func(j *queue.Job) {
		j.Reason, j.ReasonText, j.EndedAt, j.GPUs = queue.ReasonCancelled, text, q.now().UTC(), nil
	}, audit.Event{})
	var se *ledger.JobStateError
	if errors.As(err, &se) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	q.launch.jobEnded(out)
	return true, nil
}

// filterTarget is the audit target of a bulk cancel: its filter, as the
// API takes it.
func filterTarget(f CancelFilter) string {
	parts := []string{"state=" + strings.Join(queue.StateNames(f.States), ",")}
	if f.Held {
		parts = append(parts, "held")
	}
	if f.Name != "" {
		parts = append(parts, "name="+f.Name)
	}
	if f.User == "" {
		parts = append(parts, "all_users")
	} else {
		parts = append(parts, "user="+f.User)
	}
	return strings.Join(parts, " ")
}
