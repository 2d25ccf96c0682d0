package retry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBackoff(t *testing.T) {
	tests := []struct {
		name string
		b    Backoff
		want []time.Duration
	}{
		{"doubling up to max", Backoff{Initial: 250 * time.Millisecond, Max: time.Second},
			[]time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, time.Second}},
		{"linear", Backoff{Initial: 10 * time.Millisecond, Linear: true},
			[]time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond, 40 * time.Millisecond}},
		{"constant", Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond},
			[]time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}},
		{"zero", Backoff{}, []time.Duration{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []time.Duration
			for range tt.want {
				got = append(got, tt.b.Next())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
			tt.b.Reset()
			if d := tt.b.Next(); d != tt.b.Initial {
				t.Errorf("after Reset: %v, want %v", d, tt.b.Initial)
			}
		})
	}
}

func TestBackoffJitter(t *testing.T) {
	b := Backoff{Initial: 10 * time.Millisecond, Linear: true, Jitter: true}
	for i := 1; i <= 20; i++ {
		base := time.Duration(i) * 10 * time.Millisecond
		if d := b.Next(); d < base || d >= 2*base {
			t.Fatalf("wait %d = %v, want in [%v, %v)", i, d, base, 2*base)
		}
	}
}

func TestBackoffDoesNotOverflow(t *testing.T) {
	b := Backoff{Initial: time.Hour}
	var last time.Duration
	for range 100 {
		d := b.Next()
		if d < last {
			t.Fatalf("wait went from %v down to %v", last, d)
		}
		last = d
	}
}

func TestDo(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name     string
		attempts int
		errs     []error // what op returns, call by call; nil after the last
		calls    int
		err      string
	}{
		{"first call", 3, nil, 1, ""},
		{"second call", 3, []error{boom}, 2, ""},
		{"attempts spent", 3, []error{boom, boom, boom, boom}, 3, "boom"},
		{"no bound", 0, []error{boom, boom, boom, boom, boom}, 6, ""},
		{"permanent", 3, []error{Permanent(fmt.Errorf("404: %w", boom))}, 1, "404: boom"},
		{"wrapped permanent", 3, []error{fmt.Errorf("post: %w", Permanent(boom))}, 1, "post: boom"},
		{"after", 3, []error{After(boom, time.Millisecond)}, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			n, err := Do(context.Background(), tt.attempts, Backoff{Initial: time.Microsecond}, func() error {
				calls++
				if calls <= len(tt.errs) {
					return tt.errs[calls-1]
				}
				return nil
			})
			if n != tt.calls || calls != tt.calls {
				t.Errorf("Do made %d calls and said %d, want %d", calls, n, tt.calls)
			}
			if got := fmt.Sprint(err); tt.err == "" && err != nil || tt.err != "" && got != tt.err {
				t.Errorf("err = %v, want %q", err, tt.err)
			}
			var m *mark
			if errors.As(err, &m) && err == error(m) {
				t.Errorf("err %v keeps its mark", err)
			}
			if tt.err != "" && !errors.Is(err, boom) {
				t.Errorf("err %v does not wrap the op's error", err)
			}
		})
	}
}

// TestDoWaits: After's wait is honoured when it is longer than the
// backoff's, and one that would end past ctx's deadline is not begun.
func TestDoWaits(t *testing.T) {
	boom := errors.New("429")
	t.Run("after is waited", func(t *testing.T) {
		start := time.Now()
		calls := 0
		n, err := Do(context.Background(), 3, Backoff{Initial: time.Microsecond}, func() error {
			calls++
			if calls == 1 {
				return After(boom, 100*time.Millisecond)
			}
			return nil
		})
		if n != 2 || err != nil {
			t.Fatalf("Do = %d, %v; want 2, nil", n, err)
		}
		if d := time.Since(start); d < 100*time.Millisecond {
			t.Errorf("Do returned after %v, before the 100ms After asked for", d)
		}
	})
	t.Run("after past the deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n, err := Do(ctx, 3, Backoff{Initial: time.Microsecond}, func() error { return After(boom, time.Minute) })
		// A Do that waited would have met the deadline, and said so.
		if n != 1 || !errors.Is(err, boom) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Do = %d, %v; want 1 call and its error alone", n, err)
		}
	})
	t.Run("ctx ends during the wait", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		n, err := Do(ctx, 0, Backoff{Initial: time.Hour}, func() error { return boom })
		if n != 1 || !errors.Is(err, boom) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Do = %d, %v; want 1 call, its error and the deadline", n, err)
		}
		if want := "429 (then context deadline exceeded)"; err.Error() != want {
			t.Errorf("err = %q, want %q", err, want)
		}
	})
	t.Run("ctx ended by the call", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		n, err := Do(ctx, 0, Backoff{}, func() error {
			cancel()
			return fmt.Errorf("post: %w", context.Canceled)
		})
		if n != 1 || err.Error() != "post: context canceled" {
			t.Errorf("Do = %d, %v; want 1 call and its error as it was", n, err)
		}
	})
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on an ended ctx = %v, want context.Canceled", err)
	}
	// Only a hang is a failure: an hour's sleep would show as one.
	if d := time.Since(start); d > time.Minute {
		t.Errorf("Sleep on an ended ctx took %v", d)
	}
}
