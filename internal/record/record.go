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
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/internal/container"
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

type usageKey struct {
	minute int64
	row    uint64 // meter.Usage.Row; rows says whose
}

// rowInfo is what a meter row number stands for.
type rowInfo struct {
	owner container.Owner
	gpu   string
}

type gpuKey struct {
	minute int64
	gpu    string
}

type ctrKey struct {
	minute int64
	id     string
}

// pending is what waits to be written.
type pending struct {
	usage      map[usageKey]*ledger.Sums
	rowInfo    map[uint64]rowInfo
	gpus       map[gpuKey]*ledger.GPUSums
	containers map[ctrKey]*ledger.ContainerUsage
	meta       map[string]*meta
	gpuMeta    map[string]ledger.GPU
	node       *ledger.Node

	// hotUsage[i] and hotCtrs[i] remember where the i-th usage row and
	// container of the last tick were summed: in a steady state the next
	// tick has the same rows in the same order and the same minute, so Add
	// looks nothing up. They point into usage, containers and meta;
	// whatever deletes from those clears them.
	hotUsage []hotUsage
	hotCtrs  []hotCtr
}

type hotUsage struct {
	row    uint64 // 0: none; meter rows start at 1
	minute int64
	sums   *ledger.Sums // nil until a minute is known
}

type hotCtr struct {
	id     string // "": none
	meta   *meta
	minute int64
	usage  *ledger.ContainerUsage // nil until a minute is known
}

// slot returns the i-th entry of *hot, growing it as needed.
func slot[T any](hot *[]T, i int) *T {
	if i >= len(*hot) {
		*hot = append(*hot, make([]T, i+1-len(*hot))...)
	}
	return &(*hot)[i]
}

func newPending() *pending {
	return &pending{
		usage:      map[usageKey]*ledger.Sums{},
		rowInfo:    map[uint64]rowInfo{},
		gpus:       map[gpuKey]*ledger.GPUSums{},
		containers: map[ctrKey]*ledger.ContainerUsage{},
		meta:       map[string]*meta{},
		gpuMeta:    map[string]ledger.GPU{},
	}
}

func (p *pending) rows() int { return len(p.usage) + len(p.gpus) + len(p.containers) }

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

// unresolved is a batch taken from pending whose write has not been
// confirmed: it is sent again, alone and under its own ID, until the
// ledger confirms it (or refuses it as invalid).
type unresolved struct {
	b        ledger.Batch
	rows     int
	from, to time.Time // the minutes it covers
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
		for _, pc := range cut.split(span) {
			minute, f := pc.minute, pc.frac
			k := gpuKey{minute, key}
			s := p.gpus[k]
			if s == nil {
				s = &ledger.GPUSums{}
				p.gpus[k] = s
			}
			s.Add(gpuPart(&g.Delta, f, util))
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

// piece is the part of an interval that falls in one minute.
type piece struct {
	minute int64 // unix seconds of the minute's start
	frac   float64
}

// cutter splits intervals that end at one instant, keeping the last
// result: within a tick most GPUs and containers book the same span.
type cutter struct {
	end    time.Time
	span   time.Duration
	pieces []piece // nil until the first split
	buf    [4]piece
}

func (c *cutter) split(span time.Duration) []piece {
	if c.pieces == nil || span != c.span {
		c.span, c.pieces = span, split(c.end, span, c.buf[:0])
	}
	return c.pieces
}

// split appends to buf a piece for each minute that [end − span, end)
// touches, with the fraction of span that falls in it. It runs on every
// tick, so it takes the caller's buffer instead of a callback.
func split(end time.Time, span time.Duration, buf []piece) []piece {
	start := end.Add(-span)
	for t := start; t.Before(end); {
		m := t.Truncate(time.Minute)
		next := m.Add(time.Minute)
		if next.After(end) {
			next = end
		}
		buf = append(buf, piece{m.Unix(), float64(next.Sub(t)) / float64(span)})
		t = next
	}
	return buf
}

// meta is a container's ledger record with the state it was made from.
type meta struct {
	ledger.Container
	running  bool
	finished time.Time
}

func metaOf(lc ledger.Container, c *container.Container) meta {
	return meta{Container: lc, running: c.Running, finished: c.FinishedAt}
}

// stateOf reports whether c is still in the state the record was made
// from; only then can the record stand with a new LastSeen.
func (m meta) stateOf(c *container.Container) bool {
	return m.running == c.Running && m.finished.Equal(c.FinishedAt) && m.Name == c.Name
}

func ledgerContainer(node string, c *container.Container, now time.Time, prev ledger.Container) ledger.Container {
	lc := ledger.Container{
		Node: node, ID: c.ID, Name: c.Name, Image: c.Image, Labels: c.Labels,
		User: c.User, Team: c.Team, Project: c.Project, GPURequest: c.GPUs.String(),
		StartedAt: c.StartedAt.UTC(), FirstSeen: prev.FirstSeen, LastSeen: now,
	}
	if lc.FirstSeen.IsZero() {
		lc.FirstSeen = now
	}
	if !c.Running && !c.FinishedAt.IsZero() {
		lc.FinishedAt = c.FinishedAt.UTC()
		code := c.ExitCode
		lc.ExitCode = &code
	}
	return lc
}

// gpuPart is the part f of a GPU's delta, as the ledger sums it, with
// util as its peak utilisation.
func gpuPart(d *meter.GPUSums, f, util float64) ledger.GPUSums {
	return ledger.GPUSums{
		Seconds:             d.Seconds * f,
		AllocatedSeconds:    d.AllocatedSeconds * f,
		IdleSeconds:         d.IdleSeconds * f,
		UsedSeconds:         d.UsedSeconds * f,
		UnattributedSeconds: d.UnattributedSeconds * f,
		EnergyJoules:        d.EnergyJoules * f,
		IdleEnergyJoules:    d.IdleEnergyJoules * f,
		PeakUtil:            util,
	}
}

// usagePart is the part f of an owner's delta on a GPU, as the ledger
// sums it. Its peak utilisation is that of the time the owner was on the
// GPU; none when it was not.
func usagePart(d *meter.Sums, f float64) ledger.Sums {
	var peak float64
	if d.PresentSeconds > 0 {
		peak = d.UsedSeconds / d.PresentSeconds * 100
	}
	return ledger.Sums{
		AllocatedSeconds:  d.AllocatedSeconds * f,
		HeldSeconds:       d.HeldSeconds * f,
		PresentSeconds:    d.PresentSeconds * f,
		UsedSeconds:       d.UsedSeconds * f,
		MemoryByteSeconds: d.MemoryByteSeconds * f,
		EnergyJoules:      d.EnergyJoules * f,
		PeakMemoryBytes:   d.PeakMemoryBytes,
		PeakUtil:          peak,
	}
}

// bound drops the oldest minutes while more rows wait than allowed.
func (r *Recorder) bound() {
	p := r.p
	over := p.rows() + r.openRows() - r.cfg.MaxRows
	if over <= 0 {
		return
	}
	minutes := map[int64]bool{}
	for k := range p.usage {
		minutes[k.minute] = true
	}
	for k := range p.gpus {
		minutes[k.minute] = true
	}
	for k := range p.containers {
		minutes[k.minute] = true
	}
	p.hotUsage, p.hotCtrs = nil, nil
	dropped := 0
	for _, m := range slices.Sorted(maps.Keys(minutes)) {
		if dropped >= over {
			break
		}
		for k := range p.usage {
			if k.minute == m {
				delete(p.usage, k)
				dropped++
			}
		}
		for k := range p.gpus {
			if k.minute == m {
				delete(p.gpus, k)
				dropped++
			}
		}
		for k := range p.containers {
			if k.minute == m {
				delete(p.containers, k)
				dropped++
			}
		}
	}
	if r.st.DroppedRows == 0 {
		r.cfg.Logger.Error("ledger unwritable for too long: dropping the oldest unwritten minutes", "max_rows", r.cfg.MaxRows)
	}
	r.st.DroppedRows += uint64(dropped)
}

func (r *Recorder) openRows() int {
	if r.open == nil {
		return 0
	}
	return r.open.rows
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

// span is the first and last minute that pending rows cover.
func (p *pending) span() (from, to time.Time) {
	first, last := int64(math.MaxInt64), int64(math.MinInt64)
	see := func(m int64) {
		first, last = min(first, m), max(last, m)
	}
	for k := range p.usage {
		see(k.minute)
	}
	for k := range p.gpus {
		see(k.minute)
	}
	for k := range p.containers {
		see(k.minute)
	}
	if first > last {
		return time.Time{}, time.Time{}
	}
	return time.Unix(first, 0).UTC(), time.Unix(last, 0).UTC()
}

// batch renders pending rows in a stable order, so that concurrent
// writers to one database take row locks in the same order.
func (r *Recorder) batch(p *pending) ledger.Batch {
	var b ledger.Batch
	if p.node != nil {
		b.Nodes = []ledger.Node{*p.node}
	}
	for _, id := range slices.Sorted(maps.Keys(p.gpuMeta)) {
		b.GPUs = append(b.GPUs, p.gpuMeta[id])
	}
	for _, id := range slices.Sorted(maps.Keys(p.meta)) {
		b.Containers = append(b.Containers, p.meta[id].Container)
	}
	// Two row numbers can stand for one owner and GPU (a row dropped by
	// retention and seen again): they become one ledger row.
	type fullKey struct {
		minute int64
		info   rowInfo
	}
	merged := make(map[fullKey]*ledger.Usage, len(p.usage))
	for k, s := range p.usage {
		info := p.rowInfo[k.row]
		fk := fullKey{k.minute, info}
		if u := merged[fk]; u != nil {
			u.Sums.Add(*s)
			continue
		}
		kind := ledger.KindNone
		switch info.owner.Kind {
		case container.OwnerContainer:
			kind = ledger.KindContainer
		case container.OwnerHost:
			kind = ledger.KindHost
		}
		merged[fk] = &ledger.Usage{Node: r.cfg.Node, Start: time.Unix(k.minute, 0).UTC(), OwnerKind: kind, OwnerID: info.owner.ID, GPU: info.gpu, Sums: *s}
	}
	for _, u := range merged {
		b.Usage = append(b.Usage, *u)
	}
	slices.SortFunc(b.Usage, func(a, c ledger.Usage) int {
		if d := a.Start.Compare(c.Start); d != 0 {
			return d
		}
		if a.OwnerKind != c.OwnerKind {
			return cmp.Compare(a.OwnerKind, c.OwnerKind)
		}
		if a.OwnerID != c.OwnerID {
			return cmp.Compare(a.OwnerID, c.OwnerID)
		}
		return cmp.Compare(a.GPU, c.GPU)
	})
	for k, s := range p.gpus {
		b.GPUUsage = append(b.GPUUsage, ledger.GPUUsage{Node: r.cfg.Node, Start: time.Unix(k.minute, 0).UTC(), GPU: k.gpu, GPUSums: *s})
	}
	slices.SortFunc(b.GPUUsage, func(a, c ledger.GPUUsage) int {
		if d := a.Start.Compare(c.Start); d != 0 {
			return d
		}
		return cmp.Compare(a.GPU, c.GPU)
	})
	for _, s := range p.containers {
		b.ContainerUsage = append(b.ContainerUsage, *s)
	}
	slices.SortFunc(b.ContainerUsage, func(a, c ledger.ContainerUsage) int {
		if d := a.Start.Compare(c.Start); d != 0 {
			return d
		}
		return cmp.Compare(a.ContainerID, c.ContainerID)
	})
	return b
}

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

var (
	descPending  = prometheus.NewDesc("gpumeter_ledger_pending_rows", "Usage rows summed in memory and not yet written to the ledger.", nil, nil)
	descFlushes  = prometheus.NewDesc("gpumeter_ledger_flushes_total", "Batches written to the ledger.", nil, nil)
	descErrors   = prometheus.NewDesc("gpumeter_ledger_flush_errors_total", "Batches the ledger refused; their rows stay in memory and go out with the next batch.", nil, nil)
	descDropped  = prometheus.NewDesc("gpumeter_ledger_dropped_rows_total", "Rows dropped because the ledger stayed unwritable past ledger.max_pending_rows.", nil, nil)
	descUp       = prometheus.NewDesc("gpumeter_ledger_up", "1 when the last write to the ledger succeeded.", nil, nil)
	descLast     = prometheus.NewDesc("gpumeter_ledger_last_flush_timestamp_seconds", "When the last good write to the ledger ended.", nil, nil)
	descDuration = prometheus.NewDesc("gpumeter_ledger_write_duration_seconds", "How long the last write to the ledger took.", nil, nil)
)

// Describe implements prometheus.Collector.
func (r *Recorder) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPending, descFlushes, descErrors, descDropped, descUp, descLast, descDuration} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (r *Recorder) Collect(ch chan<- prometheus.Metric) {
	s := r.Status()
	up := 1.0
	if s.LastError != "" {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(s.PendingRows))
	ch <- prometheus.MustNewConstMetric(descFlushes, prometheus.CounterValue, float64(s.Flushes))
	ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(s.FlushErrors))
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(s.DroppedRows))
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
	if !s.LastFlush.IsZero() {
		ch <- prometheus.MustNewConstMetric(descLast, prometheus.GaugeValue, float64(s.LastFlush.UnixNano())/1e9)
	}
	ch <- prometheus.MustNewConstMetric(descDuration, prometheus.GaugeValue, s.WriteSeconds)
}
