package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// TestQueueDependencies: --after ok, any and fail through the command
// line and the API on the real engine: a job waits with reason
// dependency while the job it names runs, starts once it ended as
// asked, and ends failed with dependency_never_satisfied, naming the
// job, once it cannot; a chain follows. Unknown, foreign, malformed and
// self-naming dependencies are refused at submit; an admin may name
// anyone's.
func TestQueueDependencies(t *testing.T) {
	t.Parallel()
	h := newHost(t, "")
	a := h.start(t)

	// ok on a job that succeeds, through the CLI as alice.
	first := a.submit(t, h.alice, h.request(1, "5m", "exit-after", "15s", "0"))
	out, errOut, code := a.userCLI(t, h.alice, "submit", "--gpus", "1", "--time-limit", "5m", "--image", h.image,
		"--after", "ok:"+first.ID, "--", "exit-after", "1s", "0")
	okID := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(okID, "j-") {
		t.Fatalf("gpumeter submit --after ok:%s: exit %d: %s%s", first.ID, code, out, errOut)
	}
	// While the first runs, the second waits for it, saying so (GPUs
	// are free: only the dependency holds it).
	dockertest.WaitFor(t, 30*time.Second, okID+" waiting with reason dependency", func() (bool, string) {
		j := a.job(t, okID)
		return j.State == "queued" && j.Reason == "dependency", j.State + " " + j.Reason + ": " + j.ReasonText
	})
	j := a.job(t, okID)
	if want := "waiting for " + first.ID + " to succeed ("; !strings.Contains(j.ReasonText, want) {
		t.Errorf("%s: reason_text %q, want it to contain %q", okID, j.ReasonText, want)
	}
	if len(j.After) != 1 || j.After[0] != (apitype.Dependency{Type: "ok", ID: first.ID}) {
		t.Errorf("%s: after %+v, want [ok %s]", okID, j.After, first.ID)
	}
	if out, errOut, code := a.userCLI(t, h.alice, "job", okID); code != 0 || !strings.Contains(out, "ok:"+first.ID) || !strings.Contains(out, "dependency") {
		t.Errorf("gpumeter job %s: exit %d, want its reason and after ok:%s:\n%s%s", okID, code, first.ID, out, errOut)
	}
	done := a.await(t, okID, time.Minute, "succeeded", "failed")
	f := a.await(t, first.ID, time.Minute, "succeeded")
	if done.State != "succeeded" || done.StartedAt == nil || f.EndedAt == nil || done.StartedAt.Before(*f.EndedAt) {
		t.Errorf("%s: %s started %v, want succeeded, started after %s ended at %v", okID, done.State, done.StartedAt, first.ID, f.EndedAt)
	}

	// A dependency on a failed job: ok can never be met, so the job
	// ends failed naming it; any and fail on it start; fail on the
	// succeeded job can never be met; any on the job that just failed
	// (a chain) starts.
	failing := a.submit(t, h.alice, h.request(1, "5m", "exit-after", "1s", "7"))
	onFail := submitAfter(t, a, h, h.alice, "ok", failing.ID)
	anyFail := submitAfter(t, a, h, h.alice, "any", failing.ID)
	failFail := submitAfter(t, a, h, h.alice, "fail", failing.ID)
	failOK := submitAfter(t, a, h, h.alice, "fail", first.ID)
	chain := submitAfter(t, a, h, h.alice, "any", onFail.ID)
	a.await(t, failing.ID, time.Minute, "failed")

	never := a.await(t, onFail.ID, time.Minute, "failed", "succeeded", "cancelled")
	if never.State != "failed" || never.Reason != "dependency_never_satisfied" || !strings.Contains(never.ReasonText, failing.ID+" ended failed") || never.EndedAt == nil || never.StartedAt != nil {
		t.Errorf("%s (--after ok:%s, which failed): %s %s %q ended %v started %v; want failed, dependency_never_satisfied, naming %s, never started",
			onFail.ID, failing.ID, never.State, never.Reason, never.ReasonText, never.EndedAt, never.StartedAt, failing.ID)
	}
	if code := h.waitCode(t, onFail.ID); code != 126 {
		t.Errorf("gpumeter wait %s: exit %d, want 126 for a job that failed without running", onFail.ID, code)
	}
	for _, id := range []string{anyFail.ID, failFail.ID, chain.ID} {
		if j := a.await(t, id, time.Minute, "succeeded", "failed"); j.State != "succeeded" {
			t.Errorf("%s: %s %s %q, want succeeded: its dependency was met", id, j.State, j.Reason, j.ReasonText)
		}
	}
	if j := a.await(t, failOK.ID, time.Minute, "failed", "succeeded"); j.State != "failed" || j.Reason != "dependency_never_satisfied" || !strings.Contains(j.ReasonText, first.ID+" ended succeeded") {
		t.Errorf("%s (--after fail:%s, which succeeded): %s %s %q, want failed for dependency_never_satisfied naming it", failOK.ID, first.ID, j.State, j.Reason, j.ReasonText)
	}
	if n := h.auditCount(t, "jobs.fail", onFail.ID); n != 1 {
		t.Errorf("audit events jobs.fail for %s: %d, want 1", onFail.ID, n)
	}

	// Refused at submit: an unknown id, another user's job, a bad type,
	// the same dependency twice, and the job's own id-to-be (a cycle
	// can only be made through ids not yet given, which are unknown).
	refusedAfter(t, a, h.alice, h.request(1, "5m", long...), []apitype.Dependency{{Type: "ok", ID: "j-999999"}}, "j-999999")
	refusedAfter(t, a, h.bob, h.request(1, "5m", long...), []apitype.Dependency{{Type: "ok", ID: first.ID}}, "not bob's job")
	refusedAfter(t, a, h.alice, h.request(1, "5m", long...), []apitype.Dependency{{Type: "maybe", ID: first.ID}}, `"maybe" is not a dependency type`)
	refusedAfter(t, a, h.alice, h.request(1, "5m", long...), []apitype.Dependency{{Type: "ok", ID: first.ID}, {Type: "ok", ID: first.ID}}, "named twice")
	refusedAfter(t, a, h.alice, h.request(1, "5m", long...), []apitype.Dependency{{Type: "ok", ID: "j-1,j-2"}}, "is not a job id")
	next := nextID(t, chain.ID)
	refusedAfter(t, a, h.alice, h.request(1, "5m", long...), []apitype.Dependency{{Type: "any", ID: next}}, next)
	if got := a.submit(t, h.alice, h.request(1, "1m", "exit-after", "0s", "0")); got.ID != next {
		t.Errorf("the next job got %s, want %s, the id the refused one named", got.ID, next)
	}
	// The command line says what is wrong with a malformed --after
	// before it asks the agent.
	if out, errOut, code := a.userCLI(t, h.alice, "submit", "--gpus", "1", "--image", h.image, "--after", first.ID, "--", "x"); code == 0 || !strings.Contains(errOut, "--after") {
		t.Errorf("gpumeter submit --after %s (no type): exit %d: %s%s; want a refusal naming --after", first.ID, code, out, errOut)
	}
	// An admin (root on the socket) may make bob's job wait for alice's.
	out, errOut, code = h.rootCLI(t, "submit", "--as", "bob", "--gpus", "1", "--time-limit", "1m", "--image", h.image,
		"--after", "any:"+first.ID+","+failing.ID, "--", "exit-after", "0s", "0")
	if id := strings.TrimSpace(out); code != 0 {
		t.Errorf("gpumeter submit --as bob --after any:%s,%s as root: exit %d: %s%s", first.ID, failing.ID, code, out, errOut)
	} else if j := a.await(t, id, time.Minute, "succeeded", "failed"); j.State != "succeeded" || len(j.After) != 2 {
		t.Errorf("%s: %s after %+v, want succeeded with two dependencies", id, j.State, j.After)
	}
}

// TestQueueRequeue: a --requeue job that keeps exiting non-zero goes
// back to the queue queue.max_requeue times (failed_requeued, counted in
// requeues) and then ends failed with its exit code; gpumeter requeue
// makes a new job of it with requeue_of and attempt 2, and refuses a
// live job (409) and another user (404); a job submitted with --env is
// made again with its values, kept queue.log_retention after its end.
func TestQueueRequeue(t *testing.T) {
	t.Parallel()
	h := newHost(t, "  max_requeue: 2\n")
	a := h.start(t)

	out, errOut, code := a.userCLI(t, h.alice, "submit", "--requeue", "--gpus", "1", "--time-limit", "5m", "--image", h.image, "--", "exit-after", "1s", "7")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "j-") {
		t.Fatalf("gpumeter submit --requeue: exit %d: %s%s", code, out, errOut)
	}
	var seen []string
	dockertest.WaitFor(t, 2*time.Minute, id+" failed after its requeues", func() (bool, string) {
		j := a.job(t, id)
		if j.Reason == "failed_requeued" && (len(seen) == 0 || seen[len(seen)-1] != j.ReasonText) {
			seen = append(seen, j.ReasonText)
		}
		return j.State == "failed", j.State + " " + j.Reason + ": " + j.ReasonText
	})
	j := a.job(t, id)
	if j.Reason != "exit_code" || j.ExitCode == nil || *j.ExitCode != 7 || j.Requeues != 2 || !strings.Contains(j.ReasonText, "not requeued") {
		t.Errorf("%s: %s %s %q exit %v requeues %d; want failed, exit_code 7, 2 requeues, saying it was not requeued", id, j.State, j.Reason, j.ReasonText, j.ExitCode, j.Requeues)
	}
	if n := h.auditCount(t, "jobs.requeue", id); n != 2 {
		t.Errorf("audit events jobs.requeue for %s: %d, want 2 (one per requeue)", id, n)
	}
	for _, s := range seen {
		if !strings.Contains(s, "exited with code 7; back in the queue") {
			t.Errorf("%s's failed_requeued sentence %q does not say why", id, s)
		}
	}
	if code := h.waitCode(t, id); code != 7 {
		t.Errorf("gpumeter wait %s: exit %d, want the job's 7", id, code)
	}

	// gpumeter requeue: a new job, attempt 2, requeue_of the ended one,
	// which stays as it ended.
	out, errOut, code = a.userCLI(t, h.alice, "requeue", id)
	again := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(again, "j-") || again == id {
		t.Fatalf("gpumeter requeue %s: exit %d: %s%s", id, code, out, errOut)
	}
	n := a.job(t, again)
	if n.RequeueOf != id || n.Attempt != 2 || n.Requeues != 0 || n.User != "alice" || strings.Join(n.Command, " ") != "exit-after 1s 7" {
		t.Errorf("%s: requeue_of %q attempt %d requeues %d user %s command %v; want requeue_of %s, attempt 2, no requeues, alice's command", again, n.RequeueOf, n.Attempt, n.Requeues, n.User, n.Command, id)
	}
	if o := a.job(t, id); o.State != "failed" || o.Requeues != 2 || o.EndedAt == nil || !o.EndedAt.Equal(*j.EndedAt) {
		t.Errorf("%s after its requeue: %s requeues %d ended %v, want as it ended", id, o.State, o.Requeues, o.EndedAt)
	}
	if out, errOut, code := a.userCLI(t, h.alice, "job", again); code != 0 || !regexp.MustCompile(`(?m)^requeue of:\s+`+id+` \(attempt 2\)$`).MatchString(out) {
		t.Errorf("gpumeter job %s: exit %d, want a line naming %s and attempt 2:\n%s%s", again, code, id, out, errOut)
	}
	if out, _, _ := a.userCLI(t, h.alice, "job", id); !regexp.MustCompile(`(?m)^requeues:\s+2$`).MatchString(out) {
		t.Errorf("gpumeter job %s: want its 2 requeues:\n%s", id, out)
	}
	// Live: refused with its state. Another user's: not found.
	if status, e := a.post(t, again, "requeue", h.alice); status != http.StatusConflict || e.State == "" || !strings.Contains(e.Message, "requeue needs it") {
		t.Errorf("requeue of the live %s: %d %+v, want 409 with its state", again, status, e)
	}
	if status, e := a.post(t, id, "requeue", h.bob); status != http.StatusNotFound {
		t.Errorf("requeue of alice's %s as bob: %d %+v, want 404", id, status, e)
	}
	// The new job is the old one's again: it asked for --requeue too,
	// and its attempts go on: a requeue of it is attempt 3.
	a.await(t, again, 2*time.Minute, "failed")
	third := a.submitRequeue(t, again, h.admin)
	if third.Attempt != 3 || third.RequeueOf != again || third.User != "alice" {
		t.Errorf("requeue of %s by the admin: attempt %d requeue_of %q user %s; want 3, %s, alice", again, third.Attempt, third.RequeueOf, third.User, again)
	}
	if n := h.auditCount(t, "jobs.requeue", again); n != 3 {
		t.Errorf("audit events jobs.requeue on %s: %d, want its two requeues and the admin's", again, n)
	}

	// A job with environment values: they are kept queue.log_retention
	// after its end, so the requeue runs with them.
	withEnv := h.request(1, "1m", "exit-after", "0s", "0", "token=$TOKEN")
	withEnv.Env = []string{"TOKEN=s3cret"}
	e := a.submit(t, h.alice, withEnv)
	a.await(t, e.ID, time.Minute, "succeeded")
	made := a.submitRequeue(t, e.ID, h.alice)
	done := a.await(t, made.ID, time.Minute, "succeeded")
	if logs := jobLogs(t, a, made.ID); !strings.Contains(logs, "token=s3cret") || strings.Join(done.EnvKeys, ",") != "TOKEN" || done.RequeueOf != e.ID {
		t.Errorf("the requeued %s: logs %q, env_keys %v, requeue_of %q; want the value of TOKEN from %s", made.ID, logs, done.EnvKeys, done.RequeueOf, e.ID)
	}
}

// submitAfter submits a short job for token that waits for id on typ.
func submitAfter(t *testing.T, a *agent, h *host, token, typ, id string) apitype.Job {
	t.Helper()
	req := h.request(1, "5m", "exit-after", "0s", "0")
	req.After = []apitype.Dependency{{Type: typ, ID: id}}
	return a.submit(t, token, req)
}

// refusedAfter posts req with after and wants a 400 on field after whose
// message contains want.
func refusedAfter(t *testing.T, a *agent, token string, req apitype.JobRequest, after []apitype.Dependency, want string) {
	t.Helper()
	req.After = after
	e := a.refused(t, token, req, "bad_request", "")
	if e.Field != "after" || !strings.Contains(e.Message, want) {
		t.Errorf("submit --after %+v: field %q message %q, want field after and a message containing %q", after, e.Field, e.Message, want)
	}
}

// submitRequeue requeues id with token and wants the new job.
func (a *agent) submitRequeue(t *testing.T, id, token string) apitype.Job {
	t.Helper()
	status, body := a.call(t, http.MethodPost, "/api/v1/jobs/"+id+"/requeue", token, []byte(`{}`))
	if status != http.StatusOK {
		t.Fatalf("POST /api/v1/jobs/%s/requeue: %d %s", id, status, body)
	}
	var j apitype.Job
	if err := json.Unmarshal(body, &j); err != nil {
		t.Fatal(err)
	}
	return j
}

// nextID is the job id the store gives after id: j-000012 → j-000013.
func nextID(t *testing.T, id string) string {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(id, "j-"))
	if err != nil {
		t.Fatalf("job id %q: %v", id, err)
	}
	return fmt.Sprintf("j-%06d", n+1)
}

// TestQueueRequeueUntilItSucceeds: a --requeue job that exits non-zero
// while what it needs is missing (a probe dialling a port of the host
// that nobody listens on yet) goes back to the queue and runs again, and
// once the port answers it succeeds: one job, its requeues counted, its
// last run's exit code kept.
func TestQueueRequeueUntilItSucceeds(t *testing.T) {
	t.Parallel()
	h := newHost(t, "  max_requeue: 100\n")
	a := h.start(t)
	probe := dockertest.ProbeImage(t, h.cli)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nw, err := h.cli.NetworkInspect(ctx, spec.NetworkName(h.node), client.NetworkInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var gw string
	for _, c := range nw.Network.IPAM.Config {
		if c.Gateway.Is4() {
			gw = c.Gateway.String()
		}
	}
	if gw == "" {
		t.Fatalf("network %s has no IPv4 gateway: %+v", spec.NetworkName(h.node), nw.Network.IPAM)
	}
	port := freePort(t)
	addr := net.JoinHostPort(gw, strconv.Itoa(port))
	req := apitype.JobRequest{GPUs: 1, TimeLimit: "5m", Image: probe, Command: []string{"dial", addr, "5s"}, Requeue: true}
	j := a.submit(t, h.alice, req)
	dockertest.WaitFor(t, time.Minute, j.ID+" requeued after a failed dial", func() (bool, string) {
		got := a.job(t, j.ID)
		if got.State == "succeeded" || got.State == "failed" {
			t.Fatalf("%s ended %s %q before the port was opened", j.ID, got.State, got.ReasonText)
		}
		return got.Requeues >= 1, fmt.Sprintf("%s %s requeues %d: %s", got.State, got.Reason, got.Requeues, got.ReasonText)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on the jobs network's gateway %s: %v", addr, err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "hello job")
			c.Close()
		}
	}()
	got := a.await(t, j.ID, 2*time.Minute, "succeeded", "failed")
	if got.State != "succeeded" || got.Reason != "exit_code" || got.ExitCode == nil || *got.ExitCode != 0 || got.Requeues < 1 {
		t.Errorf("%s: %s %s %q exit %v requeues %d; want succeeded with exit code 0 after at least one requeue", j.ID, got.State, got.Reason, got.ReasonText, got.ExitCode, got.Requeues)
	}
	if n := h.auditCount(t, "jobs.requeue", j.ID); n != got.Requeues {
		t.Errorf("audit events jobs.requeue for %s: %d, want one per requeue (%d)", j.ID, n, got.Requeues)
	}
}
