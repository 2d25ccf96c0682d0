package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/testenv"
)

// TestJobsRunsAJobContainer takes a built job spec through its life on
// the real engine: create (a second create is ErrExists), list, start,
// the die event, stop with its exit code, logs, remove.
func TestJobsRunsAJobContainer(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.LockGPUs(t) // the job's container names GPUs in its env
	img := dockertest.SleeperImage(t, cli)
	jobs := newJobs(t, "", "")
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	jobID := "t-" + hex.EncodeToString(b)
	req := spec.Request{GPUs: 1, TimeLimit: time.Hour, Image: img, Command: []string{"print-every", "1h", "ready"}}
	rules := spec.Rules{Images: []string{"gpumeter-test-sleeper:*"}}
	s, err := spec.Build(req, rules, spec.Identity{UID: 4242, GID: 4242, User: "alice"}, jobID, []string{"GPU-test-0"}, spec.Env)
	if err != nil {
		t.Fatal(err)
	}
	s.Config.Labels[dockertest.Label] = "1"

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	events := jobs.Events(ctx)
	id, err := jobs.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.Remove(t, cli, id) })
	if _, err := jobs.Create(ctx, s); !errors.Is(err, container.ErrExists) {
		t.Errorf("second create: %v, want ErrExists", err)
	}
	c, err := jobs.Inspect(ctx, id)
	if err != nil || c.Running || c.Exited || c.JobID != jobID || c.Name != s.Name || !c.StartedAt.IsZero() {
		t.Errorf("created container %+v, %v; want neither running nor exited, job %s", c, err, jobID)
	}
	if err := jobs.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	list, err := jobs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, l := range list {
		if l.ID == id {
			found = l.Running && l.JobID == jobID
		}
		if l.JobID == "" {
			t.Errorf("List gave %.12s, which has no job label", l.ID)
		}
	}
	if !found {
		t.Errorf("List %+v lacks the running container %.12s", list, id)
	}
	// The sleeper prints once its SIGTERM handler is in place; a stop
	// before that, which a busy machine can make come within milliseconds
	// of the start, ends PID 1 with Go's exit 2 instead of the sleeper's.
	dockertest.WaitFor(t, time.Minute, "the job to print that it is ready", func() (bool, string) {
		var out bytes.Buffer
		err := jobs.Logs(ctx, id, false, &out)
		return err == nil && strings.Contains(out.String(), "ready 1"), fmt.Sprintf("%q %v", out.String(), err)
	})
	if err := jobs.Stop(ctx, id, time.Second); err != nil {
		t.Fatal(err)
	}
	// Other tests' job containers die on the same engine meanwhile: their
	// events are skipped, and this container's must come.
	for died := false; !died; {
		select {
		case got := <-events:
			died = got == id
		case <-ctx.Done():
			t.Fatalf("no die event for %.12s", id)
		}
	}
	c, err = jobs.Inspect(ctx, id)
	if err != nil || !c.Exited || c.ExitCode != dockertest.SleeperExitCode || c.FinishedAt.IsZero() || c.StartedAt.IsZero() {
		t.Errorf("stopped container %+v, %v; want exited with %d", c, err, dockertest.SleeperExitCode)
	}
	var logs bytes.Buffer
	if err := jobs.Logs(ctx, id, true, &logs); err != nil {
		t.Errorf("logs of an exited container, followed: %v", err)
	}
	if err := jobs.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := jobs.Remove(ctx, id); err != nil {
		t.Errorf("second remove: %v, want none", err)
	}
	if _, err := jobs.Inspect(ctx, id); !errors.Is(err, container.ErrNotFound) {
		t.Errorf("inspect of a removed container: %v, want ErrNotFound", err)
	}
	if err := jobs.Logs(ctx, id, false, &logs); !errors.Is(err, container.ErrNotFound) {
		t.Errorf("logs of a removed container: %v, want ErrNotFound", err)
	}
	if err := jobs.Start(ctx, id); !errors.Is(err, container.ErrNotFound) {
		t.Errorf("start of a removed container: %v, want ErrNotFound", err)
	}
	if _, err := jobs.GPUSupport(ctx); err != nil {
		t.Errorf("GPUSupport: %v", err)
	}
}

// TestJobsEventsReconnect cuts the events stream and expects the resync
// mark once it is back, then the deaths that follow.
func TestJobsEventsReconnect(t *testing.T) {
	cli := dockertest.Client(t)
	socket := dockertest.EngineSocket(cli)
	if socket == "" {
		testenv.SkipUnlessCI(t, "the engine is not on a Unix socket (%s)", cli.DaemonHost())
	}
	proxy := dockertest.NewSocketProxy(t, socket)
	jobs := newJobs(t, "unix://"+proxy.Path(), "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	events := jobs.Events(ctx)
	time.Sleep(200 * time.Millisecond)
	proxy.Stop()
	time.Sleep(300 * time.Millisecond)
	proxy.Start(t)
	// Other tests' job containers may die on the same engine meanwhile:
	// their events are skipped until the resync mark "".
	for resynced := false; !resynced; {
		select {
		case got := <-events:
			resynced = got == ""
		case <-ctx.Done():
			t.Fatal("no resync after the stream came back")
		}
	}
	cancel()
	for range events {
	}
}
