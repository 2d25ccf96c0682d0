package dockertest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// TestSleeperExitAfter: the sleeper prints its lines and exits with the
// code it was given, so that a job's recorded exit code is its own.
func TestSleeperExitAfter(t *testing.T) {
	cli := Client(t)
	id, _ := Container(t, cli, Spec{Name: "exit-after", Cmd: []string{"exit-after", "200ms", "7", "hello", "world"}})
	WaitFor(t, 30*time.Second, "the sleeper to exit", func() (bool, string) {
		c := Inspect(t, cli, id)
		return !c.State.Running, string(c.State.Status)
	})
	if c := Inspect(t, cli, id); c.State.ExitCode != 7 {
		t.Errorf("exit code %d, want 7", c.State.ExitCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(rc)
	if !strings.Contains(b.String(), "hello") || !strings.Contains(b.String(), "world") {
		t.Errorf("logs %q, want hello and world", b.String())
	}
}
