package queue

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/dockertest"
)

// TestQueueSixOnFour: six one-GPU jobs on four GPUs, through the binary:
// four run at once, two wait with reason resources and a sentence; when
// one ends the next starts, and a two-GPU job waits until two are free.
func TestQueueSixOnFour(t *testing.T) {
	t.Parallel()
	h := newHost(t, "")
	a := h.start(t)
	// All run until stopped; the first ends by itself, once the others
	// are seen placed: its process exits on a SIGTERM from outside the
	// queue, as a job's own crash would.
	ids := []string{h.submitCLI(t, "alice", 1, "5m", long...)}
	for range 5 {
		ids = append(ids, h.submitCLI(t, "bob", 1, "5m", long...))
	}
	for _, id := range ids[:4] {
		a.await(t, id, 30*time.Second, "running")
	}
	held := map[string]string{}
	for _, id := range ids[:4] {
		j := a.job(t, id)
		if len(j.GPUs) != 1 {
			t.Fatalf("%s holds %v, want one GPU", id, j.GPUs)
		}
		if other, dup := held[j.GPUs[0]]; dup {
			t.Fatalf("%s and %s both hold %s", other, id, j.GPUs[0])
		}
		held[j.GPUs[0]] = id
	}
	// The pass after the last submission writes the waiting jobs'
	// reasons; on a busy machine it may come after the fourth start is
	// seen, so each waits for its reason (or fails on any other state).
	for _, id := range ids[4:] {
		var j apitype.Job
		dockertest.WaitFor(t, 30*time.Second, id+" waiting for resources", func() (bool, string) {
			j = a.job(t, id)
			return j.State != "queued" || j.Reason != "resources" || !strings.Contains(j.ReasonText, "submitted;"), j.State + " " + j.Reason + ": " + j.ReasonText
		})
		if j.State != "queued" || j.Reason != "resources" || !strings.Contains(j.ReasonText, "free GPU") {
			t.Errorf("%s: %s %s %q, want queued for resources, with a sentence naming free GPUs", id, j.State, j.Reason, j.ReasonText)
		}
	}
	// The CLI shows the same, for every user.
	out, errOut, code := h.rootCLI(t, "jobs", "--all-users")
	if code != 0 || strings.Count(out, " running ") != 4 || strings.Count(out, "waiting ") != 2 {
		t.Errorf("gpumeter jobs --all-users: exit %d, want 4 running and 2 waiting:\n%s%s", code, out, errOut)
	}

	// The first ends; the fifth takes its GPU.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.cli.ContainerKill(ctx, a.job(t, ids[0]).ContainerID, client.ContainerKillOptions{Signal: "TERM"}); err != nil {
		t.Fatal(err)
	}
	first := a.await(t, ids[0], 30*time.Second, "failed")
	if first.Reason != "exit_code" || first.ExitCode == nil || *first.ExitCode != dockertest.SleeperExitCode {
		t.Errorf("%s: %s %q exit %v, want failed with the sleeper's exit code %d", ids[0], first.Reason, first.ReasonText, first.ExitCode, dockertest.SleeperExitCode)
	}
	fifth := a.await(t, ids[4], 30*time.Second, "running")
	if len(fifth.GPUs) != 1 || fifth.GPUs[0] != first.GPUs[0] {
		t.Errorf("%s got %v, want the GPU %s that %s released", ids[4], fifth.GPUs, first.GPUs[0], ids[0])
	}
	latency := fifth.StartedAt.Sub(*first.EndedAt)
	t.Logf("release to start through the binary: %s (ended_at %s, next started_at %s)", latency, first.EndedAt.Format(time.RFC3339Nano), fifth.StartedAt.Format(time.RFC3339Nano))
	// The start follows the release (how soon is TestQueueLoad's figure,
	// release to start, which a busy machine would make wrong here).
	if latency < 0 {
		t.Errorf("%s started %s before %s ended, want after", ids[4], -latency, ids[0])
	}
	if code := h.waitCode(t, ids[0]); code != dockertest.SleeperExitCode {
		t.Errorf("gpumeter wait %s: exit %d, want the job's %d", ids[0], code, dockertest.SleeperExitCode)
	}

	// A two-GPU job behind the sixth waits until two are free: cancel
	// one runner and it still waits, as the sixth takes that GPU; cancel
	// two more and it runs.
	two := a.submit(t, h.alice, h.request(2, "5m", long...))
	if j := a.job(t, two.ID); j.State != "queued" || j.Reason != "resources" {
		t.Fatalf("%s: %s %s, want queued for resources", two.ID, j.State, j.Reason)
	}
	mustPost(t, a, ids[1], "cancel", h.admin)
	a.await(t, ids[5], 30*time.Second, "running")
	// The pass that started the sixth writes the two-GPU job's new
	// reason just after.
	dockertest.WaitFor(t, 10*time.Second, two.ID+" queued for 2 free GPUs", func() (bool, string) {
		j := a.job(t, two.ID)
		return j.State == "queued" && strings.Contains(j.ReasonText, "2 free GPUs"), j.State + ": " + j.ReasonText
	})
	mustPost(t, a, ids[2], "cancel", h.admin)
	time.Sleep(time.Second) // one GPU free is not enough
	if j := a.job(t, two.ID); j.State != "queued" {
		t.Errorf("%s ran on one free GPU: %s", two.ID, j.State)
	}
	mustPost(t, a, ids[3], "cancel", h.admin)
	if j := a.await(t, two.ID, 30*time.Second, "running"); len(j.GPUs) != 2 {
		t.Errorf("%s runs on %v, want two GPUs", two.ID, j.GPUs)
	}
}

// TestQueueTimeLimit: at its time limit a job is stopped, ends timeout
// with the exit code it stopped with, and gpumeter wait exits 124.
func TestQueueTimeLimit(t *testing.T) {
	t.Parallel()
	h := newHost(t, "  min_time_limit: 1s\n") // a job that times out soon
	a := h.start(t)
	id := h.submitCLI(t, "alice", 1, "2s", long...)
	if code := h.waitCode(t, id); code != 124 {
		t.Errorf("gpumeter wait %s: exit %d, want 124", id, code)
	}
	j := a.job(t, id)
	if j.State != "timeout" || j.Reason != "time_limit" || j.ExitCode == nil || *j.ExitCode != 3 {
		t.Errorf("%s: %s %s exit %v, want timeout for time_limit with the sleeper's SIGTERM code 3", id, j.State, j.Reason, j.ExitCode)
	}
	if j.EndedAt == nil || j.StartedAt == nil {
		t.Fatalf("%s: started_at %v, ended_at %v, want both", id, j.StartedAt, j.EndedAt)
	}
	// It ran its limit out (the state and reason say it was stopped for
	// it); how long the stop took after is the machine's figure.
	if ran := j.EndedAt.Sub(*j.StartedAt); ran < 2*time.Second {
		t.Errorf("%s ran %s with a 2s limit, want the limit run out", id, ran)
	}
}

// TestQueueCancelHold: a job is cancelled queued, starting and running
// (wait exits 125); a held job keeps its place and does not start, and
// released it starts.
func TestQueueCancelHold(t *testing.T) {
	t.Parallel()
	h := newHost(t, "")
	a := h.start(t)

	// Starting, as far as it can be caught: cancelled right after submit
	// while GPUs are free.
	early := a.submit(t, h.alice, h.request(1, "5m", long...))
	mustPost(t, a, early.ID, "cancel", h.alice)
	if j := a.await(t, early.ID, 30*time.Second, "cancelled"); j.Reason != "cancelled" {
		t.Errorf("%s: reason %s, want cancelled", early.ID, j.Reason)
	}
	if cs := jobContainers(t, h.cli, h.node, early.ID); len(cs) == 1 && cs[0].State == "running" {
		t.Errorf("%s is cancelled and its container runs", early.ID)
	}

	// Running.
	run := a.submit(t, h.alice, h.request(1, "5m", long...))
	a.await(t, run.ID, 30*time.Second, "running")
	done := make(chan int, 1)
	go func() { done <- h.waitCode(t, run.ID) }()
	mustPost(t, a, run.ID, "cancel", h.alice)
	if code := <-done; code != 125 {
		t.Errorf("gpumeter wait %s: exit %d, want 125", run.ID, code)
	}
	if status, e := a.post(t, run.ID, "cancel", h.alice); status != http.StatusConflict || e.State != "cancelled" {
		t.Errorf("cancel of the cancelled %s: %d %+v, want 409 naming state cancelled", run.ID, status, e)
	}

	// Fill the GPUs and queue two: the first is held, the second is
	// cancelled while it waits; a third queues behind the held one.
	var runners []string
	for range 4 {
		runners = append(runners, a.submit(t, h.bob, h.request(1, "5m", long...)).ID)
	}
	for _, id := range runners {
		a.await(t, id, 30*time.Second, "running")
	}
	held := a.submit(t, h.alice, h.request(1, "5m", long...))
	queued := a.submit(t, h.alice, h.request(1, "5m", long...))
	if out, errOut, code := a.userCLI(t, h.alice, "hold", held.ID); code != 0 {
		t.Fatalf("gpumeter hold %s: exit %d: %s%s", held.ID, code, out, errOut)
	}
	if j := a.job(t, held.ID); j.State != "queued" || j.Reason != "held" || !j.Held {
		t.Errorf("held %s: %s %s held=%v, want queued, reason held", held.ID, j.State, j.Reason, j.Held)
	}
	// Queued: cancelled while it waits.
	mustPost(t, a, queued.ID, "cancel", h.alice)
	a.await(t, queued.ID, 10*time.Second, "cancelled")
	behind := a.submit(t, h.alice, h.request(1, "5m", long...))

	// A GPU frees: the held job does not take it, the one behind it does.
	mustPost(t, a, runners[0], "cancel", h.admin)
	a.await(t, behind.ID, 30*time.Second, "running")
	if j := a.job(t, held.ID); j.State != "queued" || j.Reason != "held" {
		t.Errorf("held %s after a GPU was freed: %s %s, want still held", held.ID, j.State, j.Reason)
	}
	// Another frees while it is held, then it is released: it starts.
	mustPost(t, a, runners[1], "cancel", h.admin)
	time.Sleep(time.Second)
	if j := a.job(t, held.ID); j.State != "queued" {
		t.Errorf("held %s started: %s", held.ID, j.State)
	}
	if out, errOut, code := a.userCLI(t, h.alice, "release", held.ID); code != 0 {
		t.Fatalf("gpumeter release %s: exit %d: %s%s", held.ID, code, out, errOut)
	}
	a.await(t, held.ID, 30*time.Second, "running")
}

// long is a job command that runs until it is stopped (SIGTERM exits 3).
var long = []string{"exit-after", "10m", "0"}

// waitCode runs gpumeter wait on job id and returns its exit code.
func (h *host) waitCode(t *testing.T, id string) int {
	t.Helper()
	_, _, code := h.rootCLI(t, "wait", id)
	return code
}

// mustPost sends verb on job id with token and wants a 200.
func mustPost(t *testing.T, a *agent, id, verb, token string) apitype.Error {
	t.Helper()
	status, e := a.post(t, id, verb, token)
	if status != http.StatusOK {
		t.Fatalf("%s %s: %d %+v", verb, id, status, e)
	}
	return e
}
