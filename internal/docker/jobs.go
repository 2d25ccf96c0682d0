package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// Jobs runs the queue's job containers on one Docker daemon, over the
// agent's one Client: create, start, inspect, stop, remove, logs, the
// list of job containers and their die events.
type Jobs struct {
	cli  *Client
	log  *slog.Logger
	node string // "": every node's job containers
}

// NewJobs returns the job containers of node on cli's daemon. List and
// Events see only the job containers of node (their gpumeter.node
// label), or every job container when node is "". log receives the
// daemon's warnings; nil discards.
func NewJobs(cli *Client, node string, log *slog.Logger) *Jobs {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Jobs{cli: cli, log: log.With("component", "docker-jobs"), node: node}
}

// Ping reports whether the daemon answers, within a few seconds; an
// error wraps container.ErrUnavailable.
func (j *Jobs) Ping(ctx context.Context) error { return j.cli.Ping(ctx) }

// Create creates s's container under s.Name. A name already taken is an
// error wrapping container.ErrExists: the job's container exists, and the
// job must not be started a second time.
func (j *Jobs) Create(ctx context.Context, s *spec.Spec) (string, error) {
	res, err := j.cli.api.ContainerCreate(ctx, client.ContainerCreateOptions{Name: s.Name, Config: s.Config, HostConfig: s.HostConfig})
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return "", fmt.Errorf("create %s: %w: %w", s.Name, container.ErrExists, err)
		}
		return "", j.cli.wrap(ctx, "create", s.Name, err)
	}
	for _, w := range res.Warnings {
		j.log.Warn("docker warns of a job container", "name", s.Name, "warning", w)
	}
	return res.ID, nil
}

// Start starts a created container.
func (j *Jobs) Start(ctx context.Context, id string) error {
	if _, err := j.cli.api.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return j.cli.wrap(ctx, "start", id, err)
	}
	return nil
}

// Inspect returns what the daemon says of a job container; one that is
// gone is an error wrapping container.ErrNotFound.
func (j *Jobs) Inspect(ctx context.Context, id string) (container.JobContainer, error) {
	res, err := j.cli.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return container.JobContainer{}, j.cli.wrap(ctx, "inspect", id, err)
	}
	r := res.Container
	c := container.JobContainer{ID: r.ID, Name: strings.TrimPrefix(r.Name, "/"), Mounts: r.Mounts}
	if r.Config != nil {
		c.JobID = r.Config.Labels[spec.JobLabel]
		c.GPUs = GPURequestFrom(r.HostConfig, r.Config.Env)
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

// Stop stops a container for the queue, which knows why: SIGTERM, then
// SIGKILL once grace (rounded up to whole seconds) has passed. Stopping a
// stopped container is no error.
func (j *Jobs) Stop(ctx context.Context, id string, grace time.Duration) error {
	return j.cli.stop(ctx, id, max(grace, 0))
}

// Remove removes a container by force; one that is gone is no error.
func (j *Jobs) Remove(ctx context.Context, id string) error {
	_, err := j.cli.api.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
	if err != nil && (client.IsErrConnectionFailed(err) || !cerrdefs.IsNotFound(err)) {
		return j.cli.wrap(ctx, "remove", id, err)
	}
	return nil
}

// Logs copies the container's stdout and stderr to w, following them
// until the container stops (or ctx ends) when follow is set.
func (j *Jobs) Logs(ctx context.Context, id string, follow bool, w io.Writer) error {
	rc, err := j.cli.api.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: follow})
	if err != nil {
		return j.cli.wrap(ctx, "logs of", id, err)
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
	res, err := j.cli.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: j.filters()})
	if err != nil {
		return nil, j.cli.wrap(ctx, "list", "job containers", err)
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

// Events sends the ids of job containers that die, from the client's
// one events subscription. When the stream breaks the subscription
// connects again with backoff (250ms doubling to 30s) and Events sends ""
// once it is back, since containers may have died meanwhile. The channel
// is closed once ctx ends.
func (j *Jobs) Events(ctx context.Context) <-chan string {
	out := make(chan string, 64)
	d := &jobDeaths{j: j, ready: make(chan struct{}, 1)}
	unwatch := j.cli.watch(ctx, d)
	go func() {
		defer close(out)
		defer unwatch()
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.ready:
			}
			for _, id := range d.take() {
				select {
				case out <- id:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// jobDeaths is Events' watcher: it keeps the ids of the job containers
// that die, and "" for a resync, until Events sends them, so that a
// queue busy elsewhere never holds up the subscription the inventory
// shares.
type jobDeaths struct {
	j     *Jobs
	mu    sync.Mutex
	ids   []string
	ready chan struct{} // ids has something
}

func (d *jobDeaths) resync(_ context.Context, again bool) error {
	if again {
		d.push("")
	}
	return nil
}

func (d *jobDeaths) event(_ context.Context, m events.Message) error {
	if m.Action == events.ActionDie && m.Actor.ID != "" && d.j.owns(m.Actor.Attributes) {
		d.push(m.Actor.ID)
	}
	return nil
}

func (d *jobDeaths) lost(error) {}

func (d *jobDeaths) push(id string) {
	d.mu.Lock()
	d.ids = append(d.ids, id)
	d.mu.Unlock()
	select {
	case d.ready <- struct{}{}:
	default:
	}
}

func (d *jobDeaths) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := d.ids
	d.ids = nil
	return ids
}

// GPUSupport reports whether the daemon has the NVIDIA runtime, which
// DeviceRequests for GPUs need (queue.gpu_passing auto).
func (j *Jobs) GPUSupport(ctx context.Context) (nvidiaRuntime bool, err error) {
	res, err := j.cli.api.Info(ctx, client.InfoOptions{})
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

// owns reports whether a container of these labels (an event's
// attributes carry the container's labels) is one of this node's job
// containers, as labels selects them.
func (j *Jobs) owns(labels map[string]string) bool {
	if _, ok := labels[spec.JobLabel]; !ok {
		return false
	}
	return j.node == "" || labels[spec.NodeLabel] == j.node
}

// filters select this node's job containers in a list.
func (j *Jobs) filters() client.Filters {
	return make(client.Filters).Add("label", j.labels()...)
}
