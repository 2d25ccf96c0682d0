package queue

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestQueueKill9: the agent killed with SIGKILL before a job's container
// is created, between its create and its start, and while it runs: after
// a restart the job runs once, to its end, and no GPU stays held.
//
// The binary has no hook to die at the first two moments, so the test
// makes what such a death leaves, with the agent down: the job's row in
// starting (its start intent, with its GPUs) and either no container or a
// container created from the job's own spec, under the job's name and
// labels, never started. The third is a real kill of a running job.
func TestQueueKill9(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// crash turns the job's running container into what a death at
		// that moment leaves, and reports whether the job ran before:
		// whether the restart must start it again.
		crash func(t *testing.T, h *host, id, cid string) (restart bool)
	}{
		{"before create", func(t *testing.T, h *host, id, cid string) bool {
			dockertest.Remove(t, h.cli, cid)
			h.setStarting(t, id)
			return true
		}},
		{"between create and start", func(t *testing.T, h *host, id, cid string) bool {
			c := dockertest.Inspect(t, h.cli, cid)
			dockertest.Remove(t, h.cli, cid)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := h.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
				Name: spec.ContainerName(h.node, id), Config: c.Config, HostConfig: c.HostConfig,
			}); err != nil {
				t.Fatalf("create the job's container, not started: %v", err)
			}
			h.setStarting(t, id)
			return true
		}},
		{"while running", func(*testing.T, *host, string, string) bool { return false }},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(t, "")
			a := h.start(t)
			j := a.submit(t, h.alice, h.request(1, "5m", "exit-after", "5s", "0", "once"))
			j = a.await(t, j.ID, 30*time.Second, "running")
			a.Kill(t)
			restart := c.crash(t, h, j.ID, j.ContainerID)
			created := ""
			if cs := jobContainers(t, h.cli, h.node, j.ID); len(cs) == 1 {
				created = cs[0].ID
			}

			a = h.start(t)
			if restart {
				// The start intent never became a running container: the
				// job goes back to the queue and starts afresh.
				j2 := a.await(t, j.ID, 30*time.Second, "running", "succeeded")
				if j2.ContainerID == j.ContainerID || (created != "" && j2.ContainerID == created) {
					t.Errorf("the restarted agent runs %s in container %.12s, which the crash left", j.ID, j2.ContainerID)
				}
			}
			end := a.await(t, j.ID, 30*time.Second, "succeeded", "failed", "timeout", "cancelled")
			if end.State != "succeeded" || end.ExitCode == nil || *end.ExitCode != 0 {
				t.Errorf("%s ended %s %s exit %v, want succeeded with exit code 0", j.ID, end.State, end.ReasonText, end.ExitCode)
			}
			if !restart && end.ContainerID != j.ContainerID {
				t.Errorf("%s ended in container %.12s, want the one it ran in, %.12s, adopted", j.ID, end.ContainerID, j.ContainerID)
			}
			cs := jobContainers(t, h.cli, h.node, j.ID)
			if len(cs) != 1 || cs[0].ID != end.ContainerID {
				t.Errorf("containers named for %s: %d (want 1, %.12s)", j.ID, len(cs), end.ContainerID)
			}
			// One start intent per life that started it; one container
			// ever ran after the crash.
			wantStarts := 1
			if restart {
				wantStarts = 2
			}
			if n := h.auditCount(t, "jobs.start", j.ID); n != wantStarts {
				t.Errorf("jobs.start audit rows of %s: %d, want %d", j.ID, n, wantStarts)
			}
			wantRequeues := 0
			if restart {
				wantRequeues = 1
			}
			if n := h.auditCount(t, "jobs.requeue", j.ID); n != wantRequeues {
				t.Errorf("jobs.requeue audit rows of %s: %d, want %d", j.ID, n, wantRequeues)
			}
			if n := h.auditCount(t, "jobs.end", j.ID); n != 1 {
				t.Errorf("jobs.end audit rows of %s: %d, want 1", j.ID, n)
			}
			dockertest.WaitFor(t, 10*time.Second, "no GPU held", func() (bool, string) {
				g := a.queueGPUs(t)
				return g["held"] == 0 && g["free"] == 4, fmtGPUs(g)
			})
			if ids := a.list(t, h.admin, "all_users=1&state=starting,running"); len(ids) != 0 {
				t.Errorf("jobs starting or running after the end: %v", ids)
			}
			a.Stop(t)
		})
	}
}

// setStarting sets job id back to its start intent: starting, with its
// GPUs, no container and no start time, as the agent writes it before
// docker create. The agent must be down.
func (h *host) setStarting(t *testing.T, id string) {
	t.Helper()
	db := harness.OpenSQLite(t, filepath.Join(h.dataDir, "ledger.db"))
	defer db.Close()
	res, err := db.Exec(`UPDATE jobs SET state = 'starting', container_id = '', started_us = NULL, reason = '', reason_text = 'starting' WHERE id = ?`, id)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("set %s starting: %d rows", id, n)
	}
}

// auditCount counts the audit rows of action on target in the ledger.
func (h *host) auditCount(t *testing.T, action, target string) int {
	t.Helper()
	db := harness.OpenSQLite(t, filepath.Join(h.dataDir, "ledger.db"))
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM audit_events WHERE action = ? AND target = ?`, action, target).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
