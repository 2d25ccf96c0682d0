package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// TestJobsErrorsSayWhoseFault: on the real engine, reached through a
// socket proxy the test cuts, every call of a cut engine wraps
// container.ErrUnavailable; with the engine there, a missing image (the
// job's own fault), a name taken (ErrExists) and an unknown container
// (ErrNotFound) do not.
func TestJobsErrorsSayWhoseFault(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.LockGPUs(t) // the job's container names GPUs in its env
	img := dockertest.SleeperImage(t, cli)
	sock := dockertest.EngineSocket(cli)
	if sock == "" {
		t.Skip("the engine is not reached over a Unix socket, which the proxy needs")
	}
	proxy := dockertest.NewSocketProxy(t, sock)
	jobs := newJobs(t, "unix://"+proxy.Path(), "")
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	build := func(image string, cmd ...string) *spec.Spec {
		t.Helper()
		req := spec.Request{GPUs: 1, TimeLimit: time.Hour, Image: image, Command: cmd}
		s, err := spec.Build(req, spec.Rules{Images: []string{"gpumeter-test-sleeper:*"}, Network: "none"},
			spec.Identity{UID: 4242, GID: 4242, User: "alice"}, "t-"+hex.EncodeToString(b), []string{"GPU-test-0"}, spec.Env)
		if err != nil {
			t.Fatal(err)
		}
		s.Config.Labels[dockertest.Label] = "1"
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The job's own faults, with the engine there.
	if _, err := jobs.Create(ctx, build("gpumeter-test-sleeper:missing-"+hex.EncodeToString(b), "/run")); err == nil || errors.Is(err, container.ErrUnavailable) {
		t.Errorf("create with a missing image: %v, want an error that is not ErrUnavailable", err)
	}
	id, err := jobs.Create(ctx, build(img, "/run"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.Remove(t, cli, id) })
	if _, err := jobs.Create(ctx, build(img, "/run")); !errors.Is(err, container.ErrExists) || errors.Is(err, container.ErrUnavailable) {
		t.Errorf("second create: %v, want ErrExists only", err)
	}
	if _, err := jobs.Inspect(ctx, "gpumeter-no-such-container-"+hex.EncodeToString(b)); !errors.Is(err, container.ErrNotFound) || errors.Is(err, container.ErrUnavailable) {
		t.Errorf("inspect of an unknown container: %v, want ErrNotFound only", err)
	}
	if err := jobs.Ping(ctx); err != nil {
		t.Errorf("ping: %v", err)
	}

	// The engine's fault: it cannot be reached.
	proxy.Stop()
	for name, call := range map[string]func() error{
		"create":  func() error { _, err := jobs.Create(ctx, build(img, "/run")); return err },
		"start":   func() error { return jobs.Start(ctx, id) },
		"inspect": func() error { _, err := jobs.Inspect(ctx, id); return err },
		"stop":    func() error { return jobs.Stop(ctx, id, time.Second) },
		"remove":  func() error { return jobs.Remove(ctx, id) },
		"list":    func() error { _, err := jobs.List(ctx); return err },
		"ping":    func() error { return jobs.Ping(ctx) },
	} {
		if err := call(); !errors.Is(err, container.ErrUnavailable) || errors.Is(err, container.ErrNotFound) {
			t.Errorf("%s on a cut engine: %v, want ErrUnavailable", name, err)
		}
	}
}
