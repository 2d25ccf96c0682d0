package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/queue/run"
)

func listIDs(t *testing.T, a servertest.Answer) []string {
	t.Helper()
	var r apitype.JobsResponse
	a.Decode(t, &r)
	ids := []string{}
	for _, j := range r.Jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// TestJobsSeenBy: a user sees and touches only their own jobs, and
// another user's job is a 404, as a job that does not exist; a viewer
// reads every job but not its logs, and changes nothing.
func TestJobsSeenBy(t *testing.T) {
	f := servertest.NewJobsFixture(t, nil)
	alices := f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	bobs := f.Submit(t, servertest.AsBob, servertest.GoodJob)
	if alices.ID != "j-000001" || alices.User != "alice" || bobs.User != "bob" {
		t.Fatalf("submitted %s by %s and %s by %s, want j-000001 by alice and one by bob", alices.ID, alices.User, bobs.ID, bobs.User)
	}

	tests := []struct {
		caller, path string
		want         []string
	}{
		{servertest.AsAlice, "/api/v1/jobs", []string{alices.ID}},
		{servertest.AsBob, "/api/v1/jobs", []string{bobs.ID}},
		{servertest.AsViewer, "/api/v1/jobs?all_users=1", []string{alices.ID, bobs.ID}},
		{servertest.AsAdmin, "/api/v1/jobs?all_users=1&state=queued", []string{alices.ID, bobs.ID}},
		{servertest.AsAdmin, "/api/v1/jobs?all_users=1&state=running,succeeded", []string{}},
		{servertest.AsAdmin, "/api/v1/jobs", []string{}}, // root submitted nothing
	}
	for _, tt := range tests {
		a := f.Get(t, tt.caller, tt.path)
		if a.Status != http.StatusOK {
			t.Errorf("%s GET %s: %d %s", tt.caller, tt.path, a.Status, a.Body)
			continue
		}
		if got := listIDs(t, a); !slices.Equal(got, tt.want) {
			t.Errorf("%s GET %s: %v, want %v", tt.caller, tt.path, got, tt.want)
		}
	}
	e := f.Get(t, servertest.AsAlice, "/api/v1/jobs?all_users=1").APIError(t, http.StatusForbidden, apitype.CodeForbidden)
	if !strings.Contains(e.Message, "all_users") {
		t.Errorf("all_users refusal %q does not name the parameter", e.Message)
	}

	// bob's job is no job of alice's: every verb answers as for an id
	// nobody has, and nothing changes.
	for _, tt := range []struct{ method, path string }{
		{http.MethodGet, "/api/v1/jobs/" + bobs.ID},
		{http.MethodGet, "/api/v1/jobs/" + bobs.ID + "/logs"},
		{http.MethodPost, "/api/v1/jobs/" + bobs.ID + "/cancel"},
		{http.MethodPost, "/api/v1/jobs/" + bobs.ID + "/hold"},
		{http.MethodPost, "/api/v1/jobs/" + bobs.ID + "/release"},
	} {
		theirs := f.Do(t, servertest.AsAlice, tt.method, tt.path, nil, "").APIError(t, http.StatusNotFound, apitype.CodeNotFound)
		nobodys := f.Do(t, servertest.AsAlice, tt.method, strings.Replace(tt.path, bobs.ID, "j-999999", 1), nil, "").APIError(t, http.StatusNotFound, apitype.CodeNotFound)
		if strings.ReplaceAll(theirs.Message, bobs.ID, "ID") != strings.ReplaceAll(nobodys.Message, "j-999999", "ID") {
			t.Errorf("%s %s: %q, and for a job nobody has %q: they tell the two apart", tt.method, tt.path, theirs.Message, nobodys.Message)
		}
	}
	var got apitype.Job
	f.Get(t, servertest.AsBob, "/api/v1/jobs/"+bobs.ID).Decode(t, &got)
	if got.State != "queued" || got.Held {
		t.Errorf("bob's job after alice's tries: %s held %v, want queued and not held", got.State, got.Held)
	}

	// The viewer reads any job, but not its logs, and changes nothing.
	if a := f.Get(t, servertest.AsViewer, "/api/v1/jobs/"+bobs.ID); a.Status != http.StatusOK {
		t.Errorf("viewer GET bob's job: %d %s", a.Status, a.Body)
	}
	f.Get(t, servertest.AsViewer, "/api/v1/jobs/"+bobs.ID+"/logs").APIError(t, http.StatusForbidden, apitype.CodeForbidden)
	f.Post(t, servertest.AsViewer, "/api/v1/jobs/"+bobs.ID+"/cancel").APIError(t, http.StatusForbidden, apitype.CodeForbidden)
	f.Post(t, servertest.AsViewer, "/api/v1/jobs/"+bobs.ID+"/hold").APIError(t, http.StatusForbidden, apitype.CodeForbidden)
	f.Do(t, servertest.AsViewer, http.MethodPost, "/api/v1/jobs", strings.NewReader(servertest.GoodJob), "").APIError(t, http.StatusForbidden, apitype.CodeForbidden)
	// The admin may touch anyone's.
	var held apitype.Job
	f.Post(t, servertest.AsAdmin, "/api/v1/jobs/"+bobs.ID+"/hold").Decode(t, &held)
	if !held.Held || held.Reason != "held" {
		t.Errorf("admin's hold of bob's job: held %v reason %q, want held", held.Held, held.Reason)
	}
}

// TestJobJSONContract: the job's JSON has exactly the fields the issue
// promises, under these names, with null for what is not known and []
// for empty lists; environment values never appear.
func TestJobJSONContract(t *testing.T) {
	f := servertest.NewJobsFixture(t, nil)
	j := f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	a := f.Get(t, servertest.AsAlice, "/api/v1/jobs/"+j.ID)
	var raw map[string]json.RawMessage
	a.Decode(t, &raw)
	var keys []string
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"after", "array_count", "array_id", "array_index", "array_max_running", "attempt", "class", "command", "container_id", "ended_at", "env_keys", "estimated_start", "exit_code", "gpu_memory_requested", "gpus", "gpus_requested",
		"held", "id", "image", "model_constraint", "name", "node", "node_constraint", "placement", "position", "preemptible", "priority", "reason", "reason_text", "requeue_of", "requeues", "started_at", "state", "submitted_at", "team", "time_limit", "user"}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("job fields (-want +got):\n%s", diff)
	}
	for k, v := range map[string]string{
		"id": `"j-000001"`, "name": `"train"`, "user": `"alice"`, "state": `"queued"`, "reason": `"resources"`,
		"gpus_requested": `1`, "gpus": `[]`, "image": `"gpumeter/sleeper:1"`, "command": `["sleep","60"]`,
		"env_keys": `["WANDB_MODE"]`, "time_limit": `"4h"`, "started_at": `null`, "ended_at": `null`,
		"exit_code": `null`, "estimated_start": `null`, "held": `false`, "container_id": `""`,
		"class": `"normal"`, "gpu_memory_requested": `0`, "priority": `null`, "position": `null`, "placement": `null`,
		"array_id": `""`, "array_index": `null`, "array_count": `0`, "array_max_running": `0`, "after": `[]`,
		"attempt": `1`, "requeue_of": `""`, "requeues": `0`, "preemptible": `false`,
	} {
		if got := string(raw[k]); got != v {
			t.Errorf("%s: %s, want %s", k, got, v)
		}
	}
	var submitted time.Time
	if err := json.Unmarshal(raw["submitted_at"], &submitted); err != nil || submitted.IsZero() || submitted.Location() != time.UTC {
		t.Errorf("submitted_at %s: want an RFC 3339 time in UTC (%v)", raw["submitted_at"], err)
	}
	if !strings.HasSuffix(string(raw["submitted_at"]), `Z"`) {
		t.Errorf("submitted_at %s is not written in UTC", raw["submitted_at"])
	}
	if strings.Contains(string(a.Body), "offline") {
		t.Errorf("the job's JSON shows an environment value: %s", a.Body)
	}
	var list map[string]json.RawMessage
	la := f.Get(t, servertest.AsAlice, "/api/v1/jobs")
	la.Decode(t, &list)
	if _, ok := list["jobs"]; !ok || len(list) != 2 || string(list["page"]) != `{"total":1,"next_after":""}` {
		t.Errorf("the list is %s, want the fields jobs and page", la.Body)
	}
}

// TestJobSubmitErrors: every bad or refused request is a 400 that names
// the field at fault, a refusal with its rule's reason code, and nothing
// is queued.
func TestJobSubmitErrors(t *testing.T) {
	f := servertest.NewJobsFixture(t, nil)
	with := func(edit string) string { return strings.Replace(servertest.GoodJob, `"gpus":1,`, edit, 1) }
	tests := []struct {
		name, body   string
		code, reason string
		field        string
		says         string
	}{
		{"unknown field", with(`"gpus":1,"privileged":true,`), "bad_request", "", "", `"privileged"`},
		{"image twice, in two cases", with(`"gpus":1,"IMAGE":"evil/miner:latest",`), "bad_request", "", "", `the body has the field "IMAGE" twice, as "IMAGE" and "image"`},
		{"image invalid", strings.Replace(servertest.GoodJob, "gpumeter/sleeper:1", "gpumeter/sleeper@sha256:abc", 1), "refused", "image_invalid", "image", "not an image reference Docker takes"},
		{"gpus as text", with(`"gpus":"1",`), "bad_request", "", "", `"gpus"`},
		{"no gpus", with(`"gpus":0,`), "bad_request", "", "gpus", "at least 1 GPU"},
		{"negative gpus", with(`"gpus":-2,`), "bad_request", "", "gpus", "at least 1 GPU"},
		{"bad memory", with(`"gpus":1,"memory":"lots",`), "bad_request", "", "memory", "memory"},
		{"zero memory", with(`"gpus":1,"memory":"0",`), "bad_request", "", "memory", "no memory"},
		{"bad shm", with(`"gpus":1,"shm_size":"8 gigs",`), "bad_request", "", "shm_size", "shm_size"},
		{"bad time limit", strings.Replace(servertest.GoodJob, `"4h"`, `"4 hours"`, 1), "bad_request", "", "time_limit", "time_limit"},
		{"zero time limit", strings.Replace(servertest.GoodJob, `"4h"`, `"0s"`, 1), "bad_request", "", "time_limit", "above 0"},
		{"no time limit", strings.Replace(servertest.GoodJob, `"time_limit":"4h",`, ``, 1), "bad_request", "", "time_limit", "queue.default_time_limit"},
		{"bad notify", with(`"gpus":1,"notify":["always"],`), "bad_request", "", "notify", "start or end"},
		{"empty command", strings.Replace(servertest.GoodJob, `["sleep","60"]`, `[]`, 1), "bad_request", "", "command", "empty"},
		{"malformed mount", with(`"gpus":1,"mounts":["data"],`), "", "", "mounts", ""},
		{"image not allowed", strings.Replace(servertest.GoodJob, "gpumeter/sleeper:1", "evil/miner:latest", 1), "refused", "image_not_allowed", "image", "queue.images"},
		{"time limit too long", strings.Replace(servertest.GoodJob, `"4h"`, `"2d"`, 1), "refused", "time_limit_too_long", "time_limit", "queue.max_time_limit"},
		{"too many gpus", with(`"gpus":9,`), "refused", "too_big", "gpus", "queue.max_gpus"},
		{"label not allowed", with(`"gpus":1,"labels":["gpumeter.project=vision"],`), "refused", "label_not_allowed", "labels", "queue.labels is empty"},
		{"label not K=V", with(`"gpus":1,"labels":["gpumeter.project"],`), "bad_request", "", "labels", "KEY=VALUE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := f.Do(t, servertest.AsAlice, http.MethodPost, "/api/v1/jobs", strings.NewReader(tt.body), "")
			var e apitype.Error
			a.Decode(t, &e)
			if a.Status != http.StatusBadRequest {
				t.Fatalf("%d %s, want 400", a.Status, a.Body)
			}
			if tt.code != "" && e.Code != tt.code || tt.reason != "" && e.Reason != tt.reason || tt.field != "" && e.Field != tt.field || !strings.Contains(e.Message, tt.says) {
				t.Errorf("%s, want code %s reason %q field %q saying %q", a.Body, tt.code, tt.reason, tt.field, tt.says)
			}
			// A refusal may quote the queue's patterns, stars and all.
			checkOwnWords(t, strings.ReplaceAll(e.Message, "*", ""))
		})
	}
	// The env refusal replaces the good job's variable.
	env := strings.Replace(servertest.GoodJob, `"WANDB_MODE=offline"`, `"NVIDIA_VISIBLE_DEVICES=all"`, 1)
	a := f.Do(t, servertest.AsAlice, http.MethodPost, "/api/v1/jobs", strings.NewReader(env), "")
	var e apitype.Error
	a.Decode(t, &e)
	if a.Status != http.StatusBadRequest || e.Code != apitype.CodeRefused || e.Reason != "env_not_allowed" || e.Field != "env" {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=all: %d %s, want a 400 refused with env_not_allowed in env", a.Status, a.Body)
	}
	if got := listIDs(t, f.Get(t, servertest.AsAdmin, "/api/v1/jobs?all_users=1&all=1")); len(got) != 0 {
		t.Errorf("refused requests queued %v", got)
	}
}

// TestJobActionsAudited: hold, release and cancel change the job as
// asked, an ended job cannot be cancelled again (409 with its state),
// and each action, with the submit, is one audit row in the ledger,
// written with the job's change.
func TestJobActionsAudited(t *testing.T) {
	f := servertest.NewJobsFixture(t, nil)
	j := f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	base := "/api/v1/jobs/" + j.ID
	steps := []struct {
		verb   string
		state  string
		held   bool
		reason string
	}{
		{"hold", "queued", true, "held"},
		{"release", "queued", false, "resources"},
		{"cancel", "cancelled", false, "cancelled"},
	}
	for _, s := range steps {
		a := f.Post(t, servertest.AsAlice, base+"/"+s.verb)
		if a.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", s.verb, a.Status, a.Body)
		}
		var got apitype.Job
		a.Decode(t, &got)
		if got.State != s.state || got.Held != s.held || got.Reason != s.reason {
			t.Errorf("after %s: %s held %v reason %s, want %s held %v reason %s", s.verb, got.State, got.Held, got.Reason, s.state, s.held, s.reason)
		}
	}
	e := f.Post(t, servertest.AsAlice, base+"/cancel").APIError(t, http.StatusConflict, apitype.CodeConflict)
	if e.State != "cancelled" || !strings.Contains(e.Message, "cancelled") {
		t.Errorf("cancel of a cancelled job: state %q message %q, want its state", e.State, e.Message)
	}
	f.Post(t, servertest.AsAlice, base+"/hold").APIError(t, http.StatusConflict, apitype.CodeConflict)
	// A queued job has no logs yet: a conflict naming its state.
	k := f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	if e := f.Get(t, servertest.AsAlice, "/api/v1/jobs/"+k.ID+"/logs").APIError(t, http.StatusConflict, apitype.CodeConflict); e.State != "queued" {
		t.Errorf("logs of a queued job: state %q, want queued", e.State)
	}
	// A body on an action may only be empty.
	f.Do(t, servertest.AsAlice, http.MethodPost, "/api/v1/jobs/"+k.ID+"/hold", strings.NewReader(`{"force":true}`), "").APIError(t, http.StatusBadRequest, apitype.CodeBadRequest)

	events, err := f.Store.AuditEvents(context.Background(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ Kind, Caller, Role, Action, Target, Owner string }
	var got []row
	for _, e := range events {
		if e.Target == j.ID {
			got = append(got, row{e.Kind, e.Caller, e.Role, e.Action, e.Target, e.Owner})
		}
	}
	alice := func(action string) row {
		return row{"api", "alice (token alice-laptop)", "user", action, j.ID, "alice"}
	}
	want := []row{alice("jobs.submit"), alice("jobs.hold"), alice("jobs.hold"), alice("jobs.cancel")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit rows of %s (-want +got):\n%s", j.ID, diff)
	}
}

// TestJobsQueueOff: an agent without the queue says how to turn it on.
func TestJobsQueueOff(t *testing.T) {
	f := servertest.NewFixture(t, nil)
	for _, tt := range []struct{ method, path string }{
		{http.MethodGet, "/api/v1/jobs"},
		{http.MethodPost, "/api/v1/jobs"},
		{http.MethodGet, "/api/v1/jobs/j-000001"},
		{http.MethodPost, "/api/v1/jobs/j-000001/cancel"},
	} {
		e := f.Do(t, servertest.AsAdmin, tt.method, tt.path, nil, "").APIError(t, http.StatusServiceUnavailable, apitype.CodeQueueOff)
		if !strings.Contains(e.Message, "queue.enabled") {
			t.Errorf("%s %s: %q, want it to name queue.enabled", tt.method, tt.path, e.Message)
		}
	}
}

// TestJobListParams: the list refuses parameters it does not know and
// states that are not states.
func TestJobListParams(t *testing.T) {
	f := servertest.NewJobsFixture(t, nil)
	for path, says := range map[string]string{
		"/api/v1/jobs?state=sleeping": "sleeping",
		"/api/v1/jobs?state=":         "empty state",
		"/api/v1/jobs?user=bob":       "user",
		"/api/v1/jobs?all=yes":        "all",
	} {
		e := f.Get(t, servertest.AsAlice, path).APIError(t, http.StatusBadRequest, apitype.CodeBadRequest)
		if !strings.Contains(e.Message, says) {
			t.Errorf("GET %s: %q, want it to say %q", path, e.Message, says)
		}
	}
}

// TestJobLabels: a label queue.labels allows is kept with the job, so its
// container gets it at start; the queue's own keys are refused even where
// a pattern matches them.
func TestJobLabels(t *testing.T) {
	f := servertest.NewJobsFixture(t, func(c *run.Config) { c.Rules.Labels = []string{"gpumeter.*"} })
	with := func(labels string) string {
		return strings.Replace(servertest.GoodJob, `"gpus":1,`, `"gpus":1,"labels":`+labels+`,`, 1)
	}
	j := f.Submit(t, servertest.AsAlice, with(`["gpumeter.project=vision","gpumeter.sim.util=80"]`))
	stored, err := f.Store.Job(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	req := stored.Request
	if req == nil {
		t.Fatal("the stored job has no request")
	}
	if want := []string{"gpumeter.project=vision", "gpumeter.sim.util=80"}; !slices.Equal(req.Labels, want) {
		t.Errorf("stored labels %v, want %v", req.Labels, want)
	}
	for _, l := range []string{"gpumeter.user=bob", "gpumeter.exempt=true", "gpumeter.job=j-000001"} {
		a := f.Do(t, servertest.AsAlice, http.MethodPost, "/api/v1/jobs", strings.NewReader(with(`["`+l+`"]`)), "")
		var e apitype.Error
		a.Decode(t, &e)
		if a.Status != http.StatusBadRequest || e.Reason != "label_not_allowed" || e.Field != "labels" {
			t.Errorf("label %s: %d %s, want a 400 refused with label_not_allowed", l, a.Status, a.Body)
		}
	}
}
