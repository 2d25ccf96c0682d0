package queue

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

// TestQueueBulkCancel: gpumeter cancel --state cancels by filter in one
// call (the caller's jobs only, everyone's for an admin), refuses a
// filter mixed with ids or without --state; the cancel of a running job
// answers at once with the job still running, and --wait answers once it
// has ended; gpumeter jobs --limit says how many there are in all.
func TestQueueBulkCancel(t *testing.T) {
	t.Parallel()
	h := newHost(t, "")
	a := h.start(t)
	named := func(token, name string, gpus int) apitype.Job {
		req := h.request(gpus, "10m", long...)
		req.Name = name
		return a.submit(t, token, req)
	}
	// Two running jobs take the four GPUs; the rest wait.
	run1, run2 := named(h.alice, "big-1", 2), named(h.alice, "big-2", 2)
	a.await(t, run1.ID, 30*time.Second, "running")
	a.await(t, run2.ID, 30*time.Second, "running")
	var sweeps []apitype.Job
	for _, n := range []string{"sweep-1", "sweep-2", "sweep-3"} {
		sweeps = append(sweeps, named(h.alice, n, 1))
	}
	keep := named(h.alice, "eval", 1)
	bobs := named(h.bob, "sweep-1", 1)

	// Paging: alice's live jobs, two a page.
	out, errOut, code := a.userCLI(t, h.alice, "jobs", "--limit", "2")
	if code != 0 || !strings.Contains(out, "showing 2 of 6 jobs; --limit 0 for all") || !strings.Contains(out, "--after "+run2.ID) {
		t.Errorf("gpumeter jobs --limit 2: exit %d:\n%s%s", code, out, errOut)
	}
	if out, _, _ := a.userCLI(t, h.alice, "jobs", "--limit", "0"); strings.Contains(out, "showing") || !strings.Contains(out, keep.ID) {
		t.Errorf("gpumeter jobs --limit 0:\n%s", out)
	}
	if _, errOut, code := a.userCLI(t, h.alice, "jobs", "--limit", "-3"); code == 0 || !strings.Contains(errOut, "--limit") {
		t.Errorf("gpumeter jobs --limit -3: exit %d: %s", code, errOut)
	}

	// Refusals, before anything is cancelled.
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"cancel", "--state", "queued", keep.ID}, "not both"},
		{[]string{"cancel", "--name", "sweep-*"}, "need --state"},
		{[]string{"cancel"}, "--state to cancel by filter"},
		{[]string{"cancel", "--state", "succeeded"}, "cannot be cancelled"},
		{[]string{"cancel", "--state", "queued", "--name", "sweep-[a"}, "not a pattern"},
		{[]string{"cancel", "--state", "queued", "--all-users"}, "only admins"},
	} {
		if _, errOut, code := a.userCLI(t, h.alice, tc.args...); code == 0 || !strings.Contains(errOut, tc.says) {
			t.Errorf("gpumeter %s: exit %d: %s; want a refusal saying %q", strings.Join(tc.args, " "), code, errOut, tc.says)
		}
	}
	status, body := a.call(t, http.MethodPost, "/api/v1/jobs/cancel", h.viewer, apitype.CancelJobsRequest{State: []string{"queued"}})
	if status != http.StatusForbidden {
		t.Errorf("a viewer's bulk cancel: %d %s, want 403", status, body)
	}
	if j := a.job(t, sweeps[0].ID); j.State != "queued" {
		t.Fatalf("after the refusals %s is %s", sweeps[0].ID, j.State)
	}

	// alice's queued sweep-*: bob's sweep-1 and alice's eval stay.
	out, errOut, code = a.userCLI(t, h.alice, "cancel", "--state", "queued", "--name", "sweep-*")
	if code != 0 || strings.TrimSpace(out) != "cancelled 3 jobs" {
		t.Errorf("gpumeter cancel --state queued --name 'sweep-*': exit %d: %q %s", code, out, errOut)
	}
	for _, j := range sweeps {
		if got := a.job(t, j.ID); got.State != "cancelled" || got.Reason != "cancelled" {
			t.Errorf("%s: %s %s, want cancelled", j.ID, got.State, got.Reason)
		}
	}
	for _, j := range []apitype.Job{keep, bobs} {
		if got := a.job(t, j.ID); got.State != "queued" {
			t.Errorf("%s: %s, want still queued", j.ID, got.State)
		}
	}

	// A running job's cancel answers at once, the job still running.
	status, body = a.call(t, http.MethodPost, "/api/v1/jobs/"+run1.ID+"/cancel", h.alice, []byte(`{}`))
	var j apitype.Job
	if err := json.Unmarshal(body, &j); err != nil || status != http.StatusOK {
		t.Fatalf("cancel %s: %d %s", run1.ID, status, body)
	}
	if j.State != "running" || !strings.Contains(j.ReasonText, "being stopped") {
		t.Errorf("cancel of running %s answered %s %q, want running and being stopped", run1.ID, j.State, j.ReasonText)
	}
	if end := a.await(t, run1.ID, 60*time.Second, "cancelled", "succeeded", "failed"); end.State != "cancelled" || end.EndedAt == nil {
		t.Errorf("%s once stopped: %s, want cancelled", run1.ID, end.State)
	}
	// --wait answers once the job has ended.
	out, errOut, code = a.userCLI(t, h.alice, "cancel", "--wait", run2.ID)
	if code != 0 || strings.TrimSpace(out) != run2.ID+" cancelled" {
		t.Errorf("gpumeter cancel --wait %s: exit %d: %q %s", run2.ID, code, out, errOut)
	}

	// An admin's filter takes everyone's: bob's and alice's last one.
	out, errOut, code = h.rootCLI(t, "cancel", "--state", "queued,running", "--all-users", "--format", "json")
	var res apitype.CancelJobsResponse
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil {
		t.Fatalf("gpumeter cancel --state queued,running --all-users: exit %d: %v %s %s", code, err, out, errOut)
	}
	// keep and bob's may have started once the GPUs were freed: either
	// way both are cancelled, the started ones being stopped.
	if res.Cancelled != 2 || strings.Join(res.IDs, ",") != keep.ID+","+bobs.ID {
		t.Errorf("admin's bulk cancel: %+v, want %s and %s", res, keep.ID, bobs.ID)
	}
	for _, id := range res.IDs {
		a.await(t, id, 60*time.Second, "cancelled")
	}
}
