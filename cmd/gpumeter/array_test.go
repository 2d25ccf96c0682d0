package main

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

func arrayTask(index int, state string, exit *int) apitype.Job {
	i := index
	return apitype.Job{ID: "j-000002_" + string(rune('0'+index)), User: "alice", State: state, GPUsRequested: 1,
		ArrayID: "j-000002", ArrayIndex: &i, ArrayCount: 3, ExitCode: exit}
}

// TestWriteJobsFoldsArrays: an array's tasks are one line with the
// counts of the whole array, where its first task was, unless expanded.
func TestWriteJobsFoldsArrays(t *testing.T) {
	now := time.Now()
	jobs := []apitype.Job{{ID: "j-000001", User: "bob", State: "running", GPUsRequested: 1},
		arrayTask(0, "running", nil), arrayTask(1, "queued", nil), {ID: "j-000006", User: "bob", State: "queued", GPUsRequested: 2}}
	fold := map[string]apitype.ArrayJob{"j-000002": {ID: "j-000002", Array: "0-2%2", ArrayCount: 3, ArrayMaxRunning: 2,
		States: map[string]int{"running": 1, "queued": 1, "succeeded": 1}}}
	var b strings.Builder
	if err := writeJobs(&b, jobs, now, fold); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[1], "j-000001 ") || !strings.HasPrefix(lines[3], "j-000006 ") {
		t.Fatalf("folded listing:\n%s", b.String())
	}
	if f := strings.Fields(lines[2]); f[0] != "j-000002" || f[3] != "array" || !strings.HasSuffix(lines[2], "[0-2%2] 1 running, 1 queued, 1 succeeded") {
		t.Errorf("array line %q", lines[2])
	}
	b.Reset()
	if err := writeJobs(&b, jobs, now, nil); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "\n"); n != 5 || !strings.Contains(b.String(), "j-000002_1 ") {
		t.Errorf("expanded listing:\n%s", b.String())
	}
}

// TestArrayWaitStatus: 0 when every task succeeded, else the status of
// the lowest-indexed task that did not, whatever the order of the list.
func TestArrayWaitStatus(t *testing.T) {
	three, zero := 3, 0
	ok := apitype.ArrayJob{Tasks: []apitype.Job{arrayTask(0, "succeeded", &zero), arrayTask(1, "succeeded", &zero)}}
	if code, task := arrayWaitStatus(ok); code != 0 || task != nil {
		t.Errorf("all succeeded: %d, %v", code, task)
	}
	mixed := apitype.ArrayJob{Tasks: []apitype.Job{arrayTask(2, "timeout", nil), arrayTask(0, "succeeded", &zero), arrayTask(1, "failed", &three)}}
	if code, task := arrayWaitStatus(mixed); code != 3 || task == nil || *task.ArrayIndex != 1 {
		t.Errorf("mixed: %d, %+v, want 3 from task 1", code, task)
	}
	if !arrayEnded(mixed) || arrayEnded(apitype.ArrayJob{Tasks: []apitype.Job{arrayTask(0, "running", nil)}}) {
		t.Error("arrayEnded")
	}
}
