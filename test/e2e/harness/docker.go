package harness

import (
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/dockertest"
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
