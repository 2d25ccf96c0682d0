package harness

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// Settle bounds how long a change in the Docker engine takes to show in
// an agent: an event or a reconnect with backoff, on a machine that may
// be busy.
const Settle = 20 * time.Second

// Sleeper is a running test container of dockertest's sleeper image.
type Sleeper struct {
	ID, Name string
	PID      int // its main process's, on the host
}

// StartSleeper starts a test container, removed when the test ends.
func StartSleeper(t *testing.T, cli *client.Client, s dockertest.Spec) Sleeper {
	t.Helper()
	id, name := dockertest.Container(t, cli, s)
	pid := dockertest.Inspect(t, cli, id).State.Pid
	if pid <= 0 {
		t.Fatalf("%s: host PID %d", name, pid)
	}
	return Sleeper{ID: id, Name: name, PID: pid}
}

// RemoveNodeJobs removes every job container of node (label
// gpumeter.node), and then the node's jobs network.
func RemoveNodeJobs(t *testing.T, cli *client.Client, node string) {
	t.Helper()
	defer dockertest.RemoveNetwork(t, cli, spec.NetworkName(node))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", spec.NodeLabel+"="+node)})
	if err != nil {
		t.Errorf("list the job containers of %s: %v", node, err)
		return
	}
	for _, c := range res.Items {
		dockertest.Remove(t, cli, c.ID)
	}
}
