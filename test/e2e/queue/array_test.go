package queue

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/dockertest"
)

// arrayTasks lists array id's tasks through GET /api/v1/jobs?array=ID.
func (a *agent) arrayTasks(t *testing.T, id string) []apitype.Job {
	t.Helper()
	status, body := a.call(t, http.MethodGet, "/api/v1/jobs?array="+id+"&all_users=1", a.h.admin, nil)
	if status != http.StatusOK {
		t.Fatalf("GET /api/v1/jobs?array=%s: %d %s", id, status, body)
	}
	var r apitype.JobsResponse
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r.Jobs
}

// TestQueueArray: an array submitted with the command line runs each
// task as a job of its own with its index in its environment, never more
// at once than its %2, folds into one line in gpumeter jobs, and gpumeter
// wait on it exits with the code of its lowest-indexed task that failed.
// An array submitted through the API is shown, refused where it is
// malformed, and cancelled as a whole by its id.
func TestQueueArray(t *testing.T) {
	t.Parallel()
	h := newHost(t, "")
	a := h.start(t)

	// Five tasks on four GPUs, at most two at once; task i exits i.
	out, errOut, code := h.rootCLI(t, "submit", "--as", "alice", "--array", "0-4%2", "--gpus", "1", "--time-limit", "5m", "--image", h.image,
		"--", "exit-after", "2s", "$GPUMETER_ARRAY_INDEX", "index=$GPUMETER_ARRAY_INDEX count=$GPUMETER_ARRAY_COUNT")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "j-") || strings.Contains(id, "_") {
		t.Fatalf("gpumeter submit --array: exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	waited := make(chan int, 1)
	go func() { waited <- h.waitCode(t, id) }()

	maxRunning, sawLimit, over := 0, false, false
	dockertest.WaitFor(t, 3*time.Minute, "array "+id+"'s tasks to end", func() (bool, string) {
		tasks := a.arrayTasks(t, id)
		running, ended := 0, 0
		var states []string
		for _, j := range tasks {
			switch j.State {
			case "starting", "running":
				running++
			case "succeeded", "failed", "timeout", "cancelled":
				ended++
			}
			if j.State == "queued" && j.Reason == "array_limit" {
				sawLimit = true
				if !strings.Contains(j.ReasonText, "its limit (%2)") {
					t.Errorf("%s waits with %q, want the array's limit named", j.ID, j.ReasonText)
				}
			}
			states = append(states, j.ID+" "+j.State)
		}
		maxRunning = max(maxRunning, running)
		if running > 2 && !over {
			over = true
			t.Errorf("%d tasks of %s run at once, more than its %%2: %v", running, id, states)
		}
		return len(tasks) == 5 && ended == 5, strings.Join(states, ", ")
	})
	if maxRunning == 0 || !sawLimit {
		t.Errorf("while the array ran: at most %d tasks seen running, array_limit seen %v; want some running and the others held back", maxRunning, sawLimit)
	}
	if code := <-waited; code != 1 {
		t.Errorf("gpumeter wait %s: exit %d, want 1, task 1's exit code (task 0 succeeded)", id, code)
	}
	tasks := a.arrayTasks(t, id)
	for i, j := range tasks {
		if j.ArrayID != id || j.ArrayIndex == nil || *j.ArrayIndex != i || j.ArrayCount != 5 || j.ArrayMaxRunning != 2 {
			t.Errorf("task %s: array %q index %v count %d max %d", j.ID, j.ArrayID, j.ArrayIndex, j.ArrayCount, j.ArrayMaxRunning)
		}
		if want := map[bool]string{true: "succeeded", false: "failed"}[i == 0]; j.State != want || j.ExitCode == nil || *j.ExitCode != i {
			t.Errorf("task %s: %s exit %v, want %s exit %d", j.ID, j.State, j.ExitCode, want, i)
		}
	}
	if logs := jobLogs(t, a, tasks[3].ID); !strings.Contains(logs, "index=3 count=5") {
		t.Errorf("task 3's logs %q, want its index and the count from its environment", logs)
	}

	// gpumeter jobs folds the array; --expand lists its tasks; job shows it.
	out, errOut, code = h.rootCLI(t, "jobs", "-a", "--all-users")
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, id+" ") {
			line = l
		}
	}
	if code != 0 || !strings.HasSuffix(line, "[0-4%2] 1 succeeded, 4 failed") || strings.Contains(out, id+"_") {
		t.Errorf("gpumeter jobs -a: exit %d, array line %q in:\n%s%s", code, line, out, errOut)
	}
	out, _, _ = h.rootCLI(t, "jobs", "-a", "--all-users", "--expand")
	if strings.Count(out, id+"_") != 5 {
		t.Errorf("gpumeter jobs --expand lists %d tasks of %s, want 5:\n%s", strings.Count(out, id+"_"), id, out)
	}
	out, errOut, code = h.rootCLI(t, "job", id)
	if code != 0 || !strings.Contains(out, "states:") || !strings.Contains(out, "1 succeeded, 4 failed") || strings.Count(out, id+"_") != 5 {
		t.Errorf("gpumeter job %s: exit %d:\n%s%s", id, code, out, errOut)
	}

	// Through the API: malformed arrays and the queue's own variables
	// are refused.
	for _, bad := range []string{"0-10000", "5-1", "1,1", "0-3%0", "a"} {
		req := h.request(1, "5m", long...)
		req.Array = bad
		if e := a.refused(t, h.alice, req, "bad_request", ""); e.Field != "array" {
			t.Errorf("array %q: refused on field %q (%s), want array", bad, e.Field, e.Message)
		}
	}
	req := h.request(1, "5m", long...)
	req.Array, req.Env = "0-1", []string{"GPUMETER_ARRAY_INDEX=7"}
	a.refused(t, h.alice, req, "refused", "env_not_allowed")

	for _, bad := range []string{"j-000001_2", "x", "j-1"} {
		if status, body := a.call(t, http.MethodGet, "/api/v1/jobs?array="+bad, h.alice, nil); status != http.StatusBadRequest || !strings.Contains(string(body), "array") {
			t.Errorf("GET /api/v1/jobs?array=%s: %d %s, want 400 naming array", bad, status, body)
		}
	}

	// A second array, of long tasks, six on four GPUs: shown, found,
	// held and released where it waits, then cancelled whole.
	req = h.request(1, "5m", long...)
	req.Array = "0-5"
	status, body := a.call(t, http.MethodPost, "/api/v1/jobs", h.alice, req)
	var arr apitype.ArrayJob
	if err := json.Unmarshal(body, &arr); status != http.StatusOK || err != nil || len(arr.Tasks) != 6 || arr.ArrayCount != 6 || arr.Array != "0-5" {
		t.Fatalf("POST /api/v1/jobs with array 0-5: %d %s", status, body)
	}
	for _, task := range arr.Tasks[:4] {
		a.await(t, task.ID, 30*time.Second, "running")
	}
	if status, body := a.call(t, http.MethodGet, "/api/v1/jobs/"+arr.ID, h.alice, nil); status != http.StatusNotFound || !strings.Contains(string(body), "/api/v1/arrays/"+arr.ID) {
		t.Errorf("GET /api/v1/jobs/%s: %d %s, want 404 naming the array's path", arr.ID, status, body)
	}
	if status, _ := a.call(t, http.MethodGet, "/api/v1/arrays/"+arr.ID, h.bob, nil); status != http.StatusNotFound {
		t.Errorf("bob's GET /api/v1/arrays/%s of alice's array: %d, want 404", arr.ID, status)
	}
	status, body = a.call(t, http.MethodGet, "/api/v1/arrays/"+arr.ID, h.alice, nil)
	if err := json.Unmarshal(body, &arr); status != http.StatusOK || err != nil || arr.States["running"] != 4 || arr.States["queued"] != 2 {
		t.Errorf("GET /api/v1/arrays/%s: %d %s, want 4 running, 2 queued", arr.ID, status, body)
	}
	out, errOut, code = a.userCLI(t, h.alice, "hold", arr.ID)
	if code != 0 || !strings.Contains(out, "held "+arr.ID+" [0-5] 4 running, 2 queued") {
		t.Errorf("gpumeter hold %s: exit %d: %s%s", arr.ID, code, out, errOut)
	}
	for _, task := range a.arrayTasks(t, arr.ID)[4:] {
		if !task.Held || task.Reason != "held" {
			t.Errorf("task %s after the array's hold: held %v, reason %s", task.ID, task.Held, task.Reason)
		}
	}
	if out, errOut, code = a.userCLI(t, h.alice, "release", arr.ID); code != 0 || !strings.HasPrefix(out, "released "+arr.ID) {
		t.Errorf("gpumeter release %s: exit %d: %s%s", arr.ID, code, out, errOut)
	}
	if status, _ := a.call(t, http.MethodPost, "/api/v1/arrays/"+arr.ID+"/release", h.alice, []byte(`{}`)); status != http.StatusConflict {
		t.Errorf("a second release of %s: %d, want 409 (no task held)", arr.ID, status)
	}
	waited = make(chan int, 1)
	go func() { waited <- h.waitCode(t, arr.ID) }()
	out, errOut, code = a.userCLI(t, h.alice, "cancel", "--wait", arr.ID)
	if code != 0 || !strings.Contains(out, arr.ID+" [0-5] 6 cancelled") {
		t.Errorf("gpumeter cancel %s: exit %d: %s%s", arr.ID, code, out, errOut)
	}
	if code := <-waited; code != 125 {
		t.Errorf("gpumeter wait %s of a cancelled array: exit %d, want 125", arr.ID, code)
	}
	if got := a.arrayTasks(t, arr.ID); !slices.EqualFunc(got, arr.Tasks, func(x, y apitype.Job) bool { return x.ID == y.ID && x.State == "cancelled" }) {
		t.Errorf("after the cancel: %v", got)
	}
}
