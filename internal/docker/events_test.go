package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/testenv"
)

// TestOneSubscriptionFeedsInventoryAndJobs: an inventory and the queue's
// job events on one client both see a job container's death, through the
// client's one subscription; once the engine is cut and back, both catch
// up (the inventory lists again, the job events send the resync mark).
func TestOneSubscriptionFeedsInventoryAndJobs(t *testing.T) {
	cli := dockertest.Client(t)
	socket := dockertest.EngineSocket(cli)
	if socket == "" {
		testenv.SkipUnlessCI(t, "the engine is not on a Unix socket (%s)", cli.DaemonHost())
	}
	dockertest.LockGPUs(t) // the job's container names GPUs in its env
	img := dockertest.SleeperImage(t, cli)
	proxy := dockertest.NewSocketProxy(t, socket)
	client := newClient(t, "unix://"+proxy.Path())
	inv := New(client, Config{})
	jobs := NewJobs(client, "", nil)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	deaths := jobs.Events(ctx)
	invDone := make(chan error, 1)
	go func() { invDone <- inv.Run(ctx) }()
	dockertest.WaitFor(t, 2*settle, "inventory connected", func() (bool, string) {
		return inv.Connected(), "not connected"
	})
	client.mu.Lock()
	watchers := len(client.fan.watchers)
	client.mu.Unlock()
	if watchers != 2 {
		t.Errorf("the client's subscription has %d watchers, want the inventory and the job events", watchers)
	}

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	jobID := "t-" + hex.EncodeToString(b)
	req := spec.Request{GPUs: 1, TimeLimit: time.Hour, Image: img, Command: []string{"run"}}
	s, err := spec.Build(req, spec.Rules{Images: []string{"gpumeter-test-sleeper:*"}}, spec.Identity{UID: 4242, GID: 4242, User: "alice"}, jobID, []string{"GPU-test-0"}, spec.Env)
	if err != nil {
		t.Fatal(err)
	}
	s.Config.Labels[dockertest.Label] = "1"
	id, err := jobs.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.Remove(t, cli, id) })
	if err := jobs.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	dockertest.WaitFor(t, settle, "job container listed running", func() (bool, string) {
		c, ok := inv.Lookup(id)
		return ok && c.Running && c.JobID() == jobID, fmt.Sprintf("%+v", c)
	})
	if err := jobs.Stop(ctx, id, time.Second); err != nil {
		t.Fatal(err)
	}
	waitDeath(ctx, t, deaths, id)
	dockertest.WaitFor(t, settle, "job container listed stopped", func() (bool, string) {
		c, ok := inv.Lookup(id)
		return ok && !c.Running, fmt.Sprintf("%+v", c)
	})

	proxy.Stop()
	dockertest.WaitFor(t, settle, "inventory disconnected after the cut", func() (bool, string) {
		return !inv.Connected(), "still connected"
	})
	proxy.Start(t)
	waitDeath(ctx, t, deaths, "")
	dockertest.WaitFor(t, 2*settle, "inventory connected again", func() (bool, string) {
		return inv.Connected(), "not connected"
	})

	cancel()
	if err := <-invDone; err != nil {
		t.Errorf("Run() = %v, want nil after cancel", err)
	}
	for range deaths {
	}
	client.mu.Lock()
	running := client.fan != nil
	client.mu.Unlock()
	if running {
		t.Error("the subscription still runs with nobody watching")
	}
}

// waitDeath waits for want ("": the resync mark) on deaths, passing over
// the deaths of other tests' job containers.
func waitDeath(ctx context.Context, t *testing.T, deaths <-chan string, want string) {
	t.Helper()
	for {
		select {
		case got, ok := <-deaths:
			if !ok {
				t.Fatalf("job events closed before %q", want)
			}
			if got == want {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no job event %q", want)
		}
	}
}

// jobStopsFunc is a JobStops that notes what it is told.
type jobStopsFunc func(containerID string, reason queue.Reason)

func (f jobStopsFunc) ExpectStop(containerID string, reason queue.Reason) { f(containerID, reason) }

// TestStopperTellsTheQueueOfJobs: a stop from outside the queue tells it
// first of one of its node's jobs' containers, with the stopper's reason,
// and of no other (another node's job of the same id among them); without
// a queue it tells nobody. The engine is not there, so each stop
// fails as unavailable after the telling.
func TestStopperTellsTheQueueOfJobs(t *testing.T) {
	inv := newTestInventory(t, Config{})
	inv.put(container.Container{ID: "job1", Running: true, Labels: map[string]string{container.JobLabel: "j-000001", container.NodeLabel: "n1"}})
	inv.put(container.Container{ID: "theirs", Running: true, Labels: map[string]string{container.JobLabel: "j-000001", container.NodeLabel: "node2"}})
	inv.put(container.Container{ID: "other", Running: true})
	var told []string
	stop := NewStopper(inv, jobStopsFunc(func(id string, r queue.Reason) { told = append(told, id+" "+string(r)) }), "n1", queue.ReasonStoppedByPolicy)
	ctx := context.Background()
	for _, id := range []string{"job1", "theirs", "other", "unknown"} {
		if err := stop.Stop(ctx, id, time.Second); !errors.Is(err, container.ErrUnavailable) {
			t.Errorf("Stop(%s) with no engine: %v, want ErrUnavailable", id, err)
		}
	}
	if want := "job1 " + string(queue.ReasonStoppedByPolicy); len(told) != 1 || told[0] != want {
		t.Errorf("the queue was told %q, want only %q", told, want)
	}
	if err := NewStopper(inv, nil, "n1", queue.ReasonCancelled).Stop(ctx, "job1", time.Second); !errors.Is(err, container.ErrUnavailable) {
		t.Errorf("Stop without a queue: %v, want ErrUnavailable", err)
	}
}
