package run

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	mcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

func TestHoldKeepsAJobFromStarting(t *testing.T) {
	e := newEngineEnv(t, 1, nil)
	e.q.Observe(Observation{}) // no GPUs yet: the job waits
	j := e.submit(t, "alice", e.sleeper())
	if _, err := e.q.Hold(context.Background(), j.ID, audit.Event{Kind: "api"}); err != nil {
		t.Fatal(err)
	}
	e.q.Observe(Observation{GPUs: gpus(1)})
	time.Sleep(500 * time.Millisecond)
	if got, _ := e.q.Job(context.Background(), j.ID); got.State != "queued" || got.Reason != "held" {
		t.Errorf("held job with a free GPU: %s %s, want queued and held", got.State, got.Reason)
	}
	if _, err := e.q.Release(context.Background(), j.ID, audit.Event{Kind: "api"}); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, j.ID, queue.Running)
	var se *StateError
	if _, err := e.q.Hold(context.Background(), j.ID, audit.Event{}); !errors.As(err, &se) || se.State != queue.Running {
		t.Errorf("hold of a running job: %v, want a state error", err)
	}
}

func TestOutsideContainerKeepsItsGPU(t *testing.T) {
	e := newEngineEnv(t, 2, nil)
	outside := queue.Outside{Containers: []queue.OutsideContainer{{Name: "notebook", User: "bob", GPUs: []string{"GPU-test-0"}}}}
	e.q.Observe(Observation{GPUs: gpus(2), Outside: outside})
	a := e.submit(t, "alice", e.sleeper())
	b := e.submit(t, "alice", e.sleeper())
	if ja := e.waitState(t, a.ID, queue.Running); len(ja.GPUs) != 1 || ja.GPUs[0] != "GPU-test-1" {
		t.Errorf("first job on %q, want GPU-test-1 (GPU-test-0 is used outside the queue)", ja.GPUs)
	}
	dockertest.WaitFor(t, 10*time.Second, "the second job waiting for outside use", func() (bool, string) {
		j, _ := e.q.Job(context.Background(), b.ID)
		return j.Reason == "outside_use" && strings.Contains(j.ReasonText, "GPU 0 is held by bob's container notebook (outside the queue)"), string(j.Reason) + ": " + j.ReasonText
	})
	dockertest.WaitFor(t, 5*time.Second, "the snapshot: 1 GPU held, 1 outside", func() (bool, string) {
		s := e.q.Snapshot()
		return s.GPUsOutside == 1 && s.GPUsHeld == 1 && s.GPUsFree == 0, fmt.Sprintf("%+v", s)
	})
	e.q.Observe(Observation{GPUs: gpus(2)}) // the notebook stopped
	if jb := e.waitState(t, b.ID, queue.Running); jb.GPUs[0] != "GPU-test-0" {
		t.Errorf("second job on %q, want GPU-test-0", jb.GPUs)
	}
}

func TestDockerStartErrorRequeues(t *testing.T) {
	e := newEngineEnv(t, 1, func(c *Config) { c.MaxStartAttempts = 2 })
	req := e.sleeper()
	req.Image = "gpumeter-test-sleeper:not-built" // allowed, but the engine has no such image
	j := e.submit(t, "alice", req)
	dockertest.WaitFor(t, 10*time.Second, "start_failed", func() (bool, string) {
		got, _ := e.q.Job(context.Background(), j.ID)
		return got.State == "queued" && got.Reason == "start_failed" && got.Attempts == 1, string(got.State) + " " + string(got.Reason) + ": " + got.ReasonText
	})
	got, _ := e.q.Job(context.Background(), j.ID)
	if !strings.Contains(got.ReasonText, "not-built") || len(got.GPUs) != 0 {
		t.Errorf("requeued job: %q holding %q; want the engine's error and no GPUs", got.ReasonText, got.GPUs)
	}
	got = e.waitState(t, j.ID, queue.Failed)
	if got.Reason != "start_attempts" || got.Attempts != 2 {
		t.Errorf("given up job: %s after %d attempts", got.Reason, got.Attempts)
	}
	// The GPU is free again: the next job runs.
	e.waitState(t, e.submit(t, "alice", e.sleeper()).ID, queue.Running)
}

func TestCancelWhileStarting(t *testing.T) {
	e := newEngineEnv(t, 1, nil)
	e.stop()
	j := e.submit(t, "alice", e.sleeper())
	// The start intent was written, and then the agent stopped.
	if _, err := e.q.Launcher.update(context.Background(), j.ID, queue.Queued, queue.Starting, func(j *queue.Job) { j.GPUs = []string{"GPU-test-0"} }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan queue.Job, 1)
	go func() {
		got, err := e.q.CancelWait(context.Background(), j.ID, audit.Event{Kind: "api", Caller: "alice"})
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	time.Sleep(100 * time.Millisecond)
	e.run(t)
	select {
	case got := <-done:
		if got.State != "cancelled" {
			t.Errorf("job cancelled while starting: %s", got.State)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cancel of a starting job did not return")
	}
	if n := len(e.jobContainers(t, j.ID)); n != 0 || e.engine.createdCount() != 0 {
		t.Errorf("cancelled starting job: %d containers, %d created; want none", n, e.engine.createdCount())
	}
}

// The kill -9 cases: the queue is dropped at each step of a start and a
// new one runs over the same store; no job runs twice, no GPU stays held.
func TestReconcileBeforeCreate(t *testing.T) {
	e := newEngineEnv(t, 1, nil)
	e.stop()
	j := e.submit(t, "alice", e.sleeper())
	if _, err := e.q.Launcher.update(context.Background(), j.ID, queue.Queued, queue.Starting, func(j *queue.Job) { j.GPUs = []string{"GPU-test-0"} }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	e.restart(t, 1)
	e.waitState(t, j.ID, queue.Running)
	if n := len(e.jobContainers(t, j.ID)); n != 1 {
		t.Errorf("job has %d containers, want 1", n)
	}
}

func TestReconcileBetweenCreateAndStart(t *testing.T) {
	e := newEngineEnv(t, 1, nil)
	e.stop()
	j := e.submit(t, "alice", e.sleeper())
	intent, err := e.q.Launcher.update(context.Background(), j.ID, queue.Queued, queue.Starting, func(j *queue.Job) { j.GPUs = []string{"GPU-test-0"} }, audit.Event{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.q.buildSpec(intent, intent.GPUs)
	if err != nil {
		t.Fatal(err)
	}
	first, err := e.engine.Create(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	e.restart(t, 1)
	got := e.waitState(t, j.ID, queue.Running)
	cs := e.jobContainers(t, j.ID)
	if len(cs) != 1 || cs[0].ID == first || got.ContainerID != cs[0].ID {
		t.Errorf("job runs in %q with containers %v; want one new container (the created one removed)", got.ContainerID, cs)
	}
}

func TestReconcileWhileRunning(t *testing.T) {
	e := newEngineEnv(t, 1, nil)
	j := e.waitState(t, e.submit(t, "alice", e.sleeper()).ID, queue.Running)
	e.restart(t, 1)
	// Adopted: still running in the same container; a second job waits.
	other := e.submit(t, "bob", e.sleeper())
	dockertest.WaitFor(t, 10*time.Second, "the second job waiting", func() (bool, string) {
		o, _ := e.q.Job(context.Background(), other.ID)
		return o.Reason == "resources" && o.ReasonText != submittedText, string(o.State) + " " + o.ReasonText
	})
	if got, _ := e.q.Job(context.Background(), j.ID); got.State != "running" || got.ContainerID != j.ContainerID {
		t.Errorf("adopted job %s in %.12s, want running in %.12s", got.State, got.ContainerID, j.ContainerID)
	}
	e.stopContainer(t, j.ContainerID)
	if got := e.waitState(t, j.ID, queue.Failed); exitCode(got) != "3" {
		t.Errorf("adopted job ended with exit %s, want 3", exitCode(got))
	}
	e.waitState(t, other.ID, queue.Running)
	if n := len(e.jobContainers(t, j.ID)); n != 1 {
		t.Errorf("job has %d containers, want 1", n)
	}
}

func TestReconcileExitedWhileDown(t *testing.T) {
	e := newEngineEnv(t, 1, func(c *Config) { c.Notify = []string{"end"} })
	j := e.waitState(t, e.submit(t, "alice", e.sleeper()).ID, queue.Running)
	e.stop()
	e.stopContainer(t, j.ContainerID)
	e.restart(t, 1)
	got := e.waitState(t, j.ID, queue.Failed)
	if exitCode(got) != "3" || got.Reason != "exit_code" {
		t.Errorf("job that exited while the agent was down: %s exit %s", got.Reason, exitCode(got))
	}
	dockertest.WaitFor(t, 5*time.Second, "no GPU held", func() (bool, string) {
		s := e.q.Snapshot()
		return s.GPUsHeld == 0 && s.GPUsFree == 1 && s.Jobs[queue.Failed] == 1, ""
	})
}

func TestReconcileContainerGone(t *testing.T) {
	e := newEngineEnv(t, 1, func(c *Config) { c.MaxRequeue = 1 })
	j := e.waitState(t, e.submit(t, "alice", e.sleeper()).ID, queue.Running)
	e.stop()
	dockertest.Remove(t, e.cli, j.ContainerID)
	e.restart(t, 1)
	// Lost, requeued once, and run again in a new container.
	dockertest.WaitFor(t, 30*time.Second, "the lost job running again", func() (bool, string) {
		got, _ := e.q.Job(context.Background(), j.ID)
		return got.State == "running" && got.Requeues == 1 && got.ContainerID != j.ContainerID, string(got.State) + " " + got.ReasonText
	})
	got, _ := e.q.Job(context.Background(), j.ID)
	e.stop()
	dockertest.Remove(t, e.cli, got.ContainerID)
	e.restart(t, 1)
	// Lost a second time: past queue.max_requeue, it fails.
	if got := e.waitState(t, j.ID, queue.Failed); got.Reason != "requeue_limit" {
		t.Errorf("job lost twice: %s, want requeue_limit", got.Reason)
	}
}

func TestLogsAndRetention(t *testing.T) {
	e := newEngineEnv(t, 1, func(c *Config) { c.LogRetention = time.Second })
	j := e.waitState(t, e.submit(t, "alice", e.sleeper()).ID, queue.Running)
	var buf bytes.Buffer
	if err := e.q.Logs(context.Background(), j.ID, false, &buf); err != nil {
		t.Errorf("logs of a running job: %v", err)
	}
	if _, err := e.q.Cancel(context.Background(), j.ID, audit.Event{Kind: "api"}); err != nil {
		t.Fatal(err)
	}
	dockertest.WaitFor(t, 20*time.Second, "the ended job's container removed", func() (bool, string) {
		return len(e.jobContainers(t, j.ID)) == 0, "still there"
	})
	if err := e.q.Logs(context.Background(), j.ID, false, &buf); !errors.Is(err, ErrLogsRemoved) {
		t.Errorf("logs after retention: %v, want ErrLogsRemoved", err)
	}
}

func TestJobGetsItsEnvAndLabels(t *testing.T) {
	e := newEngineEnv(t, 1, nil)
	req := e.sleeper()
	req.Env = []string{"TOKEN=s3cret"}
	j, err := e.q.Submit(context.Background(), Submission{Request: req, User: "alice", Team: "ml", Notify: []string{"start", "end"}})
	if err != nil {
		t.Fatal(err)
	}
	j = e.waitState(t, j.ID, queue.Running)
	ins := dockertest.Inspect(t, e.cli, j.ContainerID)
	env := strings.Join(ins.Config.Env, "\n")
	for _, want := range []string{"TOKEN=s3cret", "NVIDIA_VISIBLE_DEVICES=GPU-test-0", "CUDA_DEVICE_ORDER=PCI_BUS_ID"} {
		if !strings.Contains(env, want) {
			t.Errorf("container env lacks %s:\n%s", want, env)
		}
	}
	if l := ins.Config.Labels; l["gpumeter.job"] != j.ID || l["gpumeter.user"] != "alice" || l["gpumeter.team"] != "ml" || ins.Config.User != "4242:4242" {
		t.Errorf("container labels %v user %q", l, ins.Config.User)
	}
	if _, err := e.q.CancelWait(context.Background(), j.ID, audit.Event{Kind: "api"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.q.Launcher.env.path(j.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("env file of the ended job: %v, want it removed", err)
	}
	e.mu.Lock()
	var got []string
	for _, ev := range e.events {
		got = append(got, ev.Event+" "+string(ev.Job.State))
	}
	e.mu.Unlock()
	if strings.Join(got, ",") != "start running,end cancelled" {
		t.Errorf("notify events %q, want the start and the end", got)
	}

	// A job whose env values were lost (a crash during its submit) fails
	// at start and never runs without them.
	e.stop()
	j2, err := e.q.Submit(context.Background(), Submission{Request: req, User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.q.Launcher.env.path(j2.ID)); err != nil {
		t.Fatal(err)
	}
	e.restart(t, 1)
	got2 := e.waitState(t, j2.ID, queue.Failed)
	if got2.Reason != "start_refused" || !strings.Contains(got2.ReasonText, "environment values are missing") {
		t.Errorf("job without its env file: %s: %s", got2.Reason, got2.ReasonText)
	}
}

// TestReconcileLeavesUnknownJobs: a job container whose job the ledger
// does not have (the ledger was lost or is older than the container) is
// neither stopped nor removed when the queue starts: a lost ledger must
// not kill jobs. The agent refuses such a start; this is the queue's own
// line of defence.
func TestReconcileLeavesUnknownJobs(t *testing.T) {
	// No network: the test needs no bridge of the engine's.
	e := newEngineEnv(t, 1, func(c *Config) { c.Rules.Network = "none" })
	e.stop()
	none := &mcontainer.HostConfig{NetworkMode: "none"}
	running, _ := dockertest.Container(t, e.cli, dockertest.Spec{Name: "unknown-running",
		Labels: map[string]string{spec.JobLabel: "j-990001", spec.NodeLabel: "n1"}, HostConfig: none})
	created, _ := dockertest.Container(t, e.cli, dockertest.Spec{Name: "unknown-created",
		Labels: map[string]string{spec.JobLabel: "j-990002", spec.NodeLabel: "n1"}, HostConfig: none, CreateOnly: true})
	e.restart(t, 1)
	// The restarted queue has reconciled once it runs a new job.
	e.waitState(t, e.submit(t, "alice", e.sleeper()).ID, queue.Running)
	if st := dockertest.Inspect(t, e.cli, running).State; st == nil || !st.Running {
		t.Errorf("the running container of an unknown job: %+v, want it running", st)
	}
	if st := dockertest.Inspect(t, e.cli, created).State; st == nil || st.Status != "created" {
		t.Errorf("the created container of an unknown job: %+v, want it created", st)
	}
}

// TestNeverAdoptsAnotherLedgersContainer: a container that carries the
// name and job ID a new job gets, but started before that job was
// submitted, belongs to a job of a ledger since lost. The new job fails
// with a sentence naming it; the container is neither adopted nor
// stopped, at the start nor by a later reconciliation.
func TestNeverAdoptsAnotherLedgersContainer(t *testing.T) {
	e := newEngineEnv(t, 1, func(c *Config) { c.Rules.Network = "none" })
	name := spec.ContainerName(e.cfg.Node, "j-000001")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       name,
		Config:     &mcontainer.Config{Image: e.image, Labels: map[string]string{spec.JobLabel: "j-000001", spec.NodeLabel: e.cfg.Node, dockertest.Label: "1"}},
		HostConfig: &mcontainer.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	t.Cleanup(func() { dockertest.Remove(t, e.cli, res.ID) })
	if _, err := e.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	started := dockertest.Inspect(t, e.cli, res.ID).State.StartedAt
	// The job must be submitted after the container started, by the
	// clocks both keep (the engine's is read in nanoseconds).
	dockertest.WaitFor(t, time.Minute, "the clock to pass the container's start", func() (bool, string) {
		at, err := time.Parse(time.RFC3339Nano, started)
		return err == nil && time.Now().After(at.Add(10*time.Millisecond)), started
	})
	j := e.submit(t, "alice", e.sleeper())
	if j.ID != "j-000001" {
		t.Fatalf("the new ledger's first job is %s, want j-000001", j.ID)
	}
	got := e.waitState(t, j.ID, queue.Failed)
	if !strings.Contains(got.ReasonText, "before this job was submitted") || !strings.Contains(got.ReasonText, "docker rm -f "+name) {
		t.Errorf("reason %q, want it to say the container is older than the job and how to remove it", got.ReasonText)
	}
	e.restart(t, 1)
	e.waitState(t, e.submit(t, "alice", e.sleeper()).ID, queue.Running) // reconciled
	if st := dockertest.Inspect(t, e.cli, res.ID).State; st == nil || !st.Running {
		t.Errorf("the other ledger's container: %+v, want it running still", st)
	}
	if got, err := e.q.Job(context.Background(), j.ID); err != nil || got.ContainerID != "" {
		t.Errorf("job %s: container %q, %v; want none", j.ID, got.ContainerID, err)
	}
}
