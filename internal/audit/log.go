package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

const (
	defaultQueue = 4096
	// maxBatch is the most queued events one ledger write carries (a
	// summary of dropped events may come with them).
	maxBatch = 256
	// flushTimeout bounds the writes of what is still queued when Run's
	// context ends.
	flushTimeout = 5 * time.Second
)

// LogConfig wires a Log.
type LogConfig struct {
	File  *File             // nil for no file
	Store ledger.AuditStore // nil for no ledger
	// Node fills in events recorded without one.
	Node string
	// Size is how many events may wait to be written (default 4096);
	// beyond that Record drops them and counts them.
	Size   int
	Logger *slog.Logger
}

// Log records audit events without making the caller wait: Record queues
// an event and Run writes the queue out to the file and the ledger. An
// HTTP handler or the sampler never blocks on a slow disk or ledger, and a
// flood of events (denied requests, say) costs memory only up to the
// queue's size; what does not fit is counted and written as a summary.
type Log struct {
	file  *File
	store ledger.AuditStore
	node  string
	log   *slog.Logger
	queue chan Event

	dropped     atomic.Uint64
	written     atomic.Uint64
	writeErrors atomic.Uint64
	// reported is how much of dropped a summary has covered; only Run
	// touches it.
	reported uint64
}

var _ Auditor = (*Log)(nil)

// NewLog returns a Log; nothing is written until Run.
func NewLog(cfg LogConfig) *Log {
	if cfg.Size <= 0 {
		cfg.Size = defaultQueue
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Log{
		file:  cfg.File,
		store: cfg.Store,
		node:  cfg.Node,
		log:   cfg.Logger,
		queue: make(chan Event, cfg.Size),
	}
}

// Record queues e, filling in the node and the time when they are unset.
// It never blocks: when the queue is full e is dropped and counted.
func (l *Log) Record(e Event) {
	if e.Node == "" {
		e.Node = l.node
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	select {
	case l.queue <- e:
	default:
		l.dropped.Add(1)
	}
}

// Audit records e; it is there so that a Log can be the policy engine's
// Auditor. It never fails: write errors are Run's to log.
func (l *Log) Audit(_ context.Context, e Event) error {
	l.Record(e)
	return nil
}

// Dropped is how many events were dropped because the queue was full.
func (l *Log) Dropped() uint64 { return l.dropped.Load() }

// Run writes queued events until ctx ends, then writes what is still
// queued, giving that at most five seconds, and returns nil. Write errors
// are logged and counted, not returned: an audit log that cannot be
// written must not stop the agent.
func (l *Log) Run(ctx context.Context) error {
	batch := make([]Event, 0, maxBatch)
	for {
		select {
		case e := <-l.queue:
			batch = l.withSummary(l.fill(append(batch[:0], e), maxBatch))
			fileFailed := l.writeFile(ctx, batch)
			err := l.writeStore(ctx, batch)
			if err != nil && ctx.Err() != nil {
				// ctx ended during the ledger write: the flush tries
				// again with its own deadline.
				return l.flush(ctx, batch, fileFailed)
			}
			l.count(len(batch), fileFailed, err)
		case <-ctx.Done():
			return l.flush(ctx, nil, 0)
		}
	}
}

// flush writes unsent (events in the file, fileFailed of them excepted,
// but not yet in the ledger) and then what is queued, under a fresh
// deadline since ctx has ended.
func (l *Log) flush(ctx context.Context, unsent []Event, fileFailed int) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	if len(unsent) > 0 {
		l.count(len(unsent), fileFailed, l.writeStore(fctx, unsent))
	}
	// Stop at what was queued when the flush began, so that callers that
	// go on recording cannot keep Run from returning.
	batch := make([]Event, 0, maxBatch)
	for left := len(l.queue); left > 0; {
		batch = l.fill(batch[:0], min(left, maxBatch))
		if len(batch) == 0 {
			break
		}
		left -= len(batch)
		batch = l.withSummary(batch)
		l.count(len(batch), l.writeFile(fctx, batch), l.writeStore(fctx, batch))
	}
	if l.dropped.Load() > l.reported {
		batch = l.withSummary(batch[:0])
		l.count(len(batch), l.writeFile(fctx, batch), l.writeStore(fctx, batch))
	}
	return nil
}

// fill appends to batch what is queued, without waiting, until batch
// holds n events.
func (l *Log) fill(batch []Event, n int) []Event {
	for len(batch) < n {
		select {
		case e := <-l.queue:
			batch = append(batch, e)
		default:
			return batch
		}
	}
	return batch
}

// withSummary puts first in batch a summary of the events dropped since
// the last write, if any were.
func (l *Log) withSummary(batch []Event) []Event {
	d := l.dropped.Load()
	if d == l.reported {
		return batch
	}
	n := d - l.reported
	l.reported = d
	l.log.Warn("audit events dropped: the queue was full", "dropped", n)
	summary := Event{
		Time:    time.Now(),
		Kind:    KindAPI,
		Node:    l.node,
		Action:  ActionDropped,
		Outcome: OutcomeDropped,
		Error:   fmt.Sprintf("%d events were not recorded: the audit queue was full", n),
	}
	return append([]Event{summary}, batch...)
}

// writeFile writes events to the file one by one, counts and logs the
// failures, one log line for them all, and returns how many failed.
func (l *Log) writeFile(ctx context.Context, events []Event) int {
	if l.file == nil {
		return 0
	}
	var (
		failed int
		first  error
	)
	for _, e := range events {
		if err := l.file.Audit(ctx, e); err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	if failed > 0 {
		l.writeErrors.Add(uint64(failed))
		l.log.Error("audit events not written to the file", "path", l.file.Path(), "events", failed, "err", first)
	}
	return failed
}

// writeStore writes events to the ledger in one call; the caller counts
// an error.
func (l *Log) writeStore(ctx context.Context, events []Event) error {
	if l.store == nil || len(events) == 0 {
		return nil
	}
	out := make([]ledger.AuditEvent, len(events))
	for i, e := range events {
		out[i] = ToLedger(e)
	}
	return l.store.Audit(ctx, out)
}

// count counts n events as written, less those that did not reach every
// place they were meant for: fileFailed of them, or all n when the ledger
// refused the batch.
func (l *Log) count(n, fileFailed int, storeErr error) {
	if storeErr != nil {
		l.writeErrors.Add(1)
		l.log.Error("audit events not written to the ledger", "events", n, "err", storeErr)
		return
	}
	l.written.Add(uint64(n - fileFailed))
}

// Events reads back the events with from <= Time < to, oldest first: from
// the ledger when there is one, else from the file. When there are more
// than limit it returns the newest limit and true; a limit of 0 or less
// means no limit. Events still queued are not seen.
func (l *Log) Events(ctx context.Context, from, to time.Time, limit int) ([]Event, bool, error) {
	var events []Event
	switch {
	case l.store != nil:
		got, err := l.store.AuditEvents(ctx, ledger.Filter{From: from, To: to})
		if err != nil {
			return nil, false, err
		}
		events = make([]Event, len(got))
		for i, e := range got {
			events[i] = FromLedger(e)
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

var (
	descEvents      = prometheus.NewDesc("gpumeter_audit_events_total", "Audit events written to the audit file and the ledger, each that was configured.", nil, nil)
	descDropped     = prometheus.NewDesc("gpumeter_audit_dropped_total", "Audit events dropped because the audit queue was full.", nil, nil)
	descWriteErrors = prometheus.NewDesc("gpumeter_audit_write_errors_total", "Failed writes of audit events: one per event to the file, one per batch to the ledger.", nil, nil)
)

// Describe implements prometheus.Collector.
func (l *Log) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEvents, descDropped, descWriteErrors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (l *Log) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(l.written.Load()))
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(l.dropped.Load()))
	ch <- prometheus.MustNewConstMetric(descWriteErrors, prometheus.CounterValue, float64(l.writeErrors.Load()))
}
