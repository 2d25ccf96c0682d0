package run

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/docker"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

var _ Engine = (*docker.Jobs)(nil)

// labelled is the real engine, with the test label added to every job
// container so that a test run that dies leaves nothing dockertest does
// not know of; it records the containers it created.
type labelled struct {
	*docker.Jobs
	mu      sync.Mutex
	created []string
}

func (e *labelled) Create(ctx context.Context, s *spec.Spec) (string, error) {
	cfg := *s.Config
	cfg.Labels = maps.Clone(cfg.Labels)
	cfg.Labels[dockertest.Label] = "1"
	s2 := *s
	s2.Config = &cfg
	id, err := e.Jobs.Create(ctx, &s2)
	if err == nil {
		e.mu.Lock()
		e.created = append(e.created, id)
		e.mu.Unlock()
	}
	return id, err
}

func (e *labelled) createdCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.created)
}

// engineEnv is a queue over a real SQLite ledger and the real engine,
// with fake GPUs passed by env.
type engineEnv struct {
	*env
	cli    *client.Client
	engine *labelled
	image  string
	stop   func()
}

func gpus(n int) []queue.GPU {
	out := make([]queue.GPU, n)
	for i := range out {
		out[i] = queue.GPU{UUID: fmt.Sprintf("GPU-test-%d", i), Index: i, MemoryTotal: 80 << 30}
	}
	return out
}

// newEngineEnv returns a queue on the real engine with n GPUs; the loop
// runs until the test ends (or stop is called).
func newEngineEnv(t testing.TB, n int, edit func(*Config)) *engineEnv {
	t.Helper()
	lockMachineEngine(t)
	return newEngineEnvAt(t, n, func(*client.Client) string { return "" }, edit)
}

// lockMachineEngine takes the GPU lock and removes the job containers
// tests left on the machine's engine, now and when the test ends; under
// the lock, no other test's job containers are there.
func lockMachineEngine(t testing.TB) {
	t.Helper()
	cli := dockertest.Client(t)
	dockertest.LockGPUs(t)
	removeJobContainers(t, cli)
	t.Cleanup(func() { removeJobContainers(t, cli) })
}

// newEngineEnvAt is newEngineEnv with the queue reaching the engine at
// the address host returns ("": as the environment says), given the
// test's own client of the machine's engine. It takes no GPU lock and
// sweeps no container: a test on the machine's engine calls
// lockMachineEngine first.
func newEngineEnvAt(t testing.TB, n int, host func(*client.Client) string, edit func(*Config)) *engineEnv {
	t.Helper()
	cli := dockertest.Client(t)
	img := dockertest.SleeperImage(t, cli)
	dcli, err := docker.NewClient(host(cli), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dcli.Close() })
	// The queue's node, newEnv's node1: the engine shows it the job
	// containers of node1 only, never those other packages' tests make
	// for their own nodes at the same time.
	jobs := docker.NewJobs(dcli, "node1", nil)
	eng := &labelled{Jobs: jobs}
	e := &engineEnv{cli: cli, engine: eng, image: img}
	e.env = newEnv(t, func(c *Config) {
		c.Engine = eng
		c.Rules.Images = []string{"gpumeter-test-sleeper:*"}
		c.StopGrace = time.Second
		c.MaxStartAttempts = 3
		c.MaxRequeue = 1
		if edit != nil {
			edit(c)
		}
	})
	e.q.Observe(Observation{GPUs: gpus(n)})
	e.run(t)
	return e
}

// run starts the loop; stop ends it and waits for Run to return.
func (e *engineEnv) run(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.q.Run(ctx) }()
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(e.stop)
}

// restart drops the queue, as a crash of the agent would, and starts a
// new one over the same store and engine.
func (e *engineEnv) restart(t testing.TB, n int) {
	t.Helper()
	e.stop()
	q, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.q = q
	q.Observe(Observation{GPUs: gpus(n)})
	e.run(t)
}

// removeJobContainers removes the job containers this package's tests
// left: those of their node (newEnv's node1), never another package's,
// whose tests may make job containers of their own nodes meanwhile.
func removeJobContainers(t testing.TB, cli *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", spec.JobLabel).Add("label", dockertest.Label+"=1").Add("label", spec.NodeLabel+"=node1")})
	if err != nil {
		t.Fatalf("list job containers: %v", err)
	}
	for _, c := range res.Items {
		dockertest.Remove(t, cli, c.ID)
	}
}

func (e *engineEnv) sleeper(cmd ...string) spec.Request {
	r := request()
	r.Image = e.image
	r.Command = append([]string{"run"}, cmd...)
	return r
}

// waitState waits until job id is in state.
func (e *engineEnv) waitState(t testing.TB, id string, state queue.State) queue.Job {
	t.Helper()
	var j queue.Job
	dockertest.WaitFor(t, 30*time.Second, id+" "+string(state), func() (bool, string) {
		var err error
		j, err = e.q.Job(context.Background(), id)
		if err != nil {
			return false, err.Error()
		}
		return j.State == state, fmt.Sprintf("%s %s: %s", j.State, j.Reason, j.ReasonText)
	})
	return j
}

// waitEnded waits up to 2 minutes for job id to end, in whatever state,
// and returns it as it ended.
func (e *engineEnv) waitEnded(t testing.TB, id string) queue.Job {
	t.Helper()
	var j queue.Job
	dockertest.WaitFor(t, 2*time.Minute, id+" ended", func() (bool, string) {
		var err error
		j, err = e.q.Job(context.Background(), id)
		if err != nil {
			return false, err.Error()
		}
		return j.State.Ended(), fmt.Sprintf("%s %s: %s", j.State, j.Reason, j.ReasonText)
	})
	return j
}

// stopContainer stops a job's container behind the queue's back, as its
// process ending would: the sleeper exits 3 on SIGTERM.
func (e *engineEnv) stopContainer(t testing.TB, cid string) {
	t.Helper()
	secs := 5
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.cli.ContainerStop(ctx, cid, client.ContainerStopOptions{Timeout: &secs}); err != nil {
		t.Fatalf("stop %.12s: %v", cid, err)
	}
}

// jobContainers counts the engine's containers of job id, by label.
func (e *engineEnv) jobContainers(t testing.TB, id string) []mcontainer.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", spec.JobLabel+"="+id)})
	if err != nil {
		t.Fatal(err)
	}
	return res.Items
}

func exitCode(j queue.Job) string {
	if j.ExitCode == nil {
		return "none"
	}
	return fmt.Sprint(*j.ExitCode)
}

func TestSixJobsOnFourGPUs(t *testing.T) {
	e := newEngineEnv(t, 4, nil)
	var ids []string
	for i := range 6 {
		user := "alice"
		if i%2 == 1 {
			user = "bob"
		}
		ids = append(ids, e.submit(t, user, e.sleeper()).ID)
	}
	held := map[string]bool{}
	for _, id := range ids[:4] {
		j := e.waitState(t, id, queue.Running)
		if len(j.GPUs) != 1 || held[j.GPUs[0]] || j.ContainerID == "" || j.StartedAt.IsZero() {
			t.Errorf("running job %s holds %q (container %q)", id, j.GPUs, j.ContainerID)
		}
		held[j.GPUs[0]] = true
	}
	for _, id := range ids[4:] {
		dockertest.WaitFor(t, 10*time.Second, id+" waiting for resources", func() (bool, string) {
			j, _ := e.q.Job(context.Background(), id)
			return j.State == "queued" && j.Reason == "resources" && strings.HasPrefix(j.ReasonText, "waiting"), string(j.Reason) + ": " + j.ReasonText
		})
	}
	// A pass that ran while the first jobs were still starting knows no
	// start time of theirs yet; the next one names the first to end.
	dockertest.WaitFor(t, 10*time.Second, "the first waiting job's sentence", func() (bool, string) {
		j5, _ := e.q.Job(context.Background(), ids[4])
		return strings.Contains(j5.ReasonText, "waiting for 1 free GPU; none is free") && strings.Contains(j5.ReasonText, "reaches its time limit in 1 h"), j5.ReasonText
	})
	// The snapshot follows at the end of the pass.
	dockertest.WaitFor(t, 5*time.Second, "the snapshot: 4 running, 2 queued, 4 GPUs held, 4 waits", func() (bool, string) {
		s := e.q.Snapshot()
		return s.Jobs[queue.Running] == 4 && s.Jobs[queue.Queued] == 2 && s.GPUsHeld == 4 && s.GPUsFree == 0 && s.WaitCount == 4 &&
			s.WaitCounts[len(s.WaitCounts)-1] == 4, fmt.Sprintf("%+v", s)
	})

	// The first job ends by itself (its process exits 3); the next starts.
	j1, _ := e.q.Job(context.Background(), ids[0])
	released := time.Now()
	e.stopContainer(t, j1.ContainerID)
	e.waitState(t, ids[4], queue.Running)
	t.Logf("release to start: %v (stop returned to the next job running, polled every 20ms)", time.Since(released))
	j1 = e.waitState(t, ids[0], queue.Failed)
	if j1.Reason != "exit_code" || exitCode(j1) != "3" || j1.EndedAt.IsZero() {
		t.Errorf("ended job: reason %s exit %s ended %v; want exit_code 3", j1.Reason, exitCode(j1), j1.EndedAt)
	}

	// The policy stops the second: it fails with stopped_by_policy.
	j2, _ := e.q.Job(context.Background(), ids[1])
	e.q.ExpectStop(j2.ContainerID, queue.ReasonStoppedByPolicy)
	e.stopContainer(t, j2.ContainerID)
	j2 = e.waitState(t, ids[1], queue.Failed)
	if j2.Reason != "stopped_by_policy" || exitCode(j2) != "3" {
		t.Errorf("job stopped by the policy: reason %s exit %s", j2.Reason, exitCode(j2))
	}
	e.waitState(t, ids[5], queue.Running)
	for _, id := range ids {
		if n := len(e.jobContainers(t, id)); n != 1 {
			t.Errorf("job %s has %d containers, want 1", id, n)
		}
	}
}

func TestTwoGPUJobWaitsForTwo(t *testing.T) {
	e := newEngineEnv(t, 3, nil)
	a := e.submit(t, "alice", e.sleeper())
	b := e.submit(t, "bob", e.sleeper())
	e.waitState(t, a.ID, queue.Running)
	e.waitState(t, b.ID, queue.Running)
	req := e.sleeper()
	req.GPUs = 2
	big := e.submit(t, "alice", req)
	dockertest.WaitFor(t, 10*time.Second, "the 2-GPU job waiting", func() (bool, string) {
		j, _ := e.q.Job(context.Background(), big.ID)
		return j.Reason == "resources" && strings.Contains(j.ReasonText, "waiting for 2 free GPUs; 1 is free"), string(j.State) + " " + j.ReasonText
	})
	// The sentence is the pass's, from memory: the store still holds the
	// job as submitted, untouched by the passes since.
	if stored, err := e.store.Job(context.Background(), big.ID); err != nil || stored.ReasonText != submittedText || !stored.UpdatedAt.Equal(big.UpdatedAt) {
		t.Errorf("stored waiting job: %q updated %v (submitted %v), %v; want %q, never rewritten by a pass", stored.ReasonText, stored.UpdatedAt, big.UpdatedAt, err, submittedText)
	}
	got, err := e.q.CancelWait(context.Background(), a.ID, audit.Event{Kind: "api", Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "cancelled" || got.Reason != "cancelled" || exitCode(got) != "3" {
		t.Errorf("cancelled running job: %s %s exit %s; want cancelled with exit 3", got.State, got.Reason, exitCode(got))
	}
	j := e.waitState(t, big.ID, queue.Running)
	if len(j.GPUs) != 2 {
		t.Errorf("2-GPU job holds %q", j.GPUs)
	}
	if _, err := e.q.Cancel(context.Background(), a.ID, audit.Event{}); err == nil {
		t.Errorf("cancel of a cancelled job succeeded")
	}
}

func TestTimeLimit(t *testing.T) {
	e := newEngineEnv(t, 1, nil)
	req := e.sleeper()
	req.TimeLimit = 2 * time.Second
	j := e.submit(t, "alice", req)
	j = e.waitState(t, j.ID, queue.Running)
	j = e.waitState(t, j.ID, queue.Timeout)
	if j.Reason != "time_limit" || exitCode(j) != "3" || j.EndedAt.Sub(j.StartedAt) < 2*time.Second {
		t.Errorf("timed out job: reason %s exit %s ran %v", j.Reason, exitCode(j), j.EndedAt.Sub(j.StartedAt))
	}
	if got := e.auditActions(t); !strings.Contains(strings.Join(got, ","), "jobs.timeout "+j.ID) {
		t.Errorf("audit rows %q lack the timeout", got)
	}
}

func TestTimeLimitKillsAJobThatIgnoresTerm(t *testing.T) {
	e := newEngineEnv(t, 1, nil)
	req := e.sleeper()
	req.Command = []string{"ignore-term"}
	req.TimeLimit = time.Second
	j := e.submit(t, "alice", req)
	j = e.waitState(t, j.ID, queue.Timeout)
	if exitCode(j) != "137" {
		t.Errorf("job that ignores SIGTERM: exit %s, want 137 (killed after stop_grace)", exitCode(j))
	}
}

// BenchmarkReleaseToStart measures, on the real engine, the time from a
// job's container exiting (its FinishedAt, as the engine recorded it) to
// the next job running (its StartedAt, once the engine started it), over
// b.N releases of one GPU with a job always waiting:
//
//	go test -run '^$' -bench BenchmarkReleaseToStart -benchtime 30x ./internal/queue/run/
func BenchmarkReleaseToStart(b *testing.B) {
	e := newEngineEnv(b, 1, nil)
	cur := e.waitState(b, e.submit(b, "alice", e.sleeper()).ID, queue.Running)
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		next := e.submit(b, "alice", e.sleeper())
		e.stopContainer(b, cur.ContainerID)
		ended := e.waitState(b, cur.ID, queue.Failed)
		cur = e.waitState(b, next.ID, queue.Running)
		lat = append(lat, cur.StartedAt.Sub(ended.EndedAt))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Milliseconds()), "p99-ms")
}
