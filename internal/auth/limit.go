package auth

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter limits requests per caller with a token bucket each. Callers
// that have not been seen for a while are forgotten, so that a flood from
// many addresses cannot grow it without bound.
type Limiter struct {
	rate  rate.Limit
	burst int
	max   int

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	*rate.Limiter
	limited bool // the last request was refused; guarded by Limiter.mu
}

// NewLimiter allows perSecond requests a second per caller, burst at
// once; perSecond 0 turns limiting off. At most max callers are tracked
// (0: 10,000).
func NewLimiter(perSecond float64, burst, max int) *Limiter {
	if max <= 0 {
		max = 10_000
	}
	return &Limiter{rate: rate.Limit(perSecond), burst: burst, max: max, buckets: map[string]*bucket{}}
}

// Allow takes one request for key. When it is refused it says how long
// until one would be allowed, and whether this is the first refusal
// since key was last let through.
func (l *Limiter) Allow(key string, now time.Time) (ok bool, wait time.Duration, first bool) {
	if l == nil || l.rate <= 0 {
		return true, 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, found := l.buckets[key]
	if !found {
		if len(l.buckets) >= l.max {
			l.sweep(now)
		}
		b = &bucket{Limiter: rate.NewLimiter(l.rate, l.burst)}
		l.buckets[key] = b
	}
	if b.AllowN(now, 1) {
		b.limited = false
		return true, 0, false
	}
	first = !b.limited
	b.limited = true
	wait = time.Duration(math.Ceil((1-b.TokensAt(now))/float64(l.rate)*1e9)) * time.Nanosecond
	return false, max(wait, time.Millisecond), first
}

// sweep forgets full buckets: those callers are as if never seen. When
// every bucket is in use it forgets them all rather than grow.
func (l *Limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) >= l.max {
		clear(l.buckets)
	}
}
