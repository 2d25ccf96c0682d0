// Package record turns the sampler's ticks into ledger batches: it sums
// every tick's deltas into per-minute rows in memory and writes them to the
// ledger every few seconds. Each flush is one atomic batch that holds only
// what was not written before, so a crash loses at most the rows of one
// flush interval (and the interval its last sample opened, which the next
// sample would have booked) and never writes a minute twice. While the ledger cannot
// be written the rows stay in memory, up to a bound, and go out when it is
// back.
//
// Under a node lease every batch carries an ID (node, instance, sequence).
// A batch whose write failed is sent again alone, under the same ID, before
// anything newer: when the failure was a lost reply to a COMMIT that went
// through, the ledger finds the sequence written and adds nothing. A
// recorder whose lease another agent took over is fenced: it writes
// nothing more and says what it had not written.
package record

import (
	"log/slog"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// DefaultMaxRows bounds the rows held while the ledger is unreachable:
// about five hours of a busy eight-GPU node.
const DefaultMaxRows = 100_000

// Config wires a recorder.
type Config struct {
	Store ledger.Store
	Node  string
	// FlushInterval is how often Run writes; 0 means 5 s.
	FlushInterval time.Duration
	// MaxRows bounds the rows waiting to be written; 0 means
	// DefaultMaxRows. Past it the oldest minutes are dropped and counted.
	MaxRows int
	// Retain runs the ledger's retention every hour when both are set.
	MinuteRetention, HourRetention time.Duration
	// Lease is the node lease the recorder writes under (see Acquire); a
	// zero lease writes batches without IDs, as a tool that owns the
	// ledger alone may.
	Lease  ledger.Lease
	Logger *slog.Logger
}

// Status says how the recorder is doing, for metrics.
type Status struct {
	PendingRows  int
	Flushes      uint64
	FlushErrors  uint64
	DroppedRows  uint64
	LastFlush    time.Time // when the last good flush ended
	LastError    string
	WriteSeconds float64 // how long the last flush took
}

// Recorder sums ticks into minutes and writes them.
type Recorder struct {
	cfg Config
	mu  sync.Mutex
	p   *pending
	// open is the batch being written or waiting to be written again; its
	// rows count as pending until the store has them.
	open *unresolved
	seq  uint64 // the last batch sequence number given out
	// fenced is set once the lease is lost: nothing is written after it.
	fenced *FencedError
	st     Status
	// last is the meter tick Add summed last: the sampler publishes it
	// again while the GPU source reads nothing.
	last *meter.Tick
	// flushMu keeps one flush at a time, so batches reach the store in
	// the order they were taken.
	flushMu sync.Mutex
}

// New returns a recorder; it writes nothing until Flush or Run.
func New(cfg Config) *Recorder {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 5 * time.Second
	}
	if cfg.MaxRows <= 0 {
		cfg.MaxRows = DefaultMaxRows
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Recorder{cfg: cfg, p: newPending()}
}

// Status returns the recorder's counters.
func (r *Recorder) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.st
	s.PendingRows = r.p.rows() + r.openRows()
	return s
}

// Add sums a tick into the pending minutes. It does no I/O, so the sampler
// may call it on every tick. A tick that carries the same meter figures as
// the one before (the sampler's last figures, republished while the GPU
// source reads nothing) adds nothing: its deltas are in already.
func (r *Recorder) Add(t *sampler.Tick) {
	if t == nil || t.Tick == nil || t.Time.IsZero() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.Tick == r.last || r.fenced != nil {
		return
	}
	r.last = t.Tick
	p := r.p
	now := t.Time.UTC()
	if p.node == nil {
		p.node = &ledger.Node{Name: r.cfg.Node, FirstSeen: now}
	}
	p.node.LastSeen = now

	// Each GPU books the interval [now − Δ, now], Δ its own.
	spans := make(map[int]time.Duration, len(t.GPUs))
	cut := cutter{end: now}
	for i := range t.GPUs {
		g := &t.GPUs[i]
		key := meter.GPUKey(g.UUID, g.Index)
		if i < len(t.Sample.Devices) && t.Sample.Devices[i].Err == nil {
			d := &t.Sample.Devices[i]
			p.gpuMeta[key] = ledger.GPU{Node: r.cfg.Node, UUID: key, Index: d.Index, Model: d.Model, MemoryTotal: d.MemoryTotal}
		}
		span := time.Duration(g.Delta.Seconds * float64(time.Second))
		spans[g.Index] = span
		if span <= 0 {
			continue
		}
		// The utilisation booked over the interval is that of the sample
		// that opened it; the current sample's opens the next one.
		util := g.Delta.UsedSeconds / g.Delta.Seconds * 100
		var row *gpuRow
		for _, pc := range cut.split(span) {
			row = p.gpu(gpuKey{pc.minute, key})
			row.Add(gpuPart(&g.Delta, pc.frac, util))
		}
		// The sample's own readings go with the minute its interval ends
		// in, so that they ride on a row that holds time: the first sample
		// of a GPU, which books no interval, gives none.
		if row != nil && i < len(t.Sample.Devices) && t.Sample.Devices[i].Err == nil && readings(&t.Sample.Devices[i]) {
			d := &t.Sample.Devices[i]
			row.gauges.Observe(d.Util, float64(d.MemoryUsed), d.PowerWatts, d.TempC)
		}
	}
	for i := range t.Usage {
		u := &t.Usage[i]
		span := spans[u.GPU]
		if span <= 0 || u.Delta == (meter.Sums{}) {
			continue
		}
		h := slot(&p.hotUsage, i)
		if h.row != u.Row {
			if _, ok := p.rowInfo[u.Row]; !ok {
				p.rowInfo[u.Row] = rowInfo{u.Owner, meter.GPUKey(u.UUID, u.GPU)}
			}
			*h = hotUsage{row: u.Row}
		}
		for _, pc := range cut.split(span) {
			minute, f := pc.minute, pc.frac
			s := h.sums
			if s == nil || h.minute != minute {
				k := usageKey{minute, u.Row}
				if s = p.usage[k]; s == nil {
					s = &ledger.Sums{}
					p.usage[k] = s
				}
				h.minute, h.sums = minute, s
			}
			s.Add(usagePart(&u.Delta, f))
		}
	}
	for i := range t.Containers {
		c := &t.Containers[i]
		h := slot(&p.hotCtrs, i)
		if h.id != c.ID {
			*h = hotCtr{id: c.ID, meta: p.meta[c.ID]}
		}
		switch prev := h.meta; {
		case prev == nil:
			m := metaOf(ledgerContainer(r.cfg.Node, &c.Container, now, ledger.Container{}), &c.Container)
			p.meta[c.ID], h.meta = &m, &m
		case prev.stateOf(&c.Container):
			// Nothing changed but the time: no new record on every tick.
			prev.LastSeen = now
		default:
			*prev = metaOf(ledgerContainer(r.cfg.Node, &c.Container, now, prev.Container), &c.Container)
		}
		d := c.Delta
		span := time.Duration(d.Seconds * float64(time.Second))
		if span <= 0 || (d.CPUSeconds == 0 && d.RAMByteSeconds == 0) {
			continue
		}
		for _, pc := range cut.split(span) {
			minute, f := pc.minute, pc.frac
			s := h.usage
			if s == nil || h.minute != minute {
				k := ctrKey{minute, c.ID}
				if s = p.containers[k]; s == nil {
					s = &ledger.ContainerUsage{Node: r.cfg.Node, Start: time.Unix(minute, 0).UTC(), ContainerID: c.ID}
					p.containers[k] = s
				}
				h.minute, h.usage = minute, s
			}
			s.CPUSeconds += d.CPUSeconds * f
			s.RAMByteSeconds += d.RAMByteSeconds * f
		}
	}
	r.bound()
}

// gpu returns the pending row of a GPU's minute, adding it if missing.
func (p *pending) gpu(k gpuKey) *gpuRow {
	s := p.gpus[k]
	if s == nil {
		s = &gpuRow{}
		p.gpus[k] = s
	}
	return s
}

// readings reports whether a device reported every figure the ledger's
// GPU history keeps. One that lacks one (a GPU without a power sensor)
// gives no readings rather than a false zero mixed into the means.
func readings(d *gpu.Device) bool {
	for _, f := range d.Missing {
		switch f {
		case gpu.FieldUtil, gpu.FieldPower, gpu.FieldTemp:
			return false
		}
	}
	return true
}
