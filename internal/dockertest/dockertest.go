// Package dockertest holds test helpers for the real Docker engine: a
// client that skips (or fails under CI) without an engine, a FROM scratch
// sleeper image built without a registry, labelled test containers removed
// when the test ends, and a socket proxy whose connection a test can cut
// and restore. It is importable only by this module, and only its tests
// should import it.
package dockertest

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/testenv"
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
		testenv.SkipUnlessCI(t, "no Docker engine is reachable (%v)", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
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

// minWait is the least WaitFor waits before it fails a test.
const minWait = time.Minute

// WaitFor polls cond until it holds, or fails the test once timeout has
// passed; state says what was seen last, for the failure message. The
// timeout is a guard against a hang, never a figure: it is at least
// minWait, whatever the caller names, since the engine and the machine
// are shared with other tests, and a longer wait only delays a failure.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	timeout = max(timeout, minWait)
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

// gpuLock is an abstract Unix socket name: binding it is atomic, a second
// bind fails, and the kernel frees it when its holder exits, even killed.
const gpuLock = "@gpumeter-dockertest-gpus"

// LockGPUs waits until no other test on this machine, in this process or
// another, holds the GPU lock, and holds it until t ends. An agent counts
// every running container on the engine that requests a GPU, so a test
// that asserts GPU shares takes it, and so does every test that runs a
// container requesting GPUs; tests of packages run in parallel then never
// see each other's containers. It does nothing on other systems than Linux.
func LockGPUs(t testing.TB) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	// Tests that take the lock queue behind one another, and a package's
	// may together hold it for minutes on a busy machine: the wait ends
	// only just before the test binary's own timeout (-timeout), so that
	// a holder that hangs is named rather than a stack dumped, and a
	// queue of live tests never fails one of them.
	wait := 15 * time.Minute
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			wait = max(time.Until(dl)-30*time.Second, time.Second)
		}
	}
	deadline := time.Now().Add(wait)
	for {
		ln, err := net.Listen("unix", gpuLock)
		if err == nil {
			t.Cleanup(func() { ln.Close() })
			return
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("take the GPU lock: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("another test has held the GPU lock for over %v, until just before this test binary's timeout", wait.Round(time.Second))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
