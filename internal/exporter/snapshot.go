package exporter

import (
	"bytes"
	"compress/gzip"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumeter/gpumeter/internal/sampler"
)

// A scrape is a copy of a snapshot: the whole /metrics body rendered once,
// plain and gzipped, after each tick. Everything a scrape serves is in it,
// the tick's series and also the queue's figures, the prices and the
// registry's collectors (Go, process, ledger writer, audit, waste,
// promhttp's error counter): gathering and encoding the registry alone
// costs more than the scrape budget, so it is not redone per scrape. The
// figures that do not come from the tick are therefore as old as the
// latest render: at most one sample interval, or MaxAge when the sampler
// stalls (Run renders then too, so that the process metrics keep moving
// while the tick does not).
//
// A snapshot is never written once it is published: a render fills new
// buffers and swaps them in, and a scrape sends whichever snapshot was
// current when it began, so a scrape shows one render whole and scrapes
// between two ticks all show the same one. Nothing is kept for reuse, the
// gzip writer included: the heap after a collection holds the current
// snapshot only (about 0.75 MB at the 64-container load), not a spare
// beside it and the 1.2 MB of a gzip writer's state, and since the GC's
// heap goal is twice what it holds, keeping them would cost four times
// their size in resident memory. The price is about 2 MB of garbage per
// tick, a collection every few seconds.
//
// A scrape that finds the snapshot older than the published tick (the
// tick came, Run has not rendered it yet) renders it itself, so that a
// scrape never lags the tick: the agent's first scrape after it is ready
// has the first tick's series, as before.
type snapshot struct {
	plain, gz []byte
	tick      *sampler.Tick // rendered from; nil before the first tick
}

// Run renders a snapshot now and after every Notify (and every MaxAge
// without one, when MaxAge is set) until ctx ends. While Run runs, a
// scrape only copies the latest snapshot; without it, each scrape renders
// one first, which is slower but serves the same bytes. Run returns nil
// when ctx ends.
func (h *MetricsHandler) Run(ctx context.Context) error {
	h.live.Store(true)
	defer h.live.Store(false)
	var stale <-chan time.Time
	var timer *time.Timer
	if h.maxAge > 0 {
		timer = time.NewTimer(h.maxAge)
		defer timer.Stop()
		stale = timer.C
	}
	force := false // a scrape may have rendered one already
	for {
		h.refresh(force)
		if timer != nil {
			timer.Reset(h.maxAge)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-h.wake:
			force = false // a scrape may have rendered this tick already
		case <-stale:
			force = true
		}
	}
}

// Notify asks Run to render the latest tick. It never blocks: a render
// that is still pending takes the newest tick anyway. It fits
// sampler.Config.OnTick.
func (h *MetricsHandler) Notify() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// refresh renders a snapshot and makes it the current one; unless force,
// only when the current one is not of the latest tick. Renders are
// serialised, so that two scrapes that find the snapshot stale render it
// once.
func (h *MetricsHandler) refresh(force bool) {
	h.render.Lock()
	defer h.render.Unlock()
	t := h.src.Latest()
	if cur := h.current.Load(); !force && cur != nil && cur.tick == t {
		return
	}
	// Sized from the previous render: bytes.Buffer's own growth doubles,
	// and a 660 KB scrape would hold 1.3 MB or more.
	plain := bytes.NewBuffer(make([]byte, 0, room(h.lastPlain)))
	h.renderBody(plain, t)
	gz := bytes.NewBuffer(make([]byte, 0, room(h.lastGz)))
	// BestSpeed: the scrape is the same label sets over and over, so the
	// fastest level already takes the load's 660 KB to 41 KB, in less
	// than half the time of the default level, which gets 36 KB.
	zw, _ := gzip.NewWriterLevel(gz, gzip.BestSpeed)
	_, _ = zw.Write(plain.Bytes()) // into memory: cannot fail
	_ = zw.Close()
	h.lastPlain, h.lastGz = plain.Len(), gz.Len()
	h.current.Store(&snapshot{plain: plain.Bytes(), gz: gz.Bytes(), tick: t})
}

// room is the capacity for a render whose previous one took last bytes.
func room(last int) int { return last + last/16 + 4096 }

// state is the handler's snapshot machinery.
type state struct {
	live   atomic.Bool   // Run runs
	wake   chan struct{} // Notify -> Run, one pending at most
	maxAge time.Duration // Run renders when no tick came for this long; 0: only on ticks
	render sync.Mutex    // one render at a time
	// lastPlain and lastGz are the previous render's sizes, under render.
	lastPlain, lastGz int
	current           atomic.Pointer[snapshot]
}

func newState(maxAge time.Duration) state {
	return state{wake: make(chan struct{}, 1), maxAge: maxAge}
}
