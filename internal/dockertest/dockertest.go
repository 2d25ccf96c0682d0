// Package dockertest holds test helpers for the real Docker engine: a
// client that skips (or fails under CI) without an engine, a FROM scratch
// sleeper image built without a registry, labelled test containers removed
// when the test ends, and a socket proxy whose connection a test can cut
// and restore. It is importable only by this module, and only its tests
// should import it.
package dockertest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// Client returns a client for the engine named by the environment
// (DOCKER_HOST or the default socket), closed when the test ends. Without
// a reachable engine, or in -short mode, the test is skipped; when CI is
// set it fails instead, so that CI never passes by skipping.
func Client(t testing.TB) *client.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping Docker engine test in -short mode")
	}
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	}
	if err != nil {
		if inCI() {
			t.Fatalf("CI is set, so this test needs a Docker engine, but none is reachable: %v", err)
		}
		t.Skipf("skipping: no Docker engine reachable (%v); with CI=true this fails instead", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// inCI reports whether CI is set to anything but an explicit false.
func inCI() bool {
	v := os.Getenv("CI")
	b, err := strconv.ParseBool(v)
	return b || (err != nil && v != "")
}

// EngineSocket returns the path of the engine's Unix socket, or "" when
// the client reaches it some other way.
func EngineSocket(cli *client.Client) string {
	path, ok := strings.CutPrefix(cli.DaemonHost(), "unix://")
	if !ok {
		return ""
	}
	return path
}

// WaitFor polls cond until it holds, or fails the test once timeout has
// passed; state says what was seen last, for the failure message.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
