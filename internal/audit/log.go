package audit

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

const (
	defaultWindow     = time.Minute
	defaultMaxSources = 256
	defaultMaxKeys    = 512
	// maxReasons is how many sums one source address may have in a
	// window; its other calls are summed with its /24 or /64.
	maxReasons = 32
	// catchAll bounds the sums of what is beyond every other cap: one per
	// status and outcome, then one for the rest.
	catchAll = 32
	// maxClosed is how many ended windows may wait for Run; when Run is
	// further behind than that, the oldest is dropped and counted.
	maxClosed = 4
	// maxBatch is the most events one ledger write carries.
	maxBatch = 256
	// flushTimeout bounds the writes of what is still held when Run's
	// context ends.
	flushTimeout = 5 * time.Second
)

// LogConfig wires a Log.
type LogConfig struct {
	File  *File // nil for no file
	Store Store // nil for no ledger
	// Node fills in events recorded without one.
	Node string
	// Window is how long observations are summed over (default a minute).
	Window time.Duration
	// MaxSources is how many source addresses a window tells apart
	// (default 256); the calls of the others are summed by their /24
	// (IPv4) or /64 (IPv6).
	MaxSources int
	// MaxKeys bounds the sums a window keeps (default 512), and with them
	// the memory a flood takes and what it writes: see MaxWindowBytes.
	MaxKeys int
	Logger  *slog.Logger
	Now     func() time.Time // default time.Now
}

// Log is the audit log. What it is told goes one of two ways, and the
// caller says which by the method it calls:
//
//   - Act records something that was done (a container stopped, a
//     policy warning sent, the config reloaded). The event is in the file,
//     synced, and in the ledger before Act returns, or Act returns the
//     error: an action waits for its line, nothing queues it, and so
//     nothing can drop it.
//   - Observe records a refusal or a read. It never blocks and never
//     writes: calls are summed per source address, caller, action, status
//     and reason over a window (a minute), Run writes the first refusal of
//     each sum at once and each sum, with its count, when the window ends.
//     Caps on the source addresses and sums of a window bound the memory
//     and the volume of a flood, however many addresses it comes from:
//     past them, calls are summed by /24 or /64, and then by status alone.
//
// Only what Run cannot keep up with is dropped: windows that waited for it
// too long, counted by kind and named in a summary event.
type Log struct {
	file  *File
	store Store
	node  string
	log   *slog.Logger
	now   func() time.Time

	window     time.Duration
	maxSources int
	maxExact   int // sums by source address
	maxCoarse  int // sums by /24 or /64

	mu     sync.Mutex
	cur    *window   // the window being summed; nil before the first call
	closed []*window // ended windows Run has yet to write
	firsts []Event   // first refusals Run has yet to write
	wake   chan struct{}

	observed    [numKinds]atomic.Uint64
	dropped     [numKinds]atomic.Uint64
	written     atomic.Uint64
	writeErrors atomic.Uint64
	// reported is how much of dropped a summary has covered; only Run
	// touches it.
	reported [numKinds]uint64
}

// Kinds of observation, as the metrics and the summary of dropped ones
// name them.
const (
	kindRefused = iota
	kindRejected
	kindFailed
	kindRead
	numKinds
)

var kindNames = [numKinds]string{"refused", "rejected", "failed", "read"}

func kindOf(outcome string) int {
	switch outcome {
	case OutcomeDenied:
		return kindRefused
	case OutcomeRejected:
		return kindRejected
	case OutcomeAllowed:
		return kindRead
	}
	return kindFailed
}

// NewLog returns a Log; nothing is written until Run, except by Act.
func NewLog(cfg LogConfig) *Log {
	if cfg.Window <= 0 {
		cfg.Window = defaultWindow
	}
	if cfg.MaxSources <= 0 {
		cfg.MaxSources = defaultMaxSources
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = defaultMaxKeys
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	coarse := max(1, cfg.MaxKeys/4)
	return &Log{
		file:       cfg.File,
		store:      cfg.Store,
		node:       cfg.Node,
		log:        cfg.Logger,
		now:        cfg.Now,
		window:     cfg.Window,
		maxSources: cfg.MaxSources,
		maxExact:   max(1, cfg.MaxKeys-coarse),
		maxCoarse:  coarse,
		wake:       make(chan struct{}, 1),
	}
}

func (l *Log) fill(e *Event) {
	if e.Node == "" {
		e.Node = l.node
	}
	if e.Time.IsZero() {
		e.Time = l.now()
	}
}

// Act records e, something that was done, and returns once it is in the
// file (synced) and in the ledger, or with the error of each that failed.
// ctx bounds the ledger write: a caller whose request may be cancelled
// passes a context that outlives it.
func (l *Log) Act(ctx context.Context, e Event) error {
	l.fill(&e)
	var errs []error
	if l.file != nil {
		err := l.file.Audit(ctx, e)
		if err == nil {
			err = l.file.Sync()
		}
		if err != nil {
			l.writeErrors.Add(1)
			errs = append(errs, err)
		}
	}
	if l.store != nil {
		if err := l.store.Audit(ctx, []Event{e}); err != nil {
			l.writeErrors.Add(1)
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		err := errors.Join(errs...)
		l.log.Error("audit event of an action not written", "action", cmp.Or(e.Action, e.Kind), "err", err)
		return err
	}
	l.written.Add(1)
	return nil
}

// Recorded writes e, an event the ledger already holds (a queue job's
// audit row, written in the job's own transaction), to the file only, and
// returns once it is synced. Writing it to the ledger again would count
// it twice.
func (l *Log) Recorded(ctx context.Context, e Event) error {
	l.fill(&e)
	if l.file == nil {
		l.written.Add(1)
		return nil
	}
	err := l.file.Audit(ctx, e)
	if err == nil {
		err = l.file.Sync()
	}
	if err != nil {
		l.writeErrors.Add(1)
		l.log.Error("audit event of a recorded action not written to the file", "action", cmp.Or(e.Action, e.Kind), "err", err)
		return err
	}
	l.written.Add(1)
	return nil
}

// Observe counts e, a refusal or a read, in its window. It never blocks
// and holds no more than the window's caps allow, however many calls
// come.
func (l *Log) Observe(e Event) {
	l.fill(&e)
	e = clipEvent(e)
	kind := kindOf(e.Outcome)
	l.observed[kind].Add(1)
	start := e.Time.Truncate(l.window)
	host := hostOf(e.Source)
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.cur
	if w == nil || start.After(w.start) {
		l.closeLocked()
		w = newWindow(start)
		l.cur = w
	}
	k := sumKey{source: host, caller: e.Caller, role: e.Role, action: e.Action, outcome: e.Outcome, reason: e.Error, status: e.Status}
	if s := w.sums[k]; s != nil {
		s.add(e.Target)
		return
	}
	_, known := w.sources[host]
	if (known || len(w.sources) < l.maxSources) && w.reasons[host] < maxReasons && w.exact < l.maxExact {
		w.sources[host] = struct{}{}
		w.reasons[host]++
		w.exact++
		s := w.put(k, e, kind)
		// The first refusal of each sum is written at once, as it came,
		// so that a single one is seen without waiting for the window;
		// reads are only summed.
		if kind != kindRead && len(l.firsts) < l.maxExact {
			s.first = true
			l.firsts = append(l.firsts, e)
			l.signal()
		} else {
			s.count++
		}
		return
	}
	k.source = prefixOf(host)
	if s := w.sums[k]; s != nil {
		s.add(e.Target)
		return
	}
	if w.coarse < l.maxCoarse {
		w.coarse++
		w.put(k, e, kind).count++
		return
	}
	k = sumKey{source: "*", outcome: e.Outcome, status: e.Status}
	if s := w.sums[k]; s != nil {
		s.count++
		return
	}
	if w.rest >= catchAll-1 {
		k = sumKey{source: "*"}
		if s := w.sums[k]; s != nil {
			s.count++
			return
		}
	}
	w.rest++
	w.put(k, Event{Time: e.Time, Node: e.Node, Kind: e.Kind, Outcome: k.outcome, Status: k.status}, kind).count++
}

// closeLocked moves the current window, when it holds anything, to those
// Run is to write.
func (l *Log) closeLocked() {
	w := l.cur
	l.cur = nil
	if w == nil || len(w.sums) == 0 {
		return
	}
	if len(l.closed) >= maxClosed {
		for _, s := range l.closed[0].order {
			l.dropped[s.kind].Add(uint64(s.count))
		}
		l.closed = l.closed[1:]
	}
	l.closed = append(l.closed, w)
	l.signal()
}

func (l *Log) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Dropped is how many observations were not recorded, Run having fallen
// too far behind; actions are never dropped.
func (l *Log) Dropped() uint64 {
	var n uint64
	for i := range l.dropped {
		n += l.dropped[i].Load()
	}
	return n
}

// MaxWindowBytes bounds the bytes one window of observations adds to the
// file, however many calls come from however many addresses: the caps on
// sums times the longest line one can take (free text is clipped when it
// is observed). Actions come on top: each is written whole.
func (l *Log) MaxWindowBytes() int {
	lines := 2*l.maxExact + l.maxCoarse + catchAll
	return lines * maxLine0
}

// Events reads back the events with from <= Time < to, oldest first: from
// the ledger when there is one, else from the file. When there are more
// than limit it returns the newest limit and true; a limit of 0 or less
// means no limit. Observations not yet written are not seen.
func (l *Log) Events(ctx context.Context, from, to time.Time, limit int) ([]Event, bool, error) {
	var events []Event
	switch {
	case l.store != nil && limit > 0:
		return l.store.AuditNewest(ctx, Filter{From: from, To: to}, limit)
	case l.store != nil:
		var err error
		if events, err = l.store.AuditEvents(ctx, Filter{From: from, To: to}); err != nil {
			return nil, false, err
		}
	case l.file != nil:
		var err error
		if events, err = ReadFile(l.file.Path(), from, to); err != nil {
			return nil, false, err
		}
	default:
		return nil, false, errors.New("the audit log is kept neither in a file nor in the ledger")
	}
	if limit > 0 && len(events) > limit {
		return events[len(events)-limit:], true, nil
	}
	return events, false, nil
}
