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
// Snapshots are never written while a scrape reads them: a scrape takes
// the current one under mu and holds a reference until it has sent it,
// and a render writes only into a spare that nobody holds, then swaps it
// in under mu. So a scrape shows one render whole, and scrapes between
// two ticks all show the same one. Two snapshots are enough unless a
// scrape outlives a render; then a third is made and kept for reuse.
//
// A scrape that finds the snapshot older than the published tick (the
// tick came, Run has not rendered it yet) renders it itself, so that a
// scrape never lags the tick: the agent's first scrape after it is ready
// has the first tick's series, as before.
type snapshot struct {
	plain, gz bytes.Buffer
	tick      *sampler.Tick // rendered from; nil before the first tick
	refs      int           // scrapes sending it; under MetricsHandler.mu
}

// maxSpares bounds the snapshots kept for reuse, so that a burst of slow
// scrapes does not keep memory for ever.
const maxSpares = 2

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
// serialised, so the writer and the spares need no other lock.
func (h *MetricsHandler) refresh(force bool) {
	h.render.Lock()
	defer h.render.Unlock()
	t := h.src.Latest()
	h.mu.Lock()
	if !force && h.current != nil && h.current.tick == t {
		h.mu.Unlock()
		return
	}
	var s *snapshot
	if n := len(h.spares); n > 0 {
		s, h.spares = h.spares[n-1], h.spares[:n-1]
	}
	h.mu.Unlock()
	if s == nil {
		s = new(snapshot)
	}
	s.tick = t
	// Size both buffers from the previous render: bytes.Buffer's own
	// growth doubles, and a 660 KB scrape would hold 1.3 MB or more per
	// buffer, kept live in every snapshot, which the GC's heap goal
	// doubles again.
	fit(&s.plain, h.lastPlain)
	fit(&s.gz, h.lastGz)
	h.renderBody(&s.plain, t)
	h.gzip.Reset(&s.gz)
	_, _ = h.gzip.Write(s.plain.Bytes()) // into memory: cannot fail
	_ = h.gzip.Close()
	h.gzip.Reset(nil)
	h.lastPlain, h.lastGz = s.plain.Len(), s.gz.Len()

	h.mu.Lock()
	old := h.current
	h.current = s
	h.release(old)
	h.mu.Unlock()
}

// fit empties b and gives it room for a little more than last bytes,
// replacing its array when that is too small or much too large.
func fit(b *bytes.Buffer, last int) {
	want := last + last/8 + 4096
	if c := b.Cap(); c < want || c > want+want/4 {
		*b = *bytes.NewBuffer(make([]byte, 0, want))
	}
	b.Reset()
}

// acquire returns the current snapshot, held until release.
func (h *MetricsHandler) acquire() *snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.current
	if s != nil {
		s.refs++
	}
	return s
}

// done gives back a snapshot that acquire returned.
func (h *MetricsHandler) done(s *snapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.refs--
	if s != h.current {
		h.release(s)
	}
}

// release keeps s for reuse once nobody sends it; under mu.
func (h *MetricsHandler) release(s *snapshot) {
	if s == nil || s.refs > 0 || len(h.spares) >= maxSpares {
		return
	}
	h.spares = append(h.spares, s)
}

// state is the handler's snapshot machinery.
type state struct {
	live   atomic.Bool   // Run runs
	wake   chan struct{} // Notify -> Run, one pending at most
	maxAge time.Duration // Run renders when no tick came for this long; 0: only on ticks
	render sync.Mutex    // one render at a time
	gzip   *gzip.Writer  // the render's, under render
	// lastPlain and lastGz are the previous render's sizes, under render.
	lastPlain, lastGz int
	mu                sync.Mutex // current, spares and refs
	current           *snapshot
	spares            []*snapshot
}

func newState(maxAge time.Duration) state {
	// BestSpeed: the scrape is the same label sets over and over, so
	// the fastest level already takes the load's 660 KB to 41 KB, in
	// less than half the time of the default level, which gets 36 KB.
	gz, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return state{wake: make(chan struct{}, 1), maxAge: maxAge, gzip: gz}
}
