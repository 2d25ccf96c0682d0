package queue

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// preemptConfig preempts after 2 s of waiting, with the grace given.
func preemptConfig(grace string) string {
	return "  preempt_after: 2s\n  preempt_grace: " + grace + "\n"
}

// TestPreemptRequeuesAndFinishes: bob's --preemptible job (CLI) holds
// every GPU; alice's job (API) waits for two of them. Past
// queue.preempt_after bob's job gets SIGTERM, goes back to the queue as
// preempted with its submission time, alice's job runs to its end, and
// bob's runs again, in a new container, and succeeds.
func TestPreemptRequeuesAndFinishes(t *testing.T) {
	t.Parallel()
	h := newHost(t, preemptConfig("1s"))
	a := h.start(t)
	// The grace is the queue's to set.
	bad := h.request(1, "5m", "exit-after", "1s", "0")
	bad.Preemptible, bad.Env = true, []string{"GPUMETER_PREEMPT_GRACE=86400"}
	if e := a.refused(t, h.bob, bad, apitype.CodeRefused, "env_not_allowed"); !strings.Contains(e.Message, "queue.preempt_grace") {
		t.Errorf("the refusal of GPUMETER_PREEMPT_GRACE says %q, want it to name queue.preempt_grace", e.Message)
	}
	out, errOut, code := h.rootCLI(t, "submit", "--as", "bob", "--preemptible", "--gpus", "4", "--time-limit", "5m", "--image", h.image, "--", "exit-after", "15s", "0")
	pid := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(pid, "j-") {
		t.Fatalf("submit --preemptible: exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	p := a.await(t, pid, 30*time.Second, "running")
	if !p.Preemptible {
		t.Errorf("%s: preemptible false, want true", pid)
	}
	env := dockertest.Inspect(t, h.cli, p.ContainerID).Config.Env
	if !slices.Contains(env, "GPUMETER_PREEMPT_GRACE=1") {
		t.Errorf("the preemptible job's environment %q lacks GPUMETER_PREEMPT_GRACE=1", env)
	}

	w := a.submit(t, h.alice, h.request(2, "5m", "exit-after", "2s", "0"))
	back := a.await(t, pid, 30*time.Second, "queued")
	if back.Reason != "preempted" || back.ContainerID != "" || back.StartedAt != nil || len(back.GPUs) != 0 {
		t.Errorf("%s back in the queue: reason %q, container %q, started %v, GPUs %v; want preempted with none of them", pid, back.Reason, back.ContainerID, back.StartedAt, back.GPUs)
	}
	if !back.SubmittedAt.Equal(*p.SubmittedAt) {
		t.Errorf("%s submitted_at %v after the preemption, want %v: it keeps its place by age", pid, back.SubmittedAt, p.SubmittedAt)
	}
	if back.Requeues != 0 {
		t.Errorf("%s requeues %d after a preemption, want 0: preemption does not burn queue.max_requeue", pid, back.Requeues)
	}
	if end := a.await(t, w.ID, 60*time.Second, "succeeded", "failed", "timeout", "cancelled"); end.State != "succeeded" {
		t.Errorf("%s (waiting) ended %s: %s", w.ID, end.State, end.ReasonText)
	}
	again := a.await(t, pid, 60*time.Second, "running", "succeeded")
	if again.ContainerID == p.ContainerID {
		t.Errorf("%s runs again in the container that was preempted, %.12s", pid, p.ContainerID)
	}
	end := a.await(t, pid, 60*time.Second, "succeeded", "failed", "timeout", "cancelled")
	if end.State != "succeeded" || end.ExitCode == nil || *end.ExitCode != 0 {
		t.Errorf("%s ended %s %s exit %v, want succeeded with 0 on its second run", pid, end.State, end.ReasonText, end.ExitCode)
	}
	if n := h.auditCount(t, "jobs.preempt", pid); n != 1 {
		t.Errorf("jobs.preempt audit rows of %s: %d, want 1", pid, n)
	}
	if n := h.auditCount(t, "jobs.start", pid); n != 2 {
		t.Errorf("jobs.start audit rows of %s: %d, want 2 (the preempted run and the one that finished)", pid, n)
	}
	if cs := jobContainers(t, h.cli, h.node, pid); len(cs) != 1 || cs[0].ID != end.ContainerID {
		t.Errorf("containers named for %s: %d, want the last run's alone", pid, len(cs))
	}
}

// TestPreemptKill9: the agent killed with SIGKILL in the middle of a
// preemption: while the container ignores its SIGTERM through a long
// grace, and between the intent's write and the signal (the binary has no
// hook to die there, so the test writes what such a death leaves, with
// the agent down: the running job marked preempted, its container
// running untold). The next life of the agent finishes the preemption:
// the job goes back to the queue once, the waiting job runs, and the
// preempted job starts again once, never in two containers at once.
func TestPreemptKill9(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// crash kills the agent a at the moment named, preempted job p
		// running and w (when the case submits it first) waiting.
		crash     func(t *testing.T, h *host, a *agent, p string)
		waitFirst bool
	}{
		{"during the grace", func(t *testing.T, h *host, a *agent, p string) {
			dockertest.WaitFor(t, 30*time.Second, "the preemption's intent", func() (bool, string) {
				j := a.job(t, p)
				return j.State == "running" && j.Reason == "preempted", j.State + " " + j.Reason + ": " + j.ReasonText
			})
			a.Kill(t)
		}, true},
		{"before the signal", func(t *testing.T, h *host, a *agent, p string) {
			a.Kill(t)
			h.setPreempting(t, p)
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(t, preemptConfig("8s"))
			a := h.start(t)
			req := h.request(4, "5m", "ignore-term")
			req.Preemptible = true
			p := a.submit(t, h.bob, req)
			p = a.await(t, p.ID, 30*time.Second, "running")
			var w apitype.Job
			if c.waitFirst {
				w = a.submit(t, h.alice, h.request(1, "5m", "exit-after", "2s", "0"))
			}
			c.crash(t, h, a, p.ID)
			if !dockertest.Inspect(t, h.cli, p.ContainerID).State.Running {
				t.Fatalf("%s's container stopped before the agent died; the test needs it running", p.ID)
			}

			a = h.start(t)
			if !c.waitFirst {
				w = a.submit(t, h.alice, h.request(1, "5m", "exit-after", "2s", "0"))
			}
			dockertest.WaitFor(t, 90*time.Second, p.ID+" running again after "+w.ID, func() (bool, string) {
				running := 0
				for _, c := range jobContainers(t, h.cli, h.node, p.ID) {
					if c.State == "running" {
						running++
					}
				}
				if running > 1 {
					t.Fatalf("%s runs in %d containers at once", p.ID, running)
				}
				j := a.job(t, p.ID)
				return j.State == "running" && j.ContainerID != p.ContainerID, j.State + " " + j.Reason + ": " + j.ReasonText
			})
			if end := a.await(t, w.ID, 30*time.Second, "succeeded", "failed", "timeout", "cancelled"); end.State != "succeeded" {
				t.Errorf("%s (waiting) ended %s: %s", w.ID, end.State, end.ReasonText)
			}
			if n := h.auditCount(t, "jobs.start", w.ID); n != 1 {
				t.Errorf("jobs.start audit rows of %s: %d, want 1", w.ID, n)
			}
			wantPreempt := 1
			if !c.waitFirst {
				wantPreempt = 0 // the test wrote the intent
			}
			if n := h.auditCount(t, "jobs.preempt", p.ID); n != wantPreempt {
				t.Errorf("jobs.preempt audit rows of %s: %d, want %d (the restart finishes the preemption, it makes none)", p.ID, n, wantPreempt)
			}
			if n := h.auditCount(t, "jobs.requeue", p.ID); n != 1 {
				t.Errorf("jobs.requeue audit rows of %s: %d, want 1", p.ID, n)
			}
			if n := h.auditCount(t, "jobs.start", p.ID); n != 2 {
				t.Errorf("jobs.start audit rows of %s: %d, want 2", p.ID, n)
			}
			if n := h.auditCount(t, "jobs.end", p.ID); n != 0 {
				t.Errorf("jobs.end audit rows of %s: %d, want 0: a preempted job is not ended", p.ID, n)
			}
			if cs := jobContainers(t, h.cli, h.node, p.ID); len(cs) != 1 {
				t.Errorf("containers named for %s: %d, want 1 (the second run's)", p.ID, len(cs))
			}
			if j := a.job(t, p.ID); j.Requeues != 0 {
				t.Errorf("%s requeues %d, want 0", p.ID, j.Requeues)
			}
		})
	}
}

// setPreempting marks running job id as its preemption's intent does,
// before the signal. The agent must be down.
func (h *host) setPreempting(t *testing.T, id string) {
	t.Helper()
	db := harness.OpenSQLite(t, filepath.Join(h.dataDir, "ledger.db"))
	defer db.Close()
	res, err := db.Exec(`UPDATE jobs SET reason = 'preempted', reason_text = 'being preempted' WHERE id = ? AND state = 'running'`, id)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("mark %s preempted: %d rows", id, n)
	}
}
