// Package retry runs an operation again after a failure that may pass,
// waiting longer each time. The caller classifies its errors: Permanent
// marks one that no retry can mend, After one whose sender said when to
// come back (an HTTP 429 with Retry-After); every other error is tried
// again.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is a schedule of waits between attempts: Initial, then each
// wait doubled (or, when Linear, grown by Initial) up to Max. The zero
// Backoff waits nothing.
type Backoff struct {
	Initial time.Duration
	// Max bounds one wait, before jitter; 0 leaves it unbounded.
	Max time.Duration
	// Linear grows each wait by Initial instead of doubling it.
	Linear bool
	// Jitter adds a random part of up to the wait itself, so that callers
	// that failed together do not come back together.
	Jitter bool

	cur time.Duration // the last wait, before jitter; 0 before the first
}

// Next returns the next wait and moves the schedule on.
func (b *Backoff) Next() time.Duration {
	switch {
	case b.cur == 0:
		b.cur = b.Initial
	case b.Linear:
		b.cur = min(b.cur, math.MaxInt64-b.Initial) + b.Initial
	default:
		b.cur = min(b.cur, math.MaxInt64/2) * 2
	}
	if b.Max > 0 {
		b.cur = min(b.cur, b.Max)
	}
	d := b.cur
	if b.Jitter && d > 0 {
		d += rand.N(d)
	}
	return d
}

// Reset starts the schedule over: the next wait is Initial again.
func (b *Backoff) Reset() { b.cur = 0 }

// Sleep waits d, or until ctx ends, and then returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Permanent marks err as one that trying again cannot mend: Do returns it
// at once. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &mark{err: err}
}

// After marks err as one to try again no sooner than d from now, since
// whoever sent it said so. After(nil, d) is nil.
func After(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &mark{err: err, after: max(d, 0), hasAfter: true}
}

// mark is an error classified by Permanent or After.
type mark struct {
	err      error
	after    time.Duration
	hasAfter bool
}

func (m *mark) Error() string { return m.err.Error() }
func (m *mark) Unwrap() error { return m.err }

// Do calls op until it returns nil or a Permanent error, has been called
// attempts times (with no bound when attempts is 0 or less), or ctx ends.
// Between two calls it waits the next wait of b, or what After asked for
// when that is longer; a wait After asked for that would end past ctx's
// deadline is not begun, and Do gives up at once, since the call it would
// lead to could not be made in time.
//
// Do returns how many calls it made and the last error, unmarked. When ctx
// ended, the error says so too.
func Do(ctx context.Context, attempts int, b Backoff, op func() error) (int, error) {
	for n := 1; ; n++ {
		err := op()
		if err == nil {
			return n, nil
		}
		var m *mark
		marked := errors.As(err, &m)
		if top, ok := err.(*mark); ok {
			err = top.err
		}
		switch {
		case ctx.Err() != nil:
			return n, withCtx(ctx, err)
		case marked && !m.hasAfter, attempts > 0 && n >= attempts:
			return n, err
		}
		wait := b.Next()
		if marked && m.after > wait {
			wait = m.after
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
				return n, err
			}
		}
		if Sleep(ctx, wait) != nil {
			return n, withCtx(ctx, err)
		}
	}
}

// withCtx adds to err that ctx has ended, unless err says so already.
func withCtx(ctx context.Context, err error) error {
	if errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w (then %w)", err, ctx.Err())
}
