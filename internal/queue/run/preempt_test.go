package run

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// TestPreemptionFinishedAfterRestart: the agent died after it wrote a
// preemption's intent and stopped the job's container, and the container
// exited, or was removed, while it was down. The next queue requeues the
// job rather than end it by its exit code or count it lost, and runs it
// again in a new container, once.
func TestPreemptionFinishedAfterRestart(t *testing.T) {
	for _, c := range []struct {
		name  string
		crash func(e *engineEnv, cid string)
	}{
		{"container exited", func(e *engineEnv, cid string) { e.stopContainer(t, cid) }},
		{"container gone", func(e *engineEnv, cid string) { dockertest.Remove(t, e.cli, cid) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEngineEnv(t, 1, func(c *Config) { c.PreemptGrace = 3 * time.Second })
			req := e.sleeper()
			req.Preemptible = true
			j := e.submit(t, "alice", req)
			j = e.waitState(t, j.ID, queue.Running)
			if env := dockertest.Inspect(t, e.cli, j.ContainerID).Config.Env; !slices.Contains(env, "GPUMETER_PREEMPT_GRACE=3") {
				t.Errorf("a preemptible job's environment %q lacks GPUMETER_PREEMPT_GRACE=3", env)
			}
			e.stop()
			if _, err := e.store.UpdateJob(context.Background(), j.ID, queue.Running, func(x *queue.Job) {
				x.Reason, x.ReasonText = queue.ReasonPreempted, "being preempted"
			}, audit.Event{}); err != nil {
				t.Fatal(err)
			}
			c.crash(e, j.ContainerID)
			e.restart(t, 1)
			var got queue.Job
			dockertest.WaitFor(t, 30*time.Second, j.ID+" running again", func() (bool, string) {
				got, _ = e.q.Job(context.Background(), j.ID)
				return got.State == queue.Running && got.ContainerID != "" && got.ContainerID != j.ContainerID, string(got.State) + " " + string(got.Reason) + ": " + got.ReasonText
			})
			if got.Requeues != 0 || got.ExitCode != nil || got.Reason != "" {
				t.Errorf("%s after the preemption: requeues %d, exit %v, reason %q; want none", j.ID, got.Requeues, got.ExitCode, got.Reason)
			}
			if cs := e.jobContainers(t, j.ID); len(cs) != 1 || cs[0].ID != got.ContainerID {
				t.Errorf("%d containers of %s, want the new run's alone", len(cs), j.ID)
			}
		})
	}
}
