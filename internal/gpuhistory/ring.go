// Package gpuhistory keeps each GPU's figures of the last hour of ticks in
// memory: the API's and the console's last hour and the queue's placement
// window read them from one ring, and neither reads the ledger.
package gpuhistory

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// Span is how much of the ticks a Ring keeps: the longest window read
// from it (queue.placement_window is at most an hour).
const Span = time.Hour

// Ring keeps each readable GPU's figures (SM utilisation, memory used,
// power, temperature) of the last Span of ticks. Its memory is fixed per
// GPU: a ring of Span/interval + 1 samples of 32 bytes, so at one tick a
// second 3,601 samples, about 113 KiB a GPU and 0.9 MiB for 8 GPUs.
type Ring struct {
	mu   sync.Mutex
	size int
	gpus map[string]*gpuRing
	last *meter.Tick // the tick added last: a republished one adds nothing
}

type gpuRing struct {
	index   int
	model   string
	samples []sample
	next    int
	full    bool
}

// sample is one GPU's reading at one tick. A reading without every
// figure (a GPU without a power sensor, say) still counts for the
// placement window's utilisation; the history leaves it out rather than
// show it at 0 W. Utilisation is kept to float32's seven digits, as the
// ledger's minute gauges keep it, so that a sample fits 32 bytes, not 40.
type sample struct {
	at                 int64 // unix nanoseconds
	memory             uint64
	util, power, tempC float32 // percent, W, °C
	complete           bool    // every figure was read
}

// New keeps Span of samples taken every interval.
func New(interval time.Duration) *Ring {
	if interval <= 0 {
		interval = time.Second
	}
	return &Ring{size: int(Span/interval) + 1, gpus: map[string]*gpuRing{}}
}

// Add records the tick's readable GPUs; it is on the sampler's OnTick
// chain, before the queue, which reads the tick's utilisation back.
func (h *Ring) Add(t *sampler.Tick) {
	if t == nil || t.Tick == nil || t.Time.IsZero() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == t.Tick {
		return
	}
	h.last = t.Tick
	at := t.Time.UnixNano()
	for i := range t.Sample.Devices {
		d := &t.Sample.Devices[i]
		if d.Err != nil {
			continue
		}
		r := h.gpus[d.UUID]
		if r == nil {
			r = &gpuRing{samples: make([]sample, h.size)}
			h.gpus[d.UUID] = r
		}
		complete := hasReadings(d)
		if complete {
			r.index, r.model = d.Index, d.Model
		}
		r.samples[r.next] = sample{at: at, memory: d.MemoryUsed, util: float32(d.Util),
			power: float32(d.PowerWatts), tempC: float32(d.TempC), complete: complete}
		r.next++
		if r.next == h.size {
			r.next, r.full = 0, true
		}
	}
}

// hasReadings reports whether a device reported every figure the history
// shows.
func hasReadings(d *gpu.Device) bool {
	for _, f := range d.Missing {
		switch f {
		case gpu.FieldUtil, gpu.FieldPower, gpu.FieldTemp:
			return false
		}
	}
	return true
}

// inOrder is r's samples, oldest first, as the two runs of the ring.
func (r *gpuRing) inOrder() [2][]sample {
	if r.full {
		return [2][]sample{r.samples[r.next:], r.samples[:r.next]}
	}
	return [2][]sample{r.samples[:r.next], nil}
}

// Recent returns the complete samples in [from, to) per step, steps
// aligned to the Unix epoch, GPUs in index order; a GPU without a sample
// there is left out. Utilisation is read at the precision of the other
// figures (float32), as the history has always given it.
func (h *Ring) Recent(from, to time.Time, step time.Duration) []ledger.GPUHistory {
	if step <= 0 {
		return nil
	}
	lo, hi, s := from.UnixNano(), to.UnixNano(), int64(step)
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []ledger.GPUHistory
	for uuid, r := range h.gpus {
		var points []ledger.GPUPoint
		var g ledger.GPUGauges
		bucket := int64(-1)
		flush := func() {
			if g.Samples > 0 {
				points = append(points, g.Point(time.Unix(0, bucket)))
			}
			g = ledger.GPUGauges{}
		}
		for _, run := range r.inOrder() {
			for i := range run {
				x := &run[i]
				if !x.complete || x.at < lo || x.at >= hi {
					continue
				}
				if b := x.at - x.at%s; b != bucket {
					flush()
					bucket = b
				}
				g.Observe(float64(x.util), float64(x.memory), float64(x.power), float64(x.tempC))
			}
		}
		flush()
		if len(points) > 0 {
			out = append(out, ledger.GPUHistory{GPU: ledger.GPU{UUID: uuid, Index: r.index, Model: r.model}, Points: points})
		}
	}
	slices.SortFunc(out, func(a, b ledger.GPUHistory) int {
		return cmp.Or(cmp.Compare(a.GPU.Index, b.GPU.Index), cmp.Compare(a.GPU.UUID, b.GPU.UUID))
	})
	return out
}

// Means returns each GPU's mean SM utilisation (0..1) over the window
// [now-window, now]: the queue's placement window. A GPU without a
// sample in it is left out.
func (h *Ring) Means(now time.Time, window time.Duration) map[string]float64 {
	lo, hi := now.Add(-window).UnixNano(), now.UnixNano()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]float64, len(h.gpus))
	for uuid, r := range h.gpus {
		sum, count := 0.0, 0
		for _, run := range r.inOrder() {
			for i := range run {
				if x := &run[i]; x.at >= lo && x.at <= hi {
					sum += float64(x.util)
					count++
				}
			}
		}
		if count > 0 {
			out[uuid] = min(max(sum/float64(count)/100, 0), 1)
		}
	}
	return out
}
