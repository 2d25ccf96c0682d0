package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/container"
)

// Client is the one connection of an agent to its Docker daemon: the
// inventory and the queue's job containers both use it, and one events
// subscription of it (see events.go) feeds both.
type Client struct {
	api *client.Client
	log *slog.Logger

	mu  sync.Mutex
	fan *fanOut // the running events subscription; nil while nobody watches
}

// NewClient returns a client of the daemon at host (empty: DOCKER_HOST, or
// the platform default when that is unset), negotiating the API version
// on first use; the TLS and API version variables (DOCKER_CERT_PATH,
// DOCKER_TLS_VERIFY, DOCKER_API_VERSION) apply either way. It does not
// contact the daemon. log receives connection changes; nil discards.
func NewClient(host string, log *slog.Logger) (*Client, error) {
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
	return &Client{api: cli, log: log.With("component", "docker")}, nil
}

// Close closes the client's connections.
func (c *Client) Close() error { return c.api.Close() }

// Ping reports whether the daemon answers, within a few seconds; an
// error wraps container.ErrUnavailable.
func (c *Client) Ping(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, unavailablePing)
	defer cancel()
	if _, err := c.api.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return fmt.Errorf("ping the docker daemon: %w: %w", container.ErrUnavailable, err)
	}
	return nil
}

// unavailablePing bounds the ping that tells a daemon that is going away
// from one that refused a request.
const unavailablePing = 5 * time.Second

// wrap gives err, of action what on id, its context, and marks whose
// fault it is: container.ErrNotFound when the daemon does not know the
// container, container.ErrUnavailable when the daemon is not there to do
// it (see unavailable). Anything else (a 400 refused spec, a 404 missing
// image) is left as the daemon said it: the caller's own fault.
func (c *Client) wrap(ctx context.Context, what, id string, err error) error {
	switch {
	case cerrdefs.IsNotFound(err) && !client.IsErrConnectionFailed(err):
		return fmt.Errorf("%s %s: %w: %w", what, id, container.ErrNotFound, err)
	case c.unavailable(ctx, err):
		return fmt.Errorf("%s %s: %w: %w", what, id, container.ErrUnavailable, err)
	}
	return fmt.Errorf("%s %s: %w", what, id, err)
}

// CannotReach says whether err is the engine not answering (no daemon on
// the socket, or no answer in time) rather than its refusal: the core of
// unavailable, which also counts a connection that broke and a daemon
// that says it cannot serve.
func CannotReach(err error) bool {
	return client.IsErrConnectionFailed(err) || errors.Is(err, context.DeadlineExceeded)
}

// unavailable reports whether err says the daemon could not be reached
// or could not serve: a connection that failed or broke, a call that ran
// past its deadline, a 503; and a 500 when the daemon then does not
// answer a ping either (a daemon going down answers 500s on its way out,
// while a 500 from a daemon that answers is most often runc refusing the
// job's own spec, which trying again would not change).
func (c *Client) unavailable(ctx context.Context, err error) bool {
	switch {
	case err == nil || errors.Is(err, context.Canceled):
		return false
	case CannotReach(err),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		cerrdefs.IsUnavailable(err):
		return true
	case cerrdefs.IsInternal(err):
		return c.Ping(context.WithoutCancel(ctx)) != nil
	}
	return false
}

// stop is the one engine call that stops a container, whoever asked (see
// Stopper and Jobs.Stop): SIGTERM (or the container's stop signal), then
// SIGKILL once grace has passed. grace is rounded up to whole seconds; a
// negative grace means the container's own stop timeout. It returns once
// the container has stopped or ctx ends; stopping a stopped container is
// no error. Its error is wrap's.
func (c *Client) stop(ctx context.Context, id string, grace time.Duration) error {
	var opts client.ContainerStopOptions
	if grace >= 0 {
		secs := int(math.Ceil(grace.Seconds()))
		opts.Timeout = &secs
	}
	if _, err := c.api.ContainerStop(ctx, id, opts); err != nil {
		return c.wrap(ctx, "stop", id, err)
	}
	return nil
}
