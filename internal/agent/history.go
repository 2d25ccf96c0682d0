package agent

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// historySpan is how much of the ticks historyRing keeps.
const historySpan = time.Hour

// historyRing keeps each GPU's figures (SM utilisation, memory used,
// power, temperature) of the last hour of ticks, so that the API's 1h GPU
// history reads no ledger. Its memory is fixed per GPU: a ring of
// historySpan/interval + 1 samples of 32 bytes, so at one tick a second
// 3,601 samples, about 113 KiB a GPU and 900 KiB for 8 GPUs.
type historyRing struct {
	mu   sync.Mutex
	size int
	gpus map[string]*gpuRing
	last *meter.Tick // the tick added last: a republished one adds nothing
}

type gpuRing struct {
	index   int
	model   string
	samples []historySample
	next    int
	full    bool
}

type historySample struct {
	at                 int64 // unix nanoseconds
	memory             uint64
	util, power, tempC float32
}

// newHistoryRing keeps historySpan of samples taken every interval.
func newHistoryRing(interval time.Duration) *historyRing {
	if interval <= 0 {
		interval = time.Second
	}
	return &historyRing{size: int(historySpan/interval) + 1, gpus: map[string]*gpuRing{}}
}

// add records the tick's readable GPUs; it is on the sampler's OnTick
// chain.
func (h *historyRing) add(t *sampler.Tick) {
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
		if d.Err != nil || !hasReadings(d) {
			continue
		}
		r := h.gpus[d.UUID]
		if r == nil {
			r = &gpuRing{samples: make([]historySample, h.size)}
			h.gpus[d.UUID] = r
		}
		r.index, r.model = d.Index, d.Model
		r.samples[r.next] = historySample{at: at, memory: d.MemoryUsed,
			util: float32(d.Util), power: float32(d.PowerWatts), tempC: float32(d.TempC)}
		r.next++
		if r.next == h.size {
			r.next, r.full = 0, true
		}
	}
}

// hasReadings reports whether a device reported every figure the history
// keeps: one without, say, a power sensor is left out rather than shown
// at 0 W.
func hasReadings(d *gpu.Device) bool {
	for _, f := range d.Missing {
		switch f {
		case gpu.FieldUtil, gpu.FieldPower, gpu.FieldTemp:
			return false
		}
	}
	return true
}

// Recent returns the samples in [from, to) per step, steps aligned to the
// Unix epoch, GPUs in index order; a GPU without a sample there is left
// out.
func (h *historyRing) Recent(from, to time.Time, step time.Duration) []apitype.GPUHistory {
	if step <= 0 {
		return nil
	}
	lo, hi, s := from.UnixNano(), to.UnixNano(), int64(step)
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []apitype.GPUHistory
	for uuid, r := range h.gpus {
		n, first := r.next, 0
		if r.full {
			n, first = h.size, r.next
		}
		var points []apitype.HistoryPoint
		var g ledger.GPUGauges
		bucket := int64(-1)
		flush := func() {
			if g.Samples > 0 {
				points = append(points, historyPoint(g.Point(time.Unix(0, bucket))))
			}
			g = ledger.GPUGauges{}
		}
		for k := range n {
			x := &r.samples[(first+k)%h.size]
			if x.at < lo || x.at >= hi {
				continue
			}
			if b := x.at - x.at%s; b != bucket {
				flush()
				bucket = b
			}
			g.Observe(float64(x.util), float64(x.memory), float64(x.power), float64(x.tempC))
		}
		flush()
		if len(points) > 0 {
			out = append(out, apitype.GPUHistory{UUID: uuid, Index: r.index, Model: r.model, Points: points})
		}
	}
	sortHistory(out)
	return out
}

func sortHistory(gs []apitype.GPUHistory) {
	slices.SortFunc(gs, func(a, b apitype.GPUHistory) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.UUID, b.UUID))
	})
}

func historyPoint(p ledger.GPUPoint) apitype.HistoryPoint {
	return apitype.HistoryPoint{T: p.Start, Samples: p.Samples,
		UtilMean: p.UtilMean, UtilMax: p.UtilMax, MemMean: p.MemoryMean, MemMax: p.MemoryMax,
		PowerMean: p.PowerMean, PowerMax: p.PowerMax, TempMean: p.TempMean, TempMax: p.TempMax}
}

// gpuHistory is server.History over the ring and the ledger.
type gpuHistory struct {
	*historyRing
	store ledger.GPUSeriesStore // nil: the ledger is off
	node  string
}

var _ server.History = gpuHistory{}

// Stored reads the node's GPU series from the ledger.
func (g gpuHistory) Stored(ctx context.Context, from, to time.Time, step time.Duration) ([]apitype.GPUHistory, error) {
	if g.store == nil {
		return nil, server.ErrNoLedger
	}
	hs, err := g.store.GPUSeries(ctx, g.node, from, to, step)
	if err != nil {
		return nil, err
	}
	out := make([]apitype.GPUHistory, len(hs))
	for i, h := range hs {
		ps := make([]apitype.HistoryPoint, len(h.Points))
		for j, p := range h.Points {
			ps[j] = historyPoint(p)
		}
		out[i] = apitype.GPUHistory{UUID: h.GPU.UUID, Index: h.GPU.Index, Model: h.GPU.Model, Points: ps}
	}
	return out, nil
}

// historySource is what the API reads GPU history from.
func (a *Agent) historySource() server.History {
	if a.history == nil {
		return nil
	}
	g := gpuHistory{historyRing: a.history, node: a.node}
	if a.store != nil {
		g.store = a.store
	}
	return g
}
