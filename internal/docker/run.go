package docker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/retry"
)

const (
	minBackoff = 250 * time.Millisecond
	maxBackoff = 30 * time.Second
	// goodSession is how long a connection must last to reset the backoff,
	// so that a daemon that accepts and then drops connections is not
	// listed again every 250ms.
	goodSession = 10 * time.Second
	// pingEvery and pingTimeout catch a daemon that hangs without closing
	// the events stream.
	pingEvery   = 15 * time.Second
	pingTimeout = 10 * time.Second
	// requestTimeout bounds one list or inspect call.
	requestTimeout = 10 * time.Second
	sweepEvery     = 30 * time.Second
)

// followedEvents are the container events that change what the inventory
// shows.
var followedEvents = []string{
	string(events.ActionCreate),
	string(events.ActionStart),
	string(events.ActionDie),
	string(events.ActionOOM),
	string(events.ActionDestroy),
	string(events.ActionRename),
	string(events.ActionUpdate),
}

// Run connects to the daemon, lists and inspects every container and then
// follows the events stream. When the daemon cannot be reached or the
// stream breaks, it marks the inventory disconnected and tries again with
// exponential backoff (250ms doubling to 30s, back to 250ms once a
// connection has lasted 10s); every new connection lists again to catch up
// on what happened meanwhile. Run returns nil once ctx ends, and only then.
func (i *Inventory) Run(ctx context.Context) error {
	defer i.client.Close()
	backoff := retry.Backoff{Initial: minBackoff, Max: maxBackoff}
	failures := 0
	for {
		upAt, err := i.session(ctx)
		if ctx.Err() != nil {
			i.setDisconnected(errors.New("inventory stopped"))
			return nil
		}
		i.setDisconnected(err)
		if !upAt.IsZero() {
			failures = 0
			if time.Since(upAt) >= goodSession {
				backoff.Reset()
			}
		}
		failures++
		wait := backoff.Next()
		if failures == 1 {
			i.log.Warn("docker daemon unreachable, retrying", "err", err, "in", wait)
		} else {
			i.log.Debug("docker daemon still unreachable", "err", err, "attempt", failures, "in", wait)
		}
		if retry.Sleep(ctx, wait) != nil {
			i.setDisconnected(errors.New("inventory stopped"))
			return nil
		}
	}
}

// session runs one connection: subscribe, list, follow. It returns why the
// connection ended and when the cache became current, or the zero time if
// it never did.
func (i *Inventory) session(ctx context.Context) (upAt time.Time, err error) {
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	_, err = i.client.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
	cancel()
	if err != nil {
		return time.Time{}, fmt.Errorf("ping: %w", err)
	}

	// Subscribe before listing, so that nothing that happens during the
	// list is missed; those events are handled after it.
	ectx, cancelEvents := context.WithCancel(ctx)
	defer cancelEvents()
	filters := make(client.Filters).Add("type", string(events.ContainerEventType)).Add("event", followedEvents...)
	ev := i.client.Events(ectx, client.EventsListOptions{Filters: filters})
	select {
	case err := <-ev.Err:
		return time.Time{}, fmt.Errorf("events: %w", err)
	default:
	}

	if err := i.relist(ctx); err != nil {
		return time.Time{}, err
	}
	upAt = time.Now()
	i.setConnected()
	i.log.Info("following docker events", "host", i.client.DaemonHost(), "api", i.client.ClientVersion(), "containers", len(i.cachedIDs()))

	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
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
			if err := i.handle(ctx, m); err != nil {
				return upAt, err
			}
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			_, err := i.client.Ping(pctx, client.PingOptions{})
			cancel()
			if err != nil {
				return upAt, fmt.Errorf("ping: %w", err)
			}
		case now := <-sweep.C:
			i.sweep(now)
		}
	}
}

// relist lists all containers and inspects each, dropping cache entries
// for containers that no longer exist.
func (i *Inventory) relist(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, requestTimeout)
	res, err := i.client.ContainerList(lctx, client.ContainerListOptions{All: true})
	cancel()
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	seen := make(map[string]bool, len(res.Items))
	for _, s := range res.Items {
		seen[s.ID] = true
		if err := i.refresh(ctx, s.ID); err != nil {
			return err
		}
	}
	var gone []string
	for _, id := range i.cachedIDs() {
		if !seen[id] {
			gone = append(gone, id)
		}
	}
	i.remove(gone...)
	i.lists.Add(1)
	return nil
}

// handle applies one container event to the cache.
func (i *Inventory) handle(ctx context.Context, m events.Message) error {
	id := m.Actor.ID
	if m.Type != events.ContainerEventType || id == "" {
		return nil
	}
	switch m.Action {
	case events.ActionDestroy:
		i.remove(id)
		return nil
	case events.ActionDie:
		// Record the exit from the event itself, in case the container is
		// gone (docker run --rm) before the inspect below.
		if c, ok := i.Lookup(id); ok && c.Running {
			c.Running = false
			c.PID = 0
			c.ExitCode, _ = strconv.Atoi(m.Actor.Attributes["exitCode"])
			c.FinishedAt = eventTime(m)
			i.put(c)
		}
	}
	return i.refresh(ctx, id)
}

// refresh inspects one container and updates the cache. A container that
// no longer exists leaves the cache; other API errors are logged and the
// old entry stays. Only a lost connection is returned.
func (i *Inventory) refresh(ctx context.Context, id string) error {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	res, err := i.client.ContainerInspect(rctx, id, client.ContainerInspectOptions{})
	cancel()
	switch {
	case err == nil:
	case cerrdefs.IsNotFound(err):
		i.remove(id)
		return nil
	case client.IsErrConnectionFailed(err), ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("inspect %s: %w", id, err)
	default:
		i.log.Warn("inspect container", "id", id, "err", err)
		return nil
	}
	if res.Container.ID == "" {
		i.log.Warn("inspect container: no ID in answer", "id", id)
		return nil
	}
	var prev *container.Container
	if p, ok := i.Lookup(res.Container.ID); ok {
		prev = &p
	}
	c := i.fromInspect(&res.Container, prev)
	if i.expired(&c, time.Now()) {
		i.remove(c.ID)
		return nil
	}
	i.put(c)
	return nil
}

func eventTime(m events.Message) time.Time {
	switch {
	case m.TimeNano != 0:
		return time.Unix(0, m.TimeNano)
	case m.Time != 0:
		return time.Unix(m.Time, 0)
	default:
		return time.Now()
	}
}
