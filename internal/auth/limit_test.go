package auth

import (
	"strconv"
	"testing"
	"time"
)

type allowed struct {
	ok    bool
	wait  time.Duration
	first bool
}

func allow(l *Limiter, key string, now time.Time) allowed {
	ok, wait, first := l.Allow(key, now)
	return allowed{ok, wait, first}
}

func TestLimiterBurstAndRefill(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	l := NewLimiter(2, 3, 0) // 2 a second, 3 at once
	steps := []struct {
		at   time.Duration
		key  string
		want allowed
	}{
		{0, "alice", allowed{ok: true}},
		{0, "alice", allowed{ok: true}},
		{0, "alice", allowed{ok: true}},
		// The burst is spent: the next token is half a second away, and
		// only the first refusal of the run says so.
		{0, "alice", allowed{wait: 500 * time.Millisecond, first: true}},
		{0, "alice", allowed{wait: 500 * time.Millisecond}},
		{200 * time.Millisecond, "alice", allowed{wait: 300 * time.Millisecond}},
		// Another caller has a bucket of its own.
		{200 * time.Millisecond, "bob", allowed{ok: true}},
		{500 * time.Millisecond, "alice", allowed{ok: true}},
		{500 * time.Millisecond, "alice", allowed{wait: 500 * time.Millisecond, first: true}},
		// A long pause refills the bucket up to the burst, no further.
		{time.Hour, "alice", allowed{ok: true}},
		{time.Hour, "alice", allowed{ok: true}},
		{time.Hour, "alice", allowed{ok: true}},
		{time.Hour, "alice", allowed{wait: 500 * time.Millisecond, first: true}},
	}
	for i, s := range steps {
		if got := allow(l, s.key, t0.Add(s.at)); got != s.want {
			t.Errorf("step %d: Allow(%s, +%s) = %+v, want %+v", i, s.key, s.at, got, s.want)
		}
	}
}

func TestLimiterWaitIsAtLeastAMillisecond(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	l := NewLimiter(1000, 1, 0)
	l.Allow("a", t0)
	if got := allow(l, "a", t0.Add(999_999*time.Nanosecond)); got.ok || got.wait != time.Millisecond {
		t.Errorf("Allow just before the next token = %+v, want a refusal with a wait of 1ms", got)
	}
}

func TestLimiterOff(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	for name, l := range map[string]*Limiter{"nil": nil, "rate 0": NewLimiter(0, 0, 0)} {
		for i := range 1000 {
			if got := allow(l, "a", t0); got != (allowed{ok: true}) {
				t.Fatalf("%s: request %d = %+v, want allowed", name, i, got)
			}
		}
	}
}

// TestLimiterSweep: the limiter tracks at most max callers. Callers with
// full buckets are forgotten first; a caller that is being limited is
// kept, so that new addresses cannot reset its limit, until every bucket
// is in use.
func TestLimiterSweep(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	l := NewLimiter(1, 1, 3)
	l.Allow("x", t0)
	l.Allow("y", t0)
	later := t0.Add(5 * time.Second) // x and y are full again
	l.Allow("hot", later)
	if got := allow(l, "hot", later); got.ok || !got.first {
		t.Fatalf("hot's second request = %+v, want the first refusal", got)
	}
	l.Allow("new", later) // three tracked: the sweep forgets x and y
	if got := len(l.buckets); got != 2 {
		t.Errorf("%d buckets after the sweep, want 2 (hot and new)", got)
	}
	if got := allow(l, "hot", later); got.ok || got.first {
		t.Errorf("hot after the sweep = %+v, want still refused, not for the first time", got)
	}

	// Every bucket in use: they are all forgotten rather than grow.
	l.Allow("busy", later) // hot, new, busy: all empty
	l.Allow("last", later)
	if got := len(l.buckets); got != 1 {
		t.Errorf("%d buckets after a sweep with every bucket in use, want 1", got)
	}

	// However many callers come, the map stays within max.
	l = NewLimiter(1, 1, 100)
	for i := range 10_000 {
		l.Allow("10.0.0."+strconv.Itoa(i), t0.Add(time.Duration(i)*time.Millisecond))
		if n := len(l.buckets); n > 100 {
			t.Fatalf("%d buckets after %d callers, want at most 100", n, i+1)
		}
	}
	if NewLimiter(1, 1, 0).max != 10_000 {
		t.Error("max 0 is not the default of 10,000")
	}
}
