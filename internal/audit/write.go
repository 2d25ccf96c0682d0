// Writing observations out: Run takes the first refusals and the sums of
// ended windows and writes them to the file and the ledger, in parts, and
// when its context ends writes what it still holds under a deadline of
// its own.

package audit

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"
)

// Run writes the observations until ctx ends: the first refusals as they
// come, the sums when their window has ended. Then it writes what it
// holds, giving that at most five seconds, and returns nil. Write errors
// are logged and counted, not returned: an audit log that cannot be
// written must not stop the agent.
func (l *Log) Run(ctx context.Context) error {
	tick := time.NewTicker(min(l.window/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-l.wake:
		case <-tick.C:
			l.mu.Lock()
			if l.cur != nil && !l.now().Before(l.cur.start.Add(l.window)) {
				l.closeLocked()
			}
			l.mu.Unlock()
		case <-ctx.Done():
			return l.flush(ctx, nil, 0, nil)
		}
		if unsent, fileFailed, rest := l.writeOut(ctx, l.take()); unsent != nil {
			// ctx ended during the ledger write: the flush tries again
			// with its own deadline.
			return l.flush(ctx, unsent, fileFailed, rest)
		}
	}
}

// flush writes unsent (events in the file, fileFailed of them excepted,
// but not yet in the ledger), rest (in neither) and then all that is
// held, under a fresh deadline since ctx has ended.
func (l *Log) flush(ctx context.Context, unsent []Event, fileFailed int, rest []Event) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	if len(unsent) > 0 {
		l.count(len(unsent), fileFailed, l.writeStore(fctx, unsent))
	}
	l.mu.Lock()
	l.closeLocked()
	l.mu.Unlock()
	l.writeOut(fctx, append(rest, l.take()...))
	return nil
}

// take takes what is held to be written: the first refusals, the sums of
// ended windows and, when some were dropped, a summary of them.
func (l *Log) take() []Event {
	l.mu.Lock()
	batch, closed := l.firsts, l.closed
	l.firsts, l.closed = nil, nil
	l.mu.Unlock()
	for _, w := range closed {
		batch = w.events(batch)
	}
	if s, ok := l.dropSummary(); ok {
		batch = append(batch, s)
	}
	return batch
}

// writeOut writes batch to the file and the ledger, in parts. When ctx
// ends during a ledger write it stops, and returns the part the file has
// (but fileFailed of them) and the ledger has not, and the rest.
func (l *Log) writeOut(ctx context.Context, batch []Event) (unsent []Event, fileFailed int, rest []Event) {
	for len(batch) > 0 {
		n := min(len(batch), maxBatch)
		part := batch[:n:n]
		batch = batch[n:]
		fileFailed := l.writeFile(ctx, part)
		err := l.writeStore(ctx, part)
		if err != nil && ctx.Err() != nil {
			return part, fileFailed, batch
		}
		l.count(n, fileFailed, err)
	}
	return nil, 0, nil
}

// dropSummary is an event naming, by kind, the observations dropped since
// the last summary, if any were.
func (l *Log) dropSummary() (Event, bool) {
	var (
		total uint64
		parts []string
	)
	for k := range numKinds {
		d := l.dropped[k].Load()
		if n := d - l.reported[k]; n > 0 {
			total += n
			parts = append(parts, fmt.Sprintf("%s %d", kindNames[k], n))
		}
		l.reported[k] = d
	}
	if total == 0 {
		return Event{}, false
	}
	msg := fmt.Sprintf("%d observations were not recorded, the audit log being too far behind: %s; no action is ever dropped", total, strings.Join(parts, ", "))
	l.log.Warn("audit observations dropped", "dropped", total, "by_kind", strings.Join(parts, ", "))
	return Event{
		Time: l.now(), Kind: KindAPI, Node: l.node, Action: ActionDropped, Outcome: OutcomeDropped,
		Count: int64(total), Error: msg,
	}, true
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
	return l.store.Audit(ctx, events)
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
