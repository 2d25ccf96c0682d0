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

// fairQueue is the queue section of the fair queue's tests: jobs may set
// the sim labels, and the fair-share factors follow the ledger within a
// second or two; extra adds to the queue section. The ledger flushes
// every second, so past use reaches the factors quickly.
func fairQueue(extra string) string {
	return `  labels: ["gpumeter.sim.*"]
  fair_share:
    refresh: 1s
` + extra + `ledger:
  flush_interval: 1s
`
}

// fairShare reads GET /api/v1/fairshare with token.
func (a *agent) fairShare(t *testing.T, token string) apitype.FairShare {
	t.Helper()
	status, body := a.call(t, http.MethodGet, "/api/v1/fairshare", token, nil)
	if status != http.StatusOK {
		t.Fatalf("GET /api/v1/fairshare: %d %s", status, body)
	}
	var fs apitype.FairShare
	if err := json.Unmarshal(body, &fs); err != nil {
		t.Fatal(err)
	}
	return fs
}

// fairRow is the user row of name in fs.
func fairRow(fs apitype.FairShare, name string) (apitype.FairShareRow, bool) {
	for _, r := range fs.Users {
		if r.Name == name {
			return r, true
		}
	}
	return apitype.FairShareRow{}, false
}

func userNames(fs apitype.FairShare) []string {
	var out []string
	for _, r := range fs.Users {
		out = append(out, r.Name)
	}
	return out
}

// TestQueueFairShareOrder: bob has held every GPU by hand (a container
// outside the queue counts as much as a job), alice has held none; bob
// queues first, alice second, and alice's job is ranked ahead and starts
// first once the GPUs are free. gpumeter fairshare shows both, and a
// user's token sees only their own row and the totals.
func TestQueueFairShareOrder(t *testing.T) {
	t.Parallel()
	h := newHost(t, fairQueue(""))
	a := h.start(t)
	outside, _ := dockertest.Container(t, h.cli, dockertest.Spec{
		Name:   "bob-by-hand",
		Labels: map[string]string{"gpumeter.user": "bob", "gpumeter.sim.util": "90", "gpumeter.sim.memory": "10GiB"},
		Env:    []string{"NVIDIA_VISIBLE_DEVICES=all"},
		Cmd:    []string{"exit-after", "10m", "0"},
	})
	dockertest.WaitFor(t, 30*time.Second, "bob's use in the fair-share factors", func() (bool, string) {
		status, body := a.call(t, http.MethodGet, "/api/v1/fairshare", h.admin, nil)
		var fs apitype.FairShare
		if status != http.StatusOK || json.Unmarshal(body, &fs) != nil {
			return false, string(body)
		}
		r, ok := fairRow(fs, "bob")
		return ok && r.UsageGPUHours > 0 && r.Factor < 1, string(body)
	})

	// Both wait for the GPUs bob holds by hand; each asks for all four,
	// so only one can run when they are free.
	bobJob := a.submit(t, h.bob, h.request(4, "5m", long...))
	aliceJob := a.submit(t, h.alice, h.request(4, "5m", long...))
	var aj, bj apitype.Job
	dockertest.WaitFor(t, 15*time.Second, "alice's job ranked ahead of bob's", func() (bool, string) {
		aj, bj = a.job(t, aliceJob.ID), a.job(t, bobJob.ID)
		ok := aj.State == "queued" && bj.State == "queued" && aj.Priority != nil && bj.Priority != nil &&
			*aj.Priority > *bj.Priority && aj.Position != nil && *aj.Position == 1 && bj.Position != nil && *bj.Position == 2
		return ok, fmtRank(aj) + "; " + fmtRank(bj)
	})
	t.Logf("ranked: %s; %s", fmtRank(aj), fmtRank(bj))

	dockertest.Remove(t, h.cli, outside)
	aj = a.await(t, aliceJob.ID, 30*time.Second, "running")
	if len(aj.GPUs) != 4 {
		t.Errorf("%s runs on %v, want all four GPUs", aj.ID, aj.GPUs)
	}
	time.Sleep(time.Second) // a pass that would start bob's job has had its chance
	if bj = a.job(t, bobJob.ID); bj.State != "queued" || bj.Position == nil || *bj.Position != 1 {
		t.Errorf("%s: %s %s %q, want queued first in line behind alice's running job", fmtRank(bj), bj.State, bj.Reason, bj.ReasonText)
	}

	// gpumeter fairshare, like sshare: everyone with use, once alice's
	// running job has reached the factors too.
	dockertest.WaitFor(t, 30*time.Second, "alice's and bob's rows in the fair-share report", func() (bool, string) {
		fs := a.fairShare(t, h.admin)
		r, ok := fairRow(fs, "alice")
		_, okBob := fairRow(fs, "bob")
		return ok && okBob && r.UsageGPUHours > 0, strings.Join(userNames(fs), ",")
	})
	out, errOut, code := h.rootCLI(t, "fairshare")
	if code != 0 || !strings.Contains(out, "alice") || !strings.Contains(out, "bob") || !strings.Contains(out, "FACTOR") {
		t.Errorf("gpumeter fairshare: exit %d, want a table with alice and bob:\n%s%s", code, out, errOut)
	}
	for _, u := range []struct{ name, token, other string }{{"alice", h.alice, "bob"}, {"bob", h.bob, "alice"}} {
		out, errOut, code := a.userCLI(t, u.token, "fairshare", "--format", "json")
		var fs apitype.FairShare
		if code != 0 || json.Unmarshal([]byte(out), &fs) != nil {
			t.Fatalf("gpumeter fairshare --format json as %s: exit %d: %s%s", u.name, code, out, errOut)
		}
		if names := userNames(fs); !slices.Equal(names, []string{u.name}) {
			t.Errorf("%s sees the user rows %v, want only their own", u.name, names)
		}
		if fs.Totals.Kind != apitype.FairShareTotal || fs.Totals.UsageGPUHours <= 0 {
			t.Errorf("%s sees the totals %+v, want the total use of everyone", u.name, fs.Totals)
		}
		if strings.Contains(out, `"`+u.other+`"`) {
			t.Errorf("%s's view names %s:\n%s", u.name, u.other, out)
		}
	}
}

func fmtRank(j apitype.Job) string {
	s := j.ID + " (" + j.User + ") " + j.State
	if j.Priority != nil {
		s += " priority " + strings.TrimRight(strings.TrimRight(jsonNumber(*j.Priority), "0"), ".")
	}
	if j.Position != nil {
		s += " position " + jsonNumber(float64(*j.Position))
	}
	return s
}

func jsonNumber(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}
