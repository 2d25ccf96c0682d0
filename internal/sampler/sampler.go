package sampler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// Named gives a source a name for health metrics and logs.
type Named struct {
	Name string
	Inventory
}

// Config wires a sampler.
type Config struct {
	Node        string
	Interval    time.Duration
	GPUs        GPUSource
	GPUName     string // name of the GPU source in health metrics, e.g. "nvml"
	Inventories []Named
	// Resolvers are asked in order; the first that knows a PID wins.
	Resolvers []ProcessResolver
	Meter     *meter.Meter
	Logger    *slog.Logger
	// OnTick, when set, receives every tick after it is published. It runs
	// on the sampling goroutine and must not block.
	OnTick func(*Tick)
}

// SourceHealth is how one source did at the latest tick.
type SourceHealth struct {
	Name     string
	OK       bool
	Duration time.Duration
	Err      string
	Errors   uint64 // failed reads since start
}

// Health describes the sampler itself at the latest tick.
type Health struct {
	Sources      []SourceHealth
	TickDuration time.Duration
	Ticks        uint64
	Missed       uint64 // ticks that could not run on time
	// GPUReadErrors counts failed reads per GPU UUID (or index:N).
	GPUReadErrors map[string]uint64
	// Unresolved is how many GPU processes no resolver knew this tick;
	// ResolveErrors counts resolver failures since start.
	Unresolved    int
	ResolveErrors uint64
}

// Tick is the meter's tick with the node's name and the sampler's health.
type Tick struct {
	*meter.Tick
	Node string
	// Owners[i][j] owns Sample.Devices[i].Processes[j].
	Owners [][]container.Owner
	Health Health
}

// Pruner is implemented by resolvers that cache per PID.
type Pruner interface {
	Prune(keep func(pid uint32) bool)
}

// Sampler runs the sources on a clock and publishes ticks.
type Sampler struct {
	cfg    Config
	latest atomic.Pointer[Tick]

	mu        sync.Mutex // serialises Step
	health    Health
	srcErrs   map[string]uint64
	srcFailed map[string]bool
	owners    map[uint32]container.Owner
	live      map[uint32]bool
	seen      map[string]bool // container IDs listed this tick
	// unique are the IDs of the last single list found to name no
	// container twice, in its order: a list with the same IDs needs
	// no check, which spares hashing every ID on every tick.
	unique []string
	// spares are recycled ticks' Owners, reused by Step; a channel, as
	// Recycle may run beside Step.
	spares chan [][]container.Owner
}

// New returns a sampler; it reads nothing until Step or Run.
func New(cfg Config) *Sampler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Meter == nil {
		cfg.Meter = meter.New(meter.Config{})
	}
	if cfg.GPUName == "" {
		cfg.GPUName = "gpu"
	}
	return &Sampler{
		cfg:       cfg,
		srcErrs:   map[string]uint64{},
		srcFailed: map[string]bool{},
		owners:    map[uint32]container.Owner{},
		live:      map[uint32]bool{},
		seen:      map[string]bool{},
		spares:    make(chan [][]container.Owner, spareTicks),
		health:    Health{GPUReadErrors: map[string]uint64{}},
	}
}

// Latest returns the newest tick, or nil before the first one. It never
// blocks on a source.
func (s *Sampler) Latest() *Tick { return s.latest.Load() }

// Run samples every Interval until ctx ends.
func (s *Sampler) Run(ctx context.Context) error {
	interval := s.cfg.Interval
	if interval <= 0 {
		interval = time.Second
	}
	s.Step(ctx, time.Now())
	next := time.Now().Add(interval)
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		now := time.Now()
		if late := now.Sub(next); late >= interval {
			skipped := uint64(late / interval)
			s.mu.Lock()
			s.health.Missed += skipped
			s.mu.Unlock()
			next = next.Add(time.Duration(skipped) * interval)
		}
		s.Step(ctx, now)
		next = next.Add(interval)
		timer.Reset(time.Until(next))
	}
}

// Step takes one sample at now, meters it and publishes the tick. A source
// that fails is recorded in the tick's health and the rest goes on; when
// the GPU source reads nothing at all, the previous tick's figures stay
// published with the new health.
func (s *Sampler) Step(ctx context.Context, now time.Time) *Tick {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	var sources []SourceHealth

	t0 := time.Now()
	sample, gerr := s.cfg.GPUs.Read(ctx, now)
	sources = append(sources, s.record(s.cfg.GPUName, time.Since(t0), gerr))

	ctrs := s.containers(ctx, now, &sources)

	if gerr != nil && len(sample.Devices) == 0 {
		prev := s.latest.Load()
		s.health.Sources = sources
		s.health.TickDuration = time.Since(start)
		s.health.Ticks++
		t := &Tick{Tick: &meter.Tick{Time: now}, Node: s.cfg.Node, Health: s.snapshotHealth()}
		if prev != nil {
			t.Tick, t.Owners = prev.Tick, prev.Owners
		}
		s.publish(t)
		return t
	}

	clear(s.owners)
	unresolved := 0
	owners := s.spareOwners(len(sample.Devices))
	for i := range sample.Devices {
		d := &sample.Devices[i]
		if d.Err != nil {
			s.health.GPUReadErrors[meter.GPUKey(d.UUID, d.Index)]++
			owners[i] = nil
			continue
		}
		owners[i] = grow(owners[i], len(d.Processes))
		for j, p := range d.Processes {
			o, ok := s.owners[p.PID]
			if !ok {
				o, ok = s.resolve(p.PID)
				if !ok {
					unresolved++
				}
				s.owners[p.PID] = o
			}
			owners[i][j] = o
		}
	}
	if s.health.Ticks%60 == 0 {
		s.prune()
	}

	mt := s.cfg.Meter.Step(meter.Input{Time: now, Sample: sample, Owners: owners, Containers: ctrs})
	s.health.Sources = sources
	s.health.Unresolved = unresolved
	s.health.Ticks++
	s.health.TickDuration = time.Since(start)
	t := &Tick{Tick: mt, Node: s.cfg.Node, Owners: owners, Health: s.snapshotHealth()}
	s.publish(t)
	return t
}

// containers lists every inventory's containers, each container once: the
// first inventory that lists an ID describes it. The usual single
// inventory's list is used as it is when it names no container twice.
func (s *Sampler) containers(ctx context.Context, now time.Time, sources *[]SourceHealth) []container.Container {
	lists := make([][]container.Container, len(s.cfg.Inventories))
	n := 0
	for i, inv := range s.cfg.Inventories {
		t0 := time.Now()
		list, err := inv.Containers(ctx, now)
		*sources = append(*sources, s.record(inv.Name, time.Since(t0), err))
		lists[i] = list
		n += len(list)
	}
	if len(lists) == 1 && s.isUnique(lists[0]) {
		return lists[0]
	}
	clear(s.seen)
	ctrs := make([]container.Container, 0, n)
	for _, list := range lists {
		for i := range list {
			if id := list[i].ID; !s.seen[id] {
				s.seen[id] = true
				ctrs = append(ctrs, list[i])
			}
		}
	}
	return ctrs
}

// isUnique reports whether list names no container twice.
func (s *Sampler) isUnique(list []container.Container) bool {
	if len(list) == len(s.unique) {
		same := true
		for i := range list {
			if list[i].ID != s.unique[i] {
				same = false
				break
			}
		}
		if same {
			return true
		}
	}
	clear(s.seen)
	s.unique = s.unique[:0]
	for i := range list {
		id := list[i].ID
		if s.seen[id] {
			s.unique = s.unique[:0]
			return false
		}
		s.seen[id] = true
		s.unique = append(s.unique, id)
	}
	return true
}

func (s *Sampler) publish(t *Tick) {
	s.latest.Store(t)
	if s.cfg.OnTick != nil {
		s.cfg.OnTick(t)
	}
}

// resolve asks the resolvers in order. A resolver error is counted and
// the next resolver is tried.
func (s *Sampler) resolve(pid uint32) (container.Owner, bool) {
	for _, r := range s.cfg.Resolvers {
		o, ok, err := r.Resolve(pid)
		if err != nil {
			s.health.ResolveErrors++
			s.cfg.Logger.Debug("resolve process", "pid", pid, "err", err)
			continue
		}
		if ok {
			return o, true
		}
	}
	return container.Owner{}, false
}

func (s *Sampler) prune() {
	clear(s.live)
	for pid := range s.owners {
		s.live[pid] = true
	}
	for _, r := range s.cfg.Resolvers {
		if p, ok := r.(Pruner); ok {
			p.Prune(func(pid uint32) bool { return s.live[pid] })
		}
	}
}

// record notes a source's result and logs only changes of state, so a
// source that stays down does not flood the log.
func (s *Sampler) record(name string, d time.Duration, err error) SourceHealth {
	h := SourceHealth{Name: name, OK: err == nil, Duration: d}
	if err != nil && errors.Is(err, container.ErrNotConnected) && !s.srcFailed[name] {
		// At start an inventory that is still connecting is no failure:
		// a warning now and "recovered" a second later are noise. The
		// first real failure is warned of.
		h.Err = err.Error()
		s.cfg.Logger.Debug("source not connected yet", "source", name, "err", err)
		return h
	}
	if err != nil {
		s.srcErrs[name]++
		h.Err = err.Error()
		if !s.srcFailed[name] {
			s.cfg.Logger.Warn("source failed", "source", name, "err", err)
		}
	} else if s.srcFailed[name] {
		s.cfg.Logger.Info("source recovered", "source", name)
	}
	s.srcFailed[name] = err != nil
	h.Errors = s.srcErrs[name]
	return h
}

func (s *Sampler) snapshotHealth() Health {
	h := s.health
	h.GPUReadErrors = make(map[string]uint64, len(s.health.GPUReadErrors))
	for k, v := range s.health.GPUReadErrors {
		h.GPUReadErrors[k] = v
	}
	h.Sources = append([]SourceHealth(nil), s.health.Sources...)
	return h
}

// ErrNoTick is returned by readers that need a tick before the first one.
var ErrNoTick = errors.New("no sample taken yet")
