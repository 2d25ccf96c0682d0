package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// submitArray stores job as the tasks of an array job, one for each of
// a's indices, and returns the first. Every task gets the environment
// values in tmp (the temporary file Submit wrote, "" for none) as a
// file of its own: a hard link of the one file, so that the values are
// written once and each task's end removes its own. A crash before the
// links leaves tasks whose env files are missing, which fail at start
// saying so and never run without their environment.
func (q *Service) submitArray(ctx context.Context, job queue.Job, a queue.ArraySpec, ev audit.Event, tmp string) (queue.Job, error) {
	removeTmp := func() {
		if tmp != "" {
			_ = os.Remove(tmp)
		}
	}
	if n := len(a.Indices); n == 0 || n > queue.MaxArrayTasks || a.MaxRunning < 0 {
		removeTmp()
		return queue.Job{}, &BadRequest{Field: "array",
			Text: fmt.Sprintf("an array has 1 to %d tasks and a running cap of 0 or more, not %d tasks and %%%d", queue.MaxArrayTasks, n, a.MaxRunning)}
	}
	tasks, err := q.store.SubmitArray(ctx, job, a.Indices, a.MaxRunning, ev)
	if err != nil {
		removeTmp()
		return queue.Job{}, err
	}
	if tmp != "" {
		for _, t := range tasks {
			if err := os.Link(tmp, q.env.path(t.ID)); err != nil {
				// The task stays; it fails at start, saying its env is missing.
				q.log.Error("keep an array task's environment", "job", t.ID, "err", err)
			}
		}
		removeTmp()
	}
	ev.Target = tasks[0].Request.Array.ID
	q.auditedLater(ctx, ev)
	q.launch.submitted()
	return tasks[0], nil
}

// arrayPlace is an array task's place as its container's environment
// says it; nil for a job of its own.
func arrayPlace(a *queue.ArrayTask) *spec.ArrayPlace {
	if a == nil {
		return nil
	}
	return &spec.ArrayPlace{Index: a.Index, Count: a.Count}
}

// arrayCap is the array job j is a task of and its running cap, for the
// scheduler; "" for a job of its own.
func arrayCap(j queue.Job) (id string, maxRunning int) {
	if j.Request == nil || j.Request.Array == nil {
		return "", 0
	}
	return j.Request.Array.ID, j.Request.Array.MaxRunning
}

// Array returns the tasks of array job id, ended ones too, in the order
// they were given; an id that names no array wraps
// ledger.ErrJobNotFound.
func (q *Service) Array(ctx context.Context, id string) ([]queue.Job, error) {
	if _, ok := ledger.JobSeq(id); !ok {
		return nil, fmt.Errorf("array %s: %w", id, ledger.ErrJobNotFound)
	}
	if _, _, isTask := ledger.SplitArrayTaskID(id); isTask {
		return nil, fmt.Errorf("array %s: it is a task's id, not an array's: %w", id, ledger.ErrJobNotFound)
	}
	tasks, err := q.store.Jobs(ctx, ledger.JobFilter{ArrayID: id, IncludeEnded: true})
	if err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("array %s: %w", id, ledger.ErrJobNotFound)
	}
	return tasks, nil
}

// CancelArray cancels every task of array job id that has not ended, as
// Cancel does each (with ev written for each, its Target the task), and
// returns the array's tasks after. The tasks that run are stopped at
// once, side by side. An array with no task left to cancel is a
// *StateError.
func (q *Service) CancelArray(ctx context.Context, id string, ev audit.Event) ([]queue.Job, error) {
	tasks, err := q.Array(ctx, id)
	if err != nil {
		return nil, err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		live int
	)
	for _, t := range tasks {
		if t.State.Ended() {
			continue
		}
		live++
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := ev
			e.Target = t.ID
			_, err := q.Cancel(ctx, t.ID, e)
			var se *StateError
			if err != nil && !errors.As(err, &se) { // ended meanwhile: nothing to cancel
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if live == 0 {
		return nil, arrayStateError(id, tasks, "cancel", queue.Queued, queue.Starting, queue.Running)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return q.Array(context.WithoutCancel(ctx), id)
}

// HoldArray holds every queued task of array job id not held yet, and
// ReleaseArray releases every held one; both return the array's tasks
// after. An array with no task to hold or release is a *StateError.
func (q *Service) HoldArray(ctx context.Context, id string, ev audit.Event) ([]queue.Job, error) {
	return q.setArrayHeld(ctx, id, true, ev)
}

// ReleaseArray releases the held tasks of array job id; see HoldArray.
func (q *Service) ReleaseArray(ctx context.Context, id string, ev audit.Event) ([]queue.Job, error) {
	return q.setArrayHeld(ctx, id, false, ev)
}

func (q *Service) setArrayHeld(ctx context.Context, id string, held bool, ev audit.Event) ([]queue.Job, error) {
	tasks, err := q.Array(ctx, id)
	if err != nil {
		return nil, err
	}
	action, kind := "release", "jobs.release"
	if held {
		action, kind = "hold", "jobs.hold"
	}
	changed := 0
	for _, t := range tasks {
		if t.State != queue.Queued || t.Held == held {
			continue
		}
		if _, err := q.setHeld(ctx, t.ID, held, q.fill(ev, kind, t.ID)); err != nil {
			var se *StateError
			if errors.As(err, &se) {
				continue // it started or ended meanwhile
			}
			return nil, err
		}
		changed++
	}
	if changed == 0 {
		return nil, arrayStateError(id, tasks, action, queue.Queued)
	}
	if !held {
		q.launch.poke()
	}
	return q.Array(ctx, id)
}

// arrayStateError says that no task of array id is in a state action
// needs, naming its first live task, or its first.
func arrayStateError(id string, tasks []queue.Job, action string, want ...queue.State) error {
	t := tasks[0]
	for _, x := range tasks {
		if !x.State.Ended() {
			t = x
			break
		}
	}
	return fmt.Errorf("array %s has no task to %s: %w", id, action, &StateError{ID: t.ID, State: t.State, Action: action, Want: want})
}
