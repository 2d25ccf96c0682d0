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
)

// Run keeps the inventory fresh: it has the client's events subscription
// (see Client.watch) list and inspect every container on each connection
// and then apply each container event. While the daemon cannot be
// reached the inventory is marked disconnected, with why. Run returns nil
// once ctx ends, and only then.
func (i *Inventory) Run(ctx context.Context) error {
	unwatch := i.cli.watch(ctx, i)
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			unwatch()
			i.setDisconnected(errors.New("inventory stopped"))
			return nil
		case now := <-sweep.C:
			if i.Connected() {
				i.sweep(now)
			}
		}
	}
}

// resync lists again, on a new connection, and marks the cache current.
func (i *Inventory) resync(ctx context.Context, _ bool) error {
	if err := i.relist(ctx); err != nil {
		return err
	}
	i.setConnected()
	i.log.Info("following docker events", "host", i.cli.api.DaemonHost(), "api", i.cli.api.ClientVersion(), "containers", len(i.cachedIDs()))
	return nil
}

// event applies one container event.
func (i *Inventory) event(ctx context.Context, m events.Message) error { return i.handle(ctx, m) }

// lost marks the inventory disconnected.
func (i *Inventory) lost(err error) { i.setDisconnected(err) }

// relist lists all containers and inspects each, dropping cache entries
// for containers that no longer exist.
func (i *Inventory) relist(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, requestTimeout)
	res, err := i.cli.api.ContainerList(lctx, client.ContainerListOptions{All: true})
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
	res, err := i.cli.api.ContainerInspect(rctx, id, client.ContainerInspectOptions{})
	cancel()
	switch {
	case err == nil:
	case cerrdefs.IsNotFound(err):
		i.remove(id)
		return nil
	case CannotReach(err), ctx.Err() != nil:
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
