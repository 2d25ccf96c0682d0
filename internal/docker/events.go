package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

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

// followedEvents are the container events a watcher may need: those that
// change what the inventory shows, the queue's die among them.
var followedEvents = []string{
	string(events.ActionCreate),
	string(events.ActionStart),
	string(events.ActionDie),
	string(events.ActionOOM),
	string(events.ActionDestroy),
	string(events.ActionRename),
	string(events.ActionUpdate),
}

// A watcher is told of the daemon's container events by the client's one
// subscription. Its methods run on the subscription's goroutine, one at a
// time and in order, so a watcher that must not hold the others up hands
// the events on (see jobDeaths).
type watcher interface {
	// resync is called once a subscription is up, before any of its
	// events reach the watcher; again says the watcher was told of an
	// earlier one, so it may have missed events in between. An error ends
	// the subscription, which connects again.
	resync(ctx context.Context, again bool) error
	// event handles one event; an error ends the subscription.
	event(ctx context.Context, m events.Message) error
	// lost says the subscription broke, and why.
	lost(err error)
}

var (
	_ watcher = (*Inventory)(nil)
	_ watcher = (*jobDeaths)(nil)
)

// fanOut is one running subscription and its watchers.
type fanOut struct {
	watchers []*watch      // in the order they came; under Client.mu
	joined   chan struct{} // a watcher came while the subscription runs
	cancel   context.CancelFunc
	done     chan struct{} // closed once the subscription's goroutine returns
}

type watch struct {
	w    watcher
	done <-chan struct{} // the watcher's context's: its calls end with it
	// session is the last subscription w was resynced for; 0: none yet.
	// Only the subscription's goroutine reads or writes it.
	session int
	// mu is held while w is told of something; gone, once set under it,
	// says w is told of nothing more.
	mu   sync.Mutex
	gone bool
}

// tell calls do on w, unless w is gone, with a context that ends with
// ctx (the subscription's) or with w's own; an error that came of w's own
// end is none of the subscription's.
func (e *watch) tell(ctx context.Context, do func(context.Context, watcher) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-e.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := do(ctx, e.w)
	select {
	case <-e.done:
		return nil
	default:
		return err
	}
}

// watch has w told of the daemon's events, starting the subscription
// when w is the first watcher, until unwatch is called; unwatch returns
// once w is told of nothing more, and stops the subscription when w was
// the last watcher. w's calls end when ctx does; the subscription
// carries ctx's values, not its end.
func (c *Client) watch(ctx context.Context, w watcher) (unwatch func()) {
	c.mu.Lock()
	f := c.fan
	if f == nil {
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &fanOut{joined: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
		c.fan = f
		go c.follow(sctx, f)
	}
	e := &watch{w: w, done: ctx.Done()}
	f.watchers = append(f.watchers, e)
	select {
	case f.joined <- struct{}{}:
	default:
	}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		f.watchers = slices.DeleteFunc(f.watchers, func(x *watch) bool { return x == e })
		last := len(f.watchers) == 0 && c.fan == f
		if last {
			c.fan = nil
			f.cancel()
		}
		c.mu.Unlock()
		e.mu.Lock()
		e.gone = true
		e.mu.Unlock()
		if last {
			<-f.done
		}
	}
}

// watchersOf returns f's watchers now.
func (c *Client) watchersOf(f *fanOut) []*watch {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(f.watchers)
}

// follow runs f's subscription until ctx ends. When the daemon cannot be
// reached or the stream breaks, it tells every watcher and tries again
// with exponential backoff (250ms doubling to 30s, back to 250ms once a
// connection has lasted 10s); every new connection resyncs every watcher
// to catch up on what happened meanwhile.
func (c *Client) follow(ctx context.Context, f *fanOut) {
	defer close(f.done)
	backoff := retry.Backoff{Initial: minBackoff, Max: maxBackoff}
	failures := 0
	for session := 1; ; session++ {
		upAt, err := c.session(ctx, f, session)
		if ctx.Err() != nil {
			return
		}
		for _, w := range c.watchersOf(f) {
			_ = w.tell(ctx, func(_ context.Context, w watcher) error { w.lost(err); return nil })
		}
		if !upAt.IsZero() {
			failures = 0
			if time.Since(upAt) >= goodSession {
				backoff.Reset()
			}
		}
		failures++
		wait := backoff.Next()
		if failures == 1 {
			c.log.Warn("docker daemon unreachable, retrying", "err", err, "in", wait)
		} else {
			c.log.Debug("docker daemon still unreachable", "err", err, "attempt", failures, "in", wait)
		}
		if retry.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// session runs one connection: subscribe, resync the watchers, follow. It
// returns why the connection ended and when every watcher was current,
// or the zero time if they never were.
func (c *Client) session(ctx context.Context, f *fanOut, n int) (upAt time.Time, err error) {
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	_, err = c.api.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
	cancel()
	if err != nil {
		return time.Time{}, fmt.Errorf("ping: %w", err)
	}

	// Subscribe before the watchers resync (the inventory lists), so that
	// nothing that happens meanwhile is missed; those events are handled
	// after it.
	ectx, cancelEvents := context.WithCancel(ctx)
	defer cancelEvents()
	filters := make(client.Filters).Add("type", string(events.ContainerEventType)).Add("event", followedEvents...)
	ev := c.api.Events(ectx, client.EventsListOptions{Filters: filters})
	select {
	case err := <-ev.Err:
		return time.Time{}, fmt.Errorf("events: %w", err)
	default:
	}
	if err := c.resync(ctx, f, n); err != nil {
		return time.Time{}, err
	}
	upAt = time.Now()

	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return upAt, ctx.Err()
		case <-f.joined:
			if err := c.resync(ctx, f, n); err != nil {
				return upAt, err
			}
		case err := <-ev.Err:
			if err == nil {
				err = errors.New("stream closed")
			}
			return upAt, fmt.Errorf("events: %w", err)
		case m := <-ev.Messages:
			// A watcher that came since the last resync catches up first.
			if err := c.resync(ctx, f, n); err != nil {
				return upAt, err
			}
			for _, w := range c.watchersOf(f) {
				if err := w.tell(ctx, func(ctx context.Context, w watcher) error { return w.event(ctx, m) }); err != nil {
					return upAt, err
				}
			}
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			_, err := c.api.Ping(pctx, client.PingOptions{})
			cancel()
			if err != nil {
				return upAt, fmt.Errorf("ping: %w", err)
			}
		}
	}
}

// resync resyncs, for subscription n, each watcher not yet resynced for it.
func (c *Client) resync(ctx context.Context, f *fanOut, n int) error {
	for _, w := range c.watchersOf(f) {
		if w.session == n {
			continue
		}
		again := w.session != 0
		if err := w.tell(ctx, func(ctx context.Context, w watcher) error { return w.resync(ctx, again) }); err != nil {
			return err
		}
		w.session = n
	}
	return nil
}
