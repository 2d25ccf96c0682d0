package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/retry"
)

// Jobs runs the queue's job containers on one Docker daemon: create,
// start, inspect, stop, remove, logs, the list of job containers and
// their die events.
type Jobs struct {
	client *client.Client
	log    *slog.Logger
	node   string // "": every node's job containers
}

// NewJobs returns Jobs for the daemon at host (empty: DOCKER_HOST or the
// platform default), negotiating the API version on first use. It does
// not contact the daemon. List and Events see only the job containers of
// node (their gpumeter.node label), or every job container when node is
// "".
func NewJobs(host, node string, log *slog.Logger) (*Jobs, error) {
	opts := []client.Opt{client.FromEnv}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Jobs{client: cli, log: log.With("component", "docker-jobs"), node: node}, nil
}

// Close closes the client's connections.
func (j *Jobs) Close() error { return j.client.Close() }

// wrap gives err, of action what on id, its context, and marks whose
// fault it is: container.ErrNotFound when the daemon does not know the
// container, container.ErrUnavailable when the daemon is not there to do
// it (see unavailable). Anything else (a 400 refused spec, a 404 missing
// image) is left as the daemon said it: the job's own fault.
func (j *Jobs) wrap(ctx context.Context, what, id string, err error) error {
	switch {
	case cerrdefs.IsNotFound(err) && !client.IsErrConnectionFailed(err):
		return fmt.Errorf("%s %s: %w: %w", what, id, container.ErrNotFound, err)
	case j.unavailable(ctx, err):
		return fmt.Errorf("%s %s: %w: %w", what, id, container.ErrUnavailable, err)
	}
	return fmt.Errorf("%s %s: %w", what, id, err)
}

// unavailable reports whether err says the daemon could not be reached
// or could not serve: a connection that failed or broke, a call that ran
// past its deadline, a 503; and a 500 when the daemon then does not
// answer a ping either (a daemon going down answers 500s on its way out,
// while a 500 from a daemon that answers is most often runc refusing the
// job's own spec, which trying again would not change).
func (j *Jobs) unavailable(ctx context.Context, err error) bool {
	switch {
	case err == nil || errors.Is(err, context.Canceled):
		return false
	case client.IsErrConnectionFailed(err), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		cerrdefs.IsUnavailable(err):
		return true
	case cerrdefs.IsInternal(err):
		return j.Ping(context.WithoutCancel(ctx)) != nil
	}
	return false
}

// Ping reports whether the daemon answers, within a few seconds; an
// error wraps container.ErrUnavailable.
func (j *Jobs) Ping(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, unavailablePing)
	defer cancel()
	if _, err := j.client.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return fmt.Errorf("ping the docker daemon: %w: %w", container.ErrUnavailable, err)
	}
	return nil
}

// unavailablePing bounds the ping that tells a daemon that is going away
// from one that refused a request.
const unavailablePing = 5 * time.Second

// Create creates s's container under s.Name. A name already taken is an
// error wrapping container.ErrExists: the job's container exists, and the
// job must not be started a second time.
func (j *Jobs) Create(ctx context.Context, s *spec.Spec) (string, error) {
	res, err := j.client.ContainerCreate(ctx, client.ContainerCreateOptions{Name: s.Name, Config: s.Config, HostConfig: s.HostConfig})
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return "", fmt.Errorf("create %s: %w: %w", s.Name, container.ErrExists, err)
		}
		return "", j.wrap(ctx, "create", s.Name, err)
	}
	for _, w := range res.Warnings {
		j.log.Warn("docker warns of a job container", "name", s.Name, "warning", w)
	}
	return res.ID, nil
}

// Start starts a created container.
func (j *Jobs) Start(ctx context.Context, id string) error {
	if _, err := j.client.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return j.wrap(ctx, "start", id, err)
	}
	return nil
}

// Inspect returns what the daemon says of a job container; one that is
// gone is an error wrapping container.ErrNotFound.
func (j *Jobs) Inspect(ctx context.Context, id string) (container.JobContainer, error) {
	res, err := j.client.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return container.JobContainer{}, j.wrap(ctx, "inspect", id, err)
	}
	r := res.Container
	c := container.JobContainer{ID: r.ID, Name: strings.TrimPrefix(r.Name, "/"), Mounts: r.Mounts}
	if r.Config != nil {
		c.JobID = r.Config.Labels[spec.JobLabel]
	}
	if st := r.State; st != nil {
		c.Running = st.Running
		c.Exited = !st.Running && (st.Status == "exited" || st.Status == "dead")
		c.ExitCode = st.ExitCode
		c.OOMKilled = st.OOMKilled
		c.StartedAt = parseTime(st.StartedAt)
		if !st.Running {
			c.FinishedAt = parseTime(st.FinishedAt)
		}
	}
	return c, nil
}

// Stop stops a container: SIGTERM, then SIGKILL once grace (rounded up to
// whole seconds) has passed. Stopping a stopped container is no error.
func (j *Jobs) Stop(ctx context.Context, id string, grace time.Duration) error {
	secs := int(math.Ceil(max(grace, 0).Seconds()))
	if _, err := j.client.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &secs}); err != nil {
		return j.wrap(ctx, "stop", id, err)
	}
	return nil
}

// Remove removes a container by force; one that is gone is no error.
func (j *Jobs) Remove(ctx context.Context, id string) error {
	_, err := j.client.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
	if err != nil && (client.IsErrConnectionFailed(err) || !cerrdefs.IsNotFound(err)) {
		return j.wrap(ctx, "remove", id, err)
	}
	return nil
}

// Logs copies the container's stdout and stderr to w, following them
// until the container stops (or ctx ends) when follow is set.
func (j *Jobs) Logs(ctx context.Context, id string, follow bool, w io.Writer) error {
	rc, err := j.client.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: follow})
	if err != nil {
		return j.wrap(ctx, "logs of", id, err)
	}
	defer rc.Close()
	if _, err := stdcopy.StdCopy(w, w, rc); err != nil && ctx.Err() == nil {
		return fmt.Errorf("logs of %s: %w", id, err)
	}
	return nil
}

// List returns every container labelled gpumeter.job, in any state. A
// container removed between the list and its inspect is left out.
func (j *Jobs) List(ctx context.Context) ([]container.JobContainer, error) {
	res, err := j.client.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: j.filters()})
	if err != nil {
		return nil, j.wrap(ctx, "list", "job containers", err)
	}
	out := make([]container.JobContainer, 0, len(res.Items))
	for _, s := range res.Items {
		c, err := j.Inspect(ctx, s.ID)
		if errors.Is(err, container.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Events sends the ids of job containers that die. When the stream
// breaks it connects again with backoff (250ms doubling to 30s) and sends
// "" once it is back, since containers may have died meanwhile. The
// channel is closed once ctx ends.
func (j *Jobs) Events(ctx context.Context) <-chan string {
	out := make(chan string, 64)
	go func() {
		defer close(out)
		backoff := retry.Backoff{Initial: minBackoff, Max: maxBackoff}
		for first := true; ; first = false {
			upAt, err := j.follow(ctx, out, !first)
			if ctx.Err() != nil {
				return
			}
			if !upAt.IsZero() && time.Since(upAt) >= goodSession {
				backoff.Reset()
			}
			wait := backoff.Next()
			j.log.Warn("job container events broke, reconnecting", "err", err, "in", wait)
			if retry.Sleep(ctx, wait) != nil {
				return
			}
		}
	}()
	return out
}

// follow runs one events connection, sending "" first when resync is set
// and the connection is up.
func (j *Jobs) follow(ctx context.Context, out chan<- string, resync bool) (upAt time.Time, err error) {
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	filters := make(client.Filters).Add("type", string(events.ContainerEventType)).
		Add("event", string(events.ActionDie)).Add("label", j.labels()...)
	ev := j.client.Events(ectx, client.EventsListOptions{Filters: filters})
	pctx, pcancel := context.WithTimeout(ctx, pingTimeout)
	_, err = j.client.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
	pcancel()
	if err != nil {
		return time.Time{}, fmt.Errorf("ping: %w", err)
	}
	upAt = time.Now()
	send := func(id string) bool {
		select {
		case out <- id:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if resync && !send("") {
		return upAt, ctx.Err()
	}
	for {
		select {
		case <-ctx.Done():
			return upAt, ctx.Err()
		case err := <-ev.Err:
			if err == nil {
				err = errors.New("stream closed")
			}
			return upAt, fmt.Errorf("events: %w", err)
		case m := <-ev.Messages:
			if m.Actor.ID != "" && !send(m.Actor.ID) {
				return upAt, ctx.Err()
			}
		}
	}
}

// GPUSupport reports whether the daemon has the NVIDIA runtime, which
// DeviceRequests for GPUs need (queue.gpu_passing auto).
func (j *Jobs) GPUSupport(ctx context.Context) (nvidiaRuntime bool, err error) {
	res, err := j.client.Info(ctx, client.InfoOptions{})
	if err != nil {
		return false, fmt.Errorf("docker info: %w", err)
	}
	if _, ok := res.Info.Runtimes["nvidia"]; ok || res.Info.DefaultRuntime == "nvidia" {
		return true, nil
	}
	return false, nil
}

// labels are the label filters of this node's job containers.
func (j *Jobs) labels() []string {
	if j.node == "" {
		return []string{spec.JobLabel}
	}
	return []string{spec.JobLabel, spec.NodeLabel + "=" + j.node}
}

// filters select this node's job containers in a list.
func (j *Jobs) filters() client.Filters {
	return make(client.Filters).Add("label", j.labels()...)
}
