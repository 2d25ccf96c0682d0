package run

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// TestSubmitArray: an array's tasks are stored with their place, each
// with the array's environment values in a file of its own, and each
// builds with GPUMETER_ARRAY_INDEX and GPUMETER_ARRAY_COUNT, which a
// request may not set.
func TestSubmitArray(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	req := request()
	req.Env = []string{"SEED=7"}
	a, err := queue.ParseArray("0,4-5%2")
	if err != nil {
		t.Fatal(err)
	}
	first, err := e.q.Submit(ctx, Submission{Request: req, User: "alice", Team: "ml", Audit: audit.Event{Kind: "api", Caller: "alice"}, Array: &a})
	if err != nil {
		t.Fatalf("Submit of an array: %v", err)
	}
	if first.ID != "j-000001_0" || first.Request.Array == nil || first.Request.Array.ID != "j-000001" {
		t.Fatalf("first task %s, array %+v", first.ID, first.Request.Array)
	}
	tasks, err := e.q.Array(ctx, "j-000001")
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(tasks); !slices.Equal(got, []string{"j-000001_0", "j-000001_4", "j-000001_5"}) {
		t.Fatalf("tasks %v", got)
	}
	for _, task := range tasks {
		s, err := e.q.buildSpec(task, []string{"GPU-5f3c2a7e-0b1d-4c2e-9a8f-1e2d3c4b5a61"})
		if err != nil {
			t.Fatalf("buildSpec(%s): %v", task.ID, err)
		}
		index := "GPUMETER_ARRAY_INDEX=" + task.ID[len("j-000001_"):]
		for _, kv := range []string{"SEED=7", index, "GPUMETER_ARRAY_COUNT=3"} {
			if !slices.Contains(s.Config.Env, kv) {
				t.Errorf("task %s's env %q lacks %s", task.ID, s.Config.Env, kv)
			}
		}
	}
	// Each task's end removes its own values only.
	e.q.Service.env.remove("j-000001_0")
	if _, err := e.q.Service.env.read(tasks[1]); err != nil {
		t.Errorf("task 4's env after task 0's end: %v", err)
	}
	// A task whose file is gone (a crash between the store and the
	// links) does not build without its values.
	if _, err := e.q.buildSpec(tasks[0], []string{"GPU-5f3c2a7e-0b1d-4c2e-9a8f-1e2d3c4b5a61"}); !errors.Is(err, errEnvMissing) {
		t.Errorf("buildSpec of a task without its env file: %v, want %v", err, errEnvMissing)
	}
	if left, _ := os.ReadDir(e.cfg.EnvDir); len(left) != 2 {
		t.Errorf("env dir holds %d files, want the two tasks' left (no temporary file)", len(left))
	}
	if got := e.auditActions(t); !slices.Equal(got, []string{"jobs.submit j-000001"}) {
		t.Errorf("audit actions %q, want one jobs.submit of the array", got)
	}

	for _, k := range []string{"GPUMETER_ARRAY_INDEX", "gpumeter_array_count"} {
		bad := request()
		bad.Env = []string{k + "=9"}
		_, err := e.q.Submit(ctx, Submission{Request: bad, User: "alice", Audit: audit.Event{Kind: "api"}})
		var r *spec.Refusal
		if !errors.As(err, &r) || r.Reason != spec.EnvNotAllowed {
			t.Errorf("Submit with --env %s=9: %v, want env_not_allowed", k, err)
		}
	}
	if _, err := e.q.Array(ctx, "j-000001_4"); !errors.Is(err, ledger.ErrJobNotFound) {
		t.Errorf("Array of a task's id: %v, want not found", err)
	}
	if _, err := e.q.Array(ctx, "j-000009"); !errors.Is(err, ledger.ErrJobNotFound) {
		t.Errorf("Array of no array: %v, want not found", err)
	}
}

// TestArrayControl: hold, release and cancel of an array's id act on
// each of its tasks that can take them, and say so when none can.
func TestArrayControl(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	a := queue.ArraySpec{Indices: []int{0, 1, 2}}
	if _, err := e.q.Submit(ctx, Submission{Request: request(), User: "alice", Audit: audit.Event{Kind: "api"}, Array: &a}); err != nil {
		t.Fatal(err)
	}
	// One task is held by itself first: hold of the array holds the others.
	if _, err := e.q.Hold(ctx, "j-000001_1", audit.Event{Kind: "api"}); err != nil {
		t.Fatal(err)
	}
	tasks, err := e.q.HoldArray(ctx, "j-000001", audit.Event{Kind: "api"})
	if err != nil {
		t.Fatalf("HoldArray: %v", err)
	}
	for _, task := range tasks {
		if !task.Held {
			t.Errorf("task %s not held after HoldArray", task.ID)
		}
	}
	var se *StateError
	if _, err := e.q.HoldArray(ctx, "j-000001", audit.Event{Kind: "api"}); !errors.As(err, &se) {
		t.Errorf("HoldArray of a held array: %v, want a state error", err)
	}
	if tasks, err = e.q.ReleaseArray(ctx, "j-000001", audit.Event{Kind: "api"}); err != nil || tasks[2].Held {
		t.Fatalf("ReleaseArray: %v, %+v", err, tasks)
	}
	if _, err := e.q.Cancel(ctx, "j-000001_2", audit.Event{Kind: "api"}); err != nil {
		t.Fatal(err)
	}
	tasks, err = e.q.CancelArray(ctx, "j-000001", audit.Event{Kind: "api"})
	if err != nil {
		t.Fatalf("CancelArray: %v", err)
	}
	for _, task := range tasks {
		if task.State != queue.Cancelled {
			t.Errorf("task %s is %s after CancelArray", task.ID, task.State)
		}
	}
	if _, err := e.q.CancelArray(ctx, "j-000001", audit.Event{Kind: "api"}); !errors.As(err, &se) || se.State != queue.Cancelled {
		t.Errorf("CancelArray of an ended array: %v, want a state error", err)
	}
}

func ids(js []queue.Job) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}
