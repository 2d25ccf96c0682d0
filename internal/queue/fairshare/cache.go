package fairshare

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Cache keeps the last Usage Compute found, recomputing it in the
// background every Settings.Refresh, so that the scheduler's pass reads
// it without waiting on the ledger.
type Cache struct {
	r   Reader
	log *slog.Logger
	now func() time.Time

	last atomic.Pointer[Usage]

	mu       sync.Mutex
	settings Settings
	changed  chan struct{} // wakes Run when the settings change
}

// NewCache is a cache of Compute over r with settings s; it computes
// nothing until Run. now is the clock (nil: time.Now); log nil logs
// nothing.
func NewCache(r Reader, s Settings, log *slog.Logger, now func() time.Time) *Cache {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cache{r: r, log: log, now: now, settings: s, changed: make(chan struct{}, 1)}
}

// Get is the last Usage computed, nil before the first. It never blocks.
// The Usage is shared by every caller: read it, never change it.
func (c *Cache) Get() *Usage { return c.last.Load() }

// Settings are the settings the next computation uses.
func (c *Cache) Settings() Settings {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settings
}

// SetSettings puts new settings in force (a SIGHUP): Run recomputes at
// once, and then every s.Refresh.
func (c *Cache) SetSettings(s Settings) {
	c.mu.Lock()
	c.settings = s
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// Refresh computes now, in the caller's goroutine, and keeps the result;
// an error keeps the last result in place.
func (c *Cache) Refresh(ctx context.Context) error {
	u, err := Compute(ctx, c.r, c.Settings(), c.now())
	if err != nil {
		return err
	}
	c.last.Store(u)
	return nil
}

// Run computes at once and then every Settings.Refresh until ctx ends,
// when it returns nil. A computation that fails is logged and the last
// result kept: the queue goes on with factors a refresh old.
func (c *Cache) Run(ctx context.Context) error {
	for {
		if err := c.Refresh(ctx); err != nil && ctx.Err() == nil {
			c.log.Error("fair share not refreshed; the last factors stay", "err", err)
		}
		t := time.NewTimer(c.Settings().Refresh)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-c.changed:
			t.Stop()
		case <-t.C:
		}
	}
}
