package docker

// Tests against a real Docker engine; see dockertest.Client for when they skip.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	mcontainer "github.com/moby/moby/api/types/container"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/testenv"
)

var ignoreStats = cmpopts.IgnoreFields(container.Container{}, "CPUSeconds", "MemoryBytes", "StatsErr")

func TestInventoryFollowsContainers(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	dockertest.LockGPUs(t) // it runs a container that requests GPUs
	img := dockertest.SleeperImage(t, cli)
	owner := map[string]string{"gpumeter.user": "alice", "gpumeter.team": "nlp"}
	withCompose := map[string]string{"gpumeter.user": "alice", "gpumeter.team": "nlp", "com.docker.compose.project": "proj-b"}

	type want struct {
		user, team, project string
		gpus                container.GPURequest
	}
	cases := []struct {
		spec dockertest.Spec
		want want
	}{
		{dockertest.Spec{Name: "labels-uid", Labels: owner, User: "1000"}, want{user: "alice", team: "nlp"}},
		{dockertest.Spec{Name: "labels-gpus", Labels: withCompose, Env: []string{"NVIDIA_VISIBLE_DEVICES=1,2"}}, want{user: "alice", team: "nlp", project: "proj-b", gpus: container.GPURequest{IDs: []string{"1", "2"}}}},
		{dockertest.Spec{Name: "config-uid", User: "1000:1000"}, want{user: "bob"}},
		{dockertest.Spec{Name: "process-owner"}, want{user: "root"}},
	}
	ids := make([]string, len(cases))
	for n, c := range cases {
		ids[n], _ = dockertest.Container(t, cli, c.spec)
	}

	inv := startInventory(t, "", Config{Procs: hostProcs{names: map[int]string{0: "root", 1000: "bob"}}})

	got := listed(t, inv)
	for n, c := range cases {
		id := ids[n]
		ins := dockertest.Inspect(t, cli, id)
		labels := map[string]string{dockertest.Label: "1"}
		for k, v := range c.spec.Labels {
			labels[k] = v
		}
		want := container.Container{
			ID:        id,
			Name:      strings.TrimPrefix(ins.Name, "/"),
			Image:     img,
			Labels:    labels,
			User:      c.want.user,
			Team:      c.want.team,
			Project:   c.want.project,
			Running:   true,
			PID:       ins.State.Pid,
			StartedAt: parseTime(ins.State.StartedAt),
			GPUs:      c.want.gpus,
		}
		g, ok := got[id]
		if !ok {
			t.Errorf("%s: not listed", c.spec.Name)
			continue
		}
		if diff := cmp.Diff(want, g, ignoreStats); diff != "" {
			t.Errorf("%s: Containers() entry mismatch (-want +got):\n%s", c.spec.Name, diff)
		}
		if g.PID <= 0 || g.StartedAt.IsZero() {
			t.Errorf("%s: PID %d, StartedAt %v; want both set", c.spec.Name, g.PID, g.StartedAt)
		}
		if g.MemoryBytes == 0 || g.StatsErr != "" {
			t.Errorf("%s: MemoryBytes %d, StatsErr %q; want stats of the main process", c.spec.Name, g.MemoryBytes, g.StatsErr)
		}
		// The PID is a host PID inside the container's cgroup.
		if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", g.PID)); err == nil && !strings.Contains(string(cg), id) {
			t.Errorf("%s: /proc/%d/cgroup does not name the container:\n%s", c.spec.Name, g.PID, cg)
		}
	}

	// A stop is seen through the die event, with the exit code, and the
	// owner found through the main process survives it.
	ctx := context.Background()
	stopped := []string{ids[0], ids[3]}
	for _, id := range stopped {
		if err := NewStopper(inv, nil, "", "").Stop(ctx, id, 5*time.Second); err != nil {
			t.Fatalf("Stop(%.12s): %v", id, err)
		}
	}
	for n, id := range stopped {
		// The die event is applied in two steps: at once from the event,
		// whose time is not the engine's FinishedAt, then from an inspect.
		// Wait for the second.
		ins := dockertest.Inspect(t, cli, id)
		dockertest.WaitFor(t, settle, "stopped container shown as not running, as the engine recorded it", func() (bool, string) {
			c, ok := inv.Lookup(id)
			return ok && !c.Running && c.FinishedAt.Equal(parseTime(ins.State.FinishedAt)), fmt.Sprintf("%+v", c)
		})
		g := listed(t, inv)[id]
		if g.Running || g.PID != 0 || g.ExitCode != dockertest.SleeperExitCode || !g.FinishedAt.Equal(parseTime(ins.State.FinishedAt)) || g.FinishedAt.IsZero() {
			t.Errorf("stopped %d: Running %v PID %d ExitCode %d FinishedAt %v; want false 0 %d %s",
				n, g.Running, g.PID, g.ExitCode, g.FinishedAt, dockertest.SleeperExitCode, ins.State.FinishedAt)
		}
		if wantUser := []string{"alice", "root"}[n]; g.User != wantUser {
			t.Errorf("stopped %d: User %q, want %q", n, g.User, wantUser)
		}
	}

	// Removing a container drops it.
	dockertest.Remove(t, cli, ids[0])
	dockertest.WaitFor(t, settle, "removed container to disappear", func() (bool, string) {
		_, ok := listed(t, inv)[ids[0]]
		return !ok, "still listed"
	})

	// A new container shows up through the events stream alone.
	lists := inv.lists.Load()
	id, name := dockertest.Container(t, cli, dockertest.Spec{Name: "late", Labels: owner})
	dockertest.WaitFor(t, settle, "new container to appear running", func() (bool, string) {
		c, ok := listed(t, inv)[id]
		return ok && c.Running && c.PID > 0, fmt.Sprintf("%+v", c)
	})
	if c := listed(t, inv)[id]; c.Name != name || c.User != "alice" {
		t.Errorf("late container: Name %q User %q, want %q alice", c.Name, c.User, name)
	}
	if n := inv.lists.Load(); n != lists {
		t.Errorf("inventory listed again (%d -> %d passes); want the new container from events", lists, n)
	}
}

// TestInventoryCreatedContainerGPUs checks a --gpus style device request
// as the engine stores and returns it. The container is created only:
// starting it would need the NVIDIA runtime.
func TestInventoryCreatedContainerGPUs(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	inv := startInventory(t, "", Config{})

	hc := &mcontainer.HostConfig{}
	hc.DeviceRequests = []mcontainer.DeviceRequest{{Driver: "nvidia", DeviceIDs: []string{"0", "GPU-abc"}, Capabilities: [][]string{{"gpu"}}}}
	id, _ := dockertest.Container(t, cli, dockertest.Spec{Name: "created-gpus", HostConfig: hc, CreateOnly: true})
	want := container.GPURequest{IDs: []string{"0", "GPU-abc"}}

	ins := dockertest.Inspect(t, cli, id)
	if diff := cmp.Diff(want, GPURequestFrom(ins.HostConfig, ins.Config.Env)); diff != "" {
		t.Errorf("GPURequestFrom(inspect) mismatch (-want +got):\n%s", diff)
	}

	// The inventory learns of it from the create event.
	dockertest.WaitFor(t, settle, "created container listed", func() (bool, string) {
		_, ok := listed(t, inv)[id]
		return ok, "not listed"
	})
	c := listed(t, inv)[id]
	if c.Running || c.PID != 0 || !c.FinishedAt.IsZero() {
		t.Errorf("created container: Running %v PID %d FinishedAt %v; want not running, never finished", c.Running, c.PID, c.FinishedAt)
	}
	if diff := cmp.Diff(want, c.GPUs); diff != "" {
		t.Errorf("Containers() GPUs mismatch (-want +got):\n%s", diff)
	}
}

// TestInventoryReconnects cuts the inventory's connection to the engine
// and restores it.
func TestInventoryReconnects(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	target := dockertest.EngineSocket(cli)
	if target == "" {
		testenv.SkipUnlessCI(t, "engine at %s is not a Unix socket; the proxy needs one", cli.DaemonHost())
	}
	before, _ := dockertest.Container(t, cli, dockertest.Spec{Name: "before-cut"})
	proxy := dockertest.NewSocketProxy(t, target)
	inv := startInventory(t, "unix://"+proxy.Path(), Config{})
	if _, ok := inv.Lookup(before); !ok {
		t.Fatalf("container started before Run not listed")
	}

	proxy.Stop()
	dockertest.WaitFor(t, settle, "Connected() false after the cut", func() (bool, string) {
		return !inv.Connected(), "still connected"
	})
	// Containers answers from the cache while cut: an ended context, which
	// any engine call would fail on, changes nothing, and the engine is not
	// listed again.
	lists := inv.lists.Load()
	ended, end := context.WithCancel(context.Background())
	end()
	list, err := inv.Containers(ended, time.Now())
	if n := inv.lists.Load(); n != lists {
		t.Errorf("Containers() while cut listed the engine (%d -> %d passes); want the cache", lists, n)
	}
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("Containers() while cut: err = %v, want ErrUnreachable", err)
	}
	found := false
	for _, c := range list {
		found = found || c.ID == before
	}
	if !found {
		t.Errorf("Containers() while cut: cached container missing from %d entries", len(list))
	}
	t.Logf("while cut: %v", err)

	// What happens meanwhile is caught up on reconnect.
	during, _ := dockertest.Container(t, cli, dockertest.Spec{Name: "during-cut"})
	dockertest.Remove(t, cli, before)
	proxy.Start(t)
	dockertest.WaitFor(t, 2*settle, "reconnect and catch up", func() (bool, string) {
		c, ok := inv.Lookup(during)
		_, stale := inv.Lookup(before)
		return inv.Connected() && ok && c.Running && !stale,
			fmt.Sprintf("connected %v, new container listed %v running %v, removed one listed %v", inv.Connected(), ok, c.Running, stale)
	})
	if _, err := inv.Containers(context.Background(), time.Now()); err != nil {
		t.Errorf("Containers() after reconnect: %v", err)
	}
}

func TestStop(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	stop := NewStopper(New(newClient(t, ""), Config{}), nil, "", "")
	ctx := context.Background()

	stubborn, _ := dockertest.Container(t, cli, dockertest.Spec{Name: "ignores-term", Cmd: []string{"ignore-term"}})
	start := time.Now()
	if err := stop.Stop(ctx, stubborn, time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	// The grace is waited out whatever the machine's load; how much longer
	// the kill took is the engine's figure, not asserted.
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("Stop with 1s grace took %v; want the grace waited out", d)
	}
	ins := dockertest.Inspect(t, cli, stubborn)
	if ins.State.Running || ins.State.ExitCode != 137 {
		t.Errorf("after Stop: Running %v ExitCode %d; want false 137 (killed)", ins.State.Running, ins.State.ExitCode)
	}
	if err := stop.Stop(ctx, stubborn, time.Second); err != nil {
		t.Errorf("Stop on a stopped container: %v, want nil", err)
	}

	gone, _ := dockertest.Container(t, cli, dockertest.Spec{Name: "vanished", CreateOnly: true})
	dockertest.Remove(t, cli, gone)
	err := stop.Stop(ctx, gone, time.Second)
	if !errors.Is(err, container.ErrNotFound) {
		t.Errorf("Stop on a removed container: err = %v, want container.ErrNotFound", err)
	}
}
