// Writing to the ledger: Flush and Run, the batch sent again until the
// ledger has it, and the fence a lost lease raises.

package record

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// unresolved is a batch taken from pending whose write has not been
// confirmed: it is sent again, alone and under its own ID, until the
// ledger confirms it (or refuses it as invalid).
type unresolved struct {
	b        ledger.Batch
	rows     int
	from, to time.Time // the minutes it covers
}

// Flush writes the batch left unresolved by an earlier Flush, if any, and
// then everything pending as one new batch. A batch whose write fails
// stays as it is, and the next Flush sends it again before anything newer,
// so that nothing is lost while memory allows and, under a lease, nothing
// is counted twice. Under a lease a Flush with nothing pending still
// writes an empty batch, which renews the lease.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	if r.fenced != nil {
		r.mu.Unlock()
		return r.fenced
	}
	u := r.open
	r.mu.Unlock()
	if u != nil {
		if err := r.send(ctx, u); err != nil {
			return err
		}
	}

	r.mu.Lock()
	p := r.p
	leased := r.cfg.Lease.Instance != ""
	if p.rows() == 0 && len(p.meta) == 0 && p.node == nil && !leased {
		r.mu.Unlock()
		return nil
	}
	r.p = newPending()
	// The rows count as pending from here on; the batch is rendered
	// outside the lock, so that Add (the sampler) does not wait for it.
	u = &unresolved{rows: p.rows()}
	var id ledger.BatchID
	if leased {
		r.seq++
		id = ledger.BatchID{Node: r.cfg.Lease.Node, Instance: r.cfg.Lease.Instance, Seq: r.seq}
	}
	r.open = u
	r.mu.Unlock()
	b := r.batch(p)
	b.ID = id
	from, to := p.span()
	r.mu.Lock()
	u.b, u.from, u.to = b, from, to
	r.mu.Unlock()
	return r.send(ctx, u)
}

// send writes u and books the outcome.
func (r *Recorder) send(ctx context.Context, u *unresolved) error {
	start := time.Now()
	err := r.cfg.Store.Write(ctx, u.b)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.WriteSeconds = time.Since(start).Seconds()
	if err == nil {
		r.open = nil
		if r.st.LastError != "" {
			r.cfg.Logger.Info("ledger write recovered")
		}
		r.st.Flushes++
		r.st.LastFlush = time.Now()
		r.st.LastError = ""
		return nil
	}
	r.st.FlushErrors++
	wasFailing := r.st.LastError != ""
	r.st.LastError = err.Error()
	switch {
	case errors.Is(err, ledger.ErrFenced):
		r.fenced = r.fence(err)
		r.cfg.Logger.Error("ledger lease lost: writing stops", "err", r.fenced)
		return r.fenced
	case errors.Is(err, ledger.ErrInvalidBatch):
		// The ledger will refuse these rows however often they are
		// sent: keeping them would block every later batch.
		r.cfg.Logger.Error("ledger refused a batch as invalid; dropping it", "rows", u.rows, "err", err)
		r.st.DroppedRows += uint64(u.rows)
		r.open = nil
		return err
	}
	if !wasFailing {
		r.cfg.Logger.Error("ledger write failed; keeping rows in memory and sending them again", "err", err)
	}
	return err
}

// fence records what a recorder that lost its lease had not written.
func (r *Recorder) fence(err error) *FencedError {
	f := &FencedError{Err: err, Node: r.cfg.Node}
	if r.open != nil {
		f.Rows, f.From, f.To, f.Seq = r.open.rows, r.open.from, r.open.to, r.open.b.ID.Seq
	}
	rows := r.p.rows()
	if rows > 0 {
		from, to := r.p.span()
		if f.Rows == 0 || from.Before(f.From) {
			f.From = from
		}
		if to.After(f.To) {
			f.To = to
		}
		f.Rows += rows
	}
	return f
}

// FencedError is what Flush and Run return once the recorder's lease was
// taken over: the rows it had not written (the batch refused and what
// came after it), which the agent that holds the lease now did not book
// either, are lost, never counted twice.
type FencedError struct {
	Err      error // wraps ledger.ErrFenced
	Node     string
	Seq      uint64 // the refused batch
	Rows     int
	From, To time.Time // the minutes those rows cover
}

func (e *FencedError) Error() string {
	msg := fmt.Sprintf("%v; this agent stops writing node %q", e.Err, e.Node)
	if e.Rows == 0 {
		return msg + " (every row it had was written)"
	}
	return fmt.Sprintf("%s; not written: %d rows of the minutes %s to %s UTC (batch %d and after)", msg, e.Rows,
		e.From.UTC().Format("2006-01-02 15:04"), e.To.UTC().Format("15:04"), e.Seq)
}

func (e *FencedError) Unwrap() error { return e.Err }

// Run flushes every FlushInterval until ctx ends, then flushes once more
// with a short deadline, so a clean stop loses nothing. It returns early,
// with a *FencedError, when the lease is lost.
func (r *Recorder) Run(ctx context.Context) error {
	tick := time.NewTicker(r.cfg.FlushInterval)
	defer tick.Stop()
	var lastRetain time.Time
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := r.Flush(final)
			cancel()
			return err
		case <-tick.C:
			// A failed flush is counted and logged in Flush and its rows
			// stay pending; retention waits for a ledger that writes.
			// A write that hangs (a half-open connection) must fail
			// and show in ledger_up rather than block the recorder.
			fctx, cancel := context.WithTimeout(ctx, r.WriteTimeout())
			err := r.Flush(fctx)
			cancel()
			var fenced *FencedError
			if errors.As(err, &fenced) {
				return err
			}
			if err == nil && r.cfg.MinuteRetention > 0 && r.cfg.HourRetention > 0 && time.Since(lastRetain) > time.Hour {
				// This node's rows only: on a shared ledger every agent
				// keeps to its own, under the same deadline as a write.
				rctx, cancel := context.WithTimeout(ctx, r.WriteTimeout())
				err := r.cfg.Store.Retain(rctx, r.cfg.Node, time.Now(), r.cfg.MinuteRetention, r.cfg.HourRetention)
				cancel()
				if err != nil {
					r.cfg.Logger.Warn("ledger retention", "err", err)
				} else {
					lastRetain = time.Now()
				}
			}
		}
	}
}

// WriteTimeout is how long one write (or retention run) of Run may take:
// 30 s, or three flush intervals when that is longer.
func (r *Recorder) WriteTimeout() time.Duration {
	return WriteTimeout(r.cfg.FlushInterval)
}

// WriteTimeout is a recorder's write deadline for a flush interval.
func WriteTimeout(flush time.Duration) time.Duration {
	return max(30*time.Second, 3*flush)
}
