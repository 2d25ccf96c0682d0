package server_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/audit"
)

func named(name string) string {
	return strings.Replace(servertest.GoodJob, `"name":"train"`, `"name":"`+name+`"`, 1)
}

func bulkCancel(t *testing.T, f *servertest.JobsFixture, caller, body string) servertest.Answer {
	t.Helper()
	return f.Do(t, caller, http.MethodPost, "/api/v1/jobs/cancel", strings.NewReader(body), "")
}

// TestBulkCancel: POST /api/v1/jobs/cancel cancels the caller's jobs its
// filter selects and answers how many and which, audited as one
// job.cancel_bulk event with the count; all_users is an admin's.
func TestBulkCancel(t *testing.T) {
	f := servertest.NewJobsFixture(t, nil)
	a1, a2 := f.Submit(t, servertest.AsAlice, named("sweep-1")), f.Submit(t, servertest.AsAlice, named("sweep-2"))
	keep := f.Submit(t, servertest.AsAlice, named("eval"))
	held := f.Submit(t, servertest.AsAlice, named("sweep-3"))
	f.Post(t, servertest.AsAlice, "/api/v1/jobs/"+held.ID+"/hold").Decode(t, &apitype.Job{})
	bobs := f.Submit(t, servertest.AsBob, named("sweep-1"))

	var got apitype.CancelJobsResponse
	bulkCancel(t, f, servertest.AsAlice, `{"state":["queued"],"held":true}`).Decode(t, &got)
	if d := cmp.Diff(apitype.CancelJobsResponse{Cancelled: 1, IDs: []string{held.ID}}, got); d != "" {
		t.Errorf("cancel alice's held jobs (-want +got):\n%s", d)
	}
	bulkCancel(t, f, servertest.AsAlice, `{"state":["queued"],"name":"sweep-*"}`).Decode(t, &got)
	if d := cmp.Diff(apitype.CancelJobsResponse{Cancelled: 2, IDs: []string{a1.ID, a2.ID}}, got); d != "" {
		t.Errorf("cancel alice's sweep-* (-want +got):\n%s", d)
	}
	for id, want := range map[string]string{a1.ID: "cancelled", a2.ID: "cancelled", keep.ID: "queued", bobs.ID: "queued"} {
		if j, err := f.Store.Job(context.Background(), id); err != nil || string(j.State) != want {
			t.Errorf("%s: %s, %v; want %s", id, j.State, err, want)
		}
	}
	// Nothing left to match: an empty answer, not null.
	a := bulkCancel(t, f, servertest.AsAlice, `{"state":["queued"],"name":"sweep-*"}`)
	if a.Status != http.StatusOK || !strings.Contains(string(a.Body), `"ids":[]`) {
		t.Errorf("a cancel that matches nothing: %d %s, want ids []", a.Status, a.Body)
	}
	// all_users: refused to a user, naming the rule; an admin's reaches bob.
	e := bulkCancel(t, f, servertest.AsAlice, `{"state":["queued"],"all_users":true}`).APIError(t, http.StatusForbidden, apitype.CodeForbidden)
	if !strings.Contains(e.Message, "all_users") || !strings.Contains(e.Message, "only admins") {
		t.Errorf("all_users as alice: %q, want it to name the rule", e.Message)
	}
	bulkCancel(t, f, servertest.AsAdmin, `{"state":["queued"],"all_users":true}`).Decode(t, &got)
	if d := cmp.Diff(apitype.CancelJobsResponse{Cancelled: 2, IDs: []string{keep.ID, bobs.ID}}, got); d != "" {
		t.Errorf("admin's cancel of everyone's queued jobs (-want +got):\n%s", d)
	}
	bulkCancel(t, f, servertest.AsViewer, `{"state":["queued"]}`).APIError(t, http.StatusForbidden, apitype.CodeForbidden)

	events, err := f.Store.AuditEvents(context.Background(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, e := range events {
		if e.Action == "job.cancel_bulk" {
			rows = append(rows, fmt.Sprintf("%s|%s|%s|%d", e.Caller, e.Target, e.Outcome, e.Count))
		}
	}
	want := []string{
		"alice (token alice-laptop)|state=queued held user=alice|allowed|1",
		"alice (token alice-laptop)|state=queued name=sweep-* user=alice|allowed|2",
		"alice (token alice-laptop)|state=queued name=sweep-* user=alice|allowed|0",
		"root (token root-laptop)|state=queued all_users|allowed|2",
	}
	if d := cmp.Diff(want, rows); d != "" {
		t.Errorf("job.cancel_bulk audit rows (-want +got):\n%s", d)
	}
	// The cancelled jobs have no audit rows of their own.
	for _, e := range events {
		if e.Action == "jobs.cancel" && e.Target == a1.ID {
			t.Errorf("a bulk-cancelled job has its own audit row: %+v", e)
		}
	}
}

// TestBulkCancelRefuses: a filter the bulk cancel cannot take is a 400
// naming its field, and nothing is cancelled.
func TestBulkCancelRefuses(t *testing.T) {
	f := servertest.NewJobsFixture(t, nil)
	j := f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	for _, tc := range []struct{ body, field, says string }{
		{`{}`, "state", "name the states"},
		{`{"state":[]}`, "state", "name the states"},
		{`{"state":["sleeping"]}`, "state", "sleeping"},
		{`{"state":[""]}`, "state", "empty state"},
		{`{"state":["succeeded"]}`, "state", "cannot be cancelled"},
		{`{"state":["queued","running"],"held":true}`, "held", "only queued jobs are held"},
		{`{"state":["queued"],"name":"sweep-[a"}`, "name", "not a pattern"},
		{`{"state":["queued"],"user":"bob"}`, "", "user"},
		{`{"state":"queued"}`, "", "state"},
	} {
		e := bulkCancel(t, f, servertest.AsAlice, tc.body).APIError(t, http.StatusBadRequest, apitype.CodeBadRequest)
		if e.Field != tc.field || !strings.Contains(e.Message, tc.says) {
			t.Errorf("%s: field %q %q, want field %q saying %q", tc.body, e.Field, e.Message, tc.field, tc.says)
		}
	}
	e := f.Do(t, servertest.AsAlice, http.MethodPost, "/api/v1/jobs/cancel?state=queued", strings.NewReader(`{"state":["queued"]}`), "").
		APIError(t, http.StatusBadRequest, apitype.CodeBadRequest)
	if !strings.Contains(e.Message, "JSON body") {
		t.Errorf("parameters: %q", e.Message)
	}
	if got, _ := f.Store.Job(context.Background(), j.ID); got.State != "queued" {
		t.Errorf("after the refusals: %s, want queued", got.State)
	}
}

// TestCancelWaitParam: a cancel takes wait=1 and nothing else; hold and
// release take no parameters.
func TestCancelWaitParam(t *testing.T) {
	f := servertest.NewJobsFixture(t, nil)
	j := f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	for _, path := range []string{"/cancel?wait=maybe", "/cancel?force=1", "/cancel?wait=1&wait=0", "/hold?wait=1"} {
		f.Post(t, servertest.AsAlice, "/api/v1/jobs/"+j.ID+path).APIError(t, http.StatusBadRequest, apitype.CodeBadRequest)
	}
	var got apitype.Job
	f.Post(t, servertest.AsAlice, "/api/v1/jobs/"+j.ID+"/cancel?wait=1").Decode(t, &got)
	if got.State != "cancelled" {
		t.Errorf("cancel with wait=1 of a queued job: %s, want cancelled", got.State)
	}
}

// TestJobPages: limit= and after= page the list by job id, each page says
// the total and the after= of the next; bad values are 400s naming the
// parameter.
func TestJobPages(t *testing.T) {
	f := servertest.NewJobsFixture(t, nil)
	var alices []string
	for i := range 5 {
		alices = append(alices, f.Submit(t, servertest.AsAlice, servertest.GoodJob).ID)
		if i == 2 {
			f.Submit(t, servertest.AsBob, servertest.GoodJob)
		}
	}
	page := func(caller, query string) apitype.JobsResponse {
		t.Helper()
		var r apitype.JobsResponse
		f.Get(t, caller, "/api/v1/jobs"+query).Decode(t, &r)
		if r.Page == nil {
			t.Fatalf("GET /api/v1/jobs%s: no page", query)
		}
		return r
	}
	var seen []string
	after := ""
	for n := 0; ; n++ {
		q := "?limit=2"
		if after != "" {
			q += "&after=" + after
		}
		r := page(servertest.AsAlice, q)
		if r.Page.Total != 5 {
			t.Errorf("page %d: total %d, want 5", n, r.Page.Total)
		}
		for _, j := range r.Jobs {
			seen = append(seen, j.ID)
		}
		if r.Page.NextAfter == "" {
			break
		}
		if n > 5 {
			t.Fatalf("more pages than jobs: %v", seen)
		}
		after = r.Page.NextAfter
	}
	if !slices.Equal(seen, alices) {
		t.Errorf("alice's jobs page by page: %v, want %v", seen, alices)
	}
	if r := page(servertest.AsAlice, ""); len(r.Jobs) != 5 || r.Page.Total != 5 || r.Page.NextAfter != "" {
		t.Errorf("without limit: %d jobs, page %+v; want all 5 on one page", len(r.Jobs), *r.Page)
	}
	if r := page(servertest.AsAdmin, "?all_users=1&limit=5"); len(r.Jobs) != 5 || r.Page.Total != 6 || r.Page.NextAfter != r.Jobs[4].ID {
		t.Errorf("everyone's, 5 a page: %d jobs, page %+v", len(r.Jobs), *r.Page)
	}
	bobs := page(servertest.AsBob, "").Jobs[0].ID
	for _, tc := range []struct{ query, field, says string }{
		{"?limit=abc", "limit", `"abc" is not a number`},
		{"?limit=-1", "limit", "out of range"},
		{"?limit=0", "limit", "out of range"},
		{"?limit=99999999999999999999", "limit", "not a number"},
		{"?limit=10001", "limit", "out of range"},
		{"?limit=1&limit=2", "limit", "more than once"},
		{"?after=12", "after", "not a job id"},
		{"?after=", "after", "not a job id"},
		{"?after=j-999999", "after", "no job"},
		{"?after=" + bobs, "after", "no job"}, // bob's is no job of alice's
	} {
		e := f.Get(t, servertest.AsAlice, "/api/v1/jobs"+tc.query).APIError(t, http.StatusBadRequest, apitype.CodeBadRequest)
		if e.Field != tc.field || !strings.Contains(e.Message, tc.says) {
			t.Errorf("GET /api/v1/jobs%s: field %q %q, want field %q saying %q", tc.query, e.Field, e.Message, tc.field, tc.says)
		}
	}
}
