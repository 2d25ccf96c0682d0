package run

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/ledger/postgres"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// outage is how long the tests keep the engine or the ledger away: long
// enough for a start to be tried many times over queue.max_start_attempts
// with the retry backoff, as a daemon restart takes.
const outage = 15 * time.Second

// exitAfter is a sleeper job that exits with code after d.
func (e *engineEnv) exitAfter(d, code string) spec.Request {
	r := e.sleeper()
	r.Command = []string{"exit-after", d, code}
	return r
}

// TestEngineOutageBurnsNoAttempt: the queue reaches the engine through a
// socket proxy that the test cuts for 15 s, while 4 jobs run on 6 GPUs
// and 16 more are submitted. None fails and none counts an attempt: the starts the
// cut refused go back as engine_unavailable, the loop starts nothing
// while the engine is away (only the first start meets the cut), and
// once it is back the jobs that ended meanwhile are found by the
// reconciliation and the rest run.
func TestEngineOutageBurnsNoAttempt(t *testing.T) {
	var proxy *dockertest.SocketProxy
	lockMachineEngine(t)
	e := newEngineEnvAt(t, 6, func(cli *client.Client) string {
		sock := dockertest.EngineSocket(cli)
		if sock == "" {
			t.Skip("the engine is not reached over a Unix socket, which the proxy needs")
		}
		proxy = dockertest.NewSocketProxy(t, sock)
		return "unix://" + proxy.Path()
	}, nil)
	var ids []string
	for range 4 {
		ids = append(ids, e.submit(t, "alice", e.exitAfter("3s", "0")).ID)
	}
	for _, id := range ids {
		e.waitState(t, id, queue.Running)
	}

	proxy.Stop()
	cutAt := time.Now()
	for range 16 {
		ids = append(ids, e.submit(t, "bob", e.exitAfter("1s", "0")).ID)
	}
	dockertest.WaitFor(t, outage, "a job waiting for the engine", func() (bool, string) {
		js, err := e.q.Jobs(context.Background(), ledger.JobFilter{States: []queue.State{queue.Queued}})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, j := range js {
			if j.Reason == queue.ReasonEngineUnavailable {
				return true, ""
			}
			seen = append(seen, j.ID+" "+string(j.Reason))
		}
		return false, strings.Join(seen, ", ")
	})
	time.Sleep(time.Until(cutAt.Add(outage)))
	deferred := 0
	for _, a := range e.auditActions(t) {
		if strings.HasPrefix(a, "jobs.start_deferred ") {
			deferred++
		}
	}
	if deferred == 0 || deferred > 2 {
		t.Errorf("%d starts met the cut engine, want 1 or 2: the loop must stop starting once it sees the engine away", deferred)
	}
	for _, id := range ids {
		j, err := e.q.Job(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State.Ended() {
			t.Errorf("job %s is %s (%s: %s) while the engine is away", id, j.State, j.Reason, j.ReasonText)
		}
	}
	proxy.Start(t)

	for _, id := range ids {
		j := e.waitEnded(t, id)
		if j.State != queue.Succeeded || j.Attempts != 0 || exitCode(j) != "0" {
			t.Errorf("job %s: %s (%s: %s), exit %s, %d attempts; want succeeded, exit 0, no attempt", id, j.State, j.Reason, j.ReasonText, exitCode(j), j.Attempts)
		}
	}
	if n := e.engine.createdCount(); n != len(ids) {
		t.Errorf("%d containers created for %d jobs", n, len(ids))
	}
}

// TestLedgerOutageLosesNoExit: the queue's PostgreSQL is cut off (through
// pgtest's proxy) for 15 s while two running jobs' containers exit and
// two more jobs wait for their GPUs. Once it is back, the ended jobs have
// the state, exit code and end time (the container's FinishedAt) the
// engine recorded, their GPUs are free, and the waiting jobs run.
func TestLedgerOutageLosesNoExit(t *testing.T) {
	proxy, dsn := pgtest.NewProxy(t, pgtest.DSN(t))
	store, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e := newEngineEnv(t, 2, func(c *Config) { c.Store = store })
	first := []queue.Job{
		e.submit(t, "alice", e.exitAfter("4s", "0")),
		e.submit(t, "bob", e.exitAfter("4s", "5")),
	}
	var waiting []queue.Job
	for range 2 {
		waiting = append(waiting, e.submit(t, "alice", e.sleeper()))
	}
	for i, j := range first {
		first[i] = e.waitState(t, j.ID, queue.Running)
	}

	proxy.Partition()
	cutAt := time.Now()
	finished := map[string]time.Time{}
	for _, j := range first {
		dockertest.WaitFor(t, outage, j.ID+"'s container exited", func() (bool, string) {
			c := dockertest.Inspect(t, e.cli, j.ContainerID)
			if c.State.Running {
				return false, "running"
			}
			at, err := time.Parse(time.RFC3339Nano, c.State.FinishedAt)
			if err != nil {
				return false, err.Error()
			}
			finished[j.ID] = at
			return true, ""
		})
	}
	time.Sleep(time.Until(cutAt.Add(outage)))
	healed := time.Now()
	proxy.Heal()

	for i, want := range []struct {
		state queue.State
		exit  string
	}{{queue.Succeeded, "0"}, {queue.Failed, "5"}} {
		j := e.waitState(t, first[i].ID, want.state)
		if exitCode(j) != want.exit || j.Reason != queue.ReasonExitCode {
			t.Errorf("job %s: exit %s reason %s, want exit %s reason exit_code", j.ID, exitCode(j), j.Reason, want.exit)
		}
		if d := j.EndedAt.Sub(finished[j.ID]); d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("job %s ended at %v, want its container's finish %v", j.ID, j.EndedAt, finished[j.ID])
		}
	}
	for _, j := range waiting {
		j = e.waitState(t, j.ID, queue.Running)
		if len(j.GPUs) != 1 {
			t.Errorf("job %s runs on %q", j.ID, j.GPUs)
		}
	}
	t.Logf("from the ledger's return to the waiting jobs running: %v", time.Since(healed))
	if s := e.q.Snapshot(); s.Jobs[queue.Running] != 2 || s.GPUsHeld != 2 {
		t.Errorf("snapshot after the outage: %+v, want the 2 waiting jobs running on 2 GPUs", s)
	}
}
