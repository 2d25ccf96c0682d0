package agent

import (
	"sync"
	"time"
)

// utilRing keeps each GPU's SM utilisation of the last ticks, bounded by
// a count of samples per GPU, so that the queue's target placement reads
// a mean over queue.placement_window without the ledger. Its memory is
// fixed: 16 bytes a sample, so 8 GPUs over 10 minutes at one tick a
// second hold about 77 KB.
type utilRing struct {
	mu     sync.Mutex
	size   int
	byGPU  map[string]*ring
	window time.Duration
}

type ring struct {
	at   []time.Time
	util []float64
	next int
	full bool
}

// newUtilRing keeps window's worth of samples at interval, per GPU.
func newUtilRing(window, interval time.Duration) *utilRing {
	if interval <= 0 {
		interval = time.Second
	}
	n := int(window/interval) + 1
	return &utilRing{size: max(n, 1), byGPU: map[string]*ring{}, window: window}
}

// add records a GPU's utilisation (percent) at a tick.
func (u *utilRing) add(uuid string, at time.Time, percent float64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.byGPU[uuid]
	if r == nil {
		r = &ring{at: make([]time.Time, u.size), util: make([]float64, u.size)}
		u.byGPU[uuid] = r
	}
	r.at[r.next], r.util[r.next] = at, percent
	r.next++
	if r.next == u.size {
		r.next, r.full = 0, true
	}
}

// means returns each GPU's mean utilisation (0..1) over the window up to
// now; a GPU without a sample in it is left out.
func (u *utilRing) means(now time.Time) map[string]float64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]float64, len(u.byGPU))
	from := now.Add(-u.window)
	for uuid, r := range u.byGPU {
		n := r.next
		if r.full {
			n = u.size
		}
		sum, count := 0.0, 0
		for i := 0; i < n; i++ {
			if !r.at[i].Before(from) && !r.at[i].After(now) {
				sum += r.util[i]
				count++
			}
		}
		if count > 0 {
			out[uuid] = min(max(sum/float64(count)/100, 0), 1)
		}
	}
	return out
}
