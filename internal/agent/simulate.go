package agent

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/record"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// simulateFlushEvery is how many virtual seconds of rows are summed in
// memory before they are written; it bounds memory, not correctness.
const simulateFlushEvery = time.Hour

// simulateLeaseFlush is the flush interval whose lease takeover simulate
// uses: the agent's default, as it takes a lease like an agent.
const simulateLeaseFlush = 5 * time.Second

// Simulation is what Simulate played.
type Simulation struct {
	Ticks int           // samples taken, the one closing the last interval included
	Took  time.Duration // wall time of the playing and the writing
	// GPU is the sum of every GPU's totals at the end.
	GPU meter.GPUSums
}

// CanSimulate returns an error when sc cannot be played on a virtual
// clock: a container that a real process plays (pid:) runs on the wall
// clock, which serve --sim follows. Call it before opening a ledger for
// Simulate, so that a refused scenario leaves none behind.
func CanSimulate(sc *sim.Scenario) error {
	for _, c := range sc.Containers {
		if c.PID != 0 {
			return fmt.Errorf("%s: container %s has pid: %d; a virtual clock cannot follow a real process, use serve --sim", sc.Name, c.Name, c.PID)
		}
	}
	return nil
}

// Simulate plays sc from its start to its end on a virtual clock, as fast
// as the CPU allows, through the sampler, meter and recorder that serve
// runs, into store, under the node's lease as an agent writes. where
// names the ledger in errors. It refuses a ledger that already holds
// usage of the scenario's node in its window, which a second run would
// count twice. The same scenario always gives the same ledger.
func Simulate(ctx context.Context, sc *sim.Scenario, store ledger.Ledger, where string) (_ Simulation, err error) {
	if err := CanSimulate(sc); err != nil {
		return Simulation{}, err
	}
	end := sc.Start.Add(sc.Duration)
	existing, err := store.GPUs(ctx, ledger.Filter{From: ledger.Minute(sc.Start), To: ledger.Minute(end.Add(time.Minute - 1)), Node: sc.Node})
	if err != nil {
		return Simulation{}, err
	}
	if len(existing) > 0 {
		return Simulation{}, fmt.Errorf("%s already holds usage of node %s between %s and %s: simulating again would count it twice; use another --db (or another database in --dsn)", where, sc.Node, sc.Start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	// A simulation writes its node's rows as an agent does, under the
	// node's lease: never beside a live agent of the same node.
	lease, err := record.Acquire(ctx, store, sc.Node, record.DefaultLeaseTakeover(simulateLeaseFlush))
	if err != nil {
		return Simulation{}, err
	}
	defer func() {
		release, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if rerr := record.Release(release, store, lease); rerr != nil && err == nil {
			err = rerr
		}
	}()
	// The scenario's queue jobs go to the job store first, for their
	// IDs, and are placed by the queue's scheduler; each started one is
	// played as its container.
	var jobs []*simJob
	if len(sc.Jobs) > 0 {
		if jobs, err = submitSimJobs(ctx, sc, store); err != nil {
			return Simulation{}, err
		}
		sc = placeSimJobs(sc, jobs)
	}
	// A batch run: trade memory for fewer garbage collections.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	// The scenario's node and idle power, on the clock play steps.
	s := sampler.New(sampler.WithSimulated(sampler.Config{
		Node:  sc.Node,
		Meter: meter.New(meter.Config{IdleWatts: sc.IdleWatts()}),
	}, sim.NewSource(sc, false, sim.WithReusedLists())))
	wb := newWriteBehind(ctx, store)
	rec := record.New(record.Config{Store: wb, Node: sc.Node, MaxRows: 1 << 30, Lease: lease})

	began := time.Now()
	ticks, err := play(ctx, s, rec, sc.Start, end, sc.Interval)
	if werr := wb.close(); err == nil {
		err = werr
	}
	// The run is over, and with it every hour it played: its last ones
	// are compacted as a writer compacts the hours its batches close.
	if err == nil {
		err = store.CompactMinutes(ctx, sc.Node, end)
	}
	if err == nil && len(jobs) > 0 {
		err = recordSimJobs(ctx, sc, store, jobs)
	}
	if err != nil {
		return Simulation{}, err
	}
	sum := Simulation{Ticks: ticks, Took: time.Since(began)}
	for _, g := range s.Latest().GPUs {
		sum.GPU.Add(g.Total)
	}
	return sum, nil
}

// play steps the sampler from start to end on this goroutine and sums the
// ticks into rec on another, flushing after every simulateFlushEvery, so
// that a simulated day keeps two cores busy. rec sees the same ticks in
// the same order, and flushes after the same ones, as when one goroutine
// did both: the ledger is the same to the last digit. It returns how many
// ticks it took.
func play(ctx context.Context, s *sampler.Sampler, rec *record.Recorder, start, end time.Time, interval time.Duration) (int, error) {
	type step struct {
		at   time.Time
		tick *sampler.Tick
	}
	// Ticks go over in groups, so that the goroutines wake each other
	// once a group rather than once a tick (that took 1 s of CPU a
	// simulated day). The slack is small: a tick of the benchmark load
	// holds about 100 KB, and the GC lets the heap grow to five times
	// what is live.
	const group = 16
	steps := make(chan []step, 1)
	failed := make(chan struct{})
	recorded := make(chan error, 1)
	go func() {
		var err error
		nextFlush := start.Add(simulateFlushEvery)
		for g := range steps {
			for _, st := range g {
				if err != nil {
					break
				}
				rec.Add(st.tick)
				// The recorder is the only reader of a simulation's
				// ticks and keeps nothing of them.
				s.Recycle(st.tick)
				if !st.at.Before(nextFlush) {
					if err = rec.Flush(ctx); err != nil {
						close(failed)
					}
					nextFlush = nextFlush.Add(simulateFlushEvery)
				}
			}
		}
		if err == nil && ctx.Err() == nil {
			err = rec.Flush(ctx)
		}
		recorded <- err
	}()

	ticks := 0
	var err error
	g := make([]step, 0, group)
	// The sample at the end closes the last interval: every container
	// has ended there, so it books nothing new.
loop:
	for t := start; !t.After(end); t = t.Add(interval) {
		if err = ctx.Err(); err != nil {
			break
		}
		g = append(g, step{t, s.Step(ctx, t)})
		ticks++
		if len(g) < group && !t.Add(interval).After(end) {
			continue
		}
		select {
		case steps <- g:
			g = make([]step, 0, group)
		case <-failed:
			break loop
		}
	}
	close(steps)
	if rerr := <-recorded; err == nil {
		err = rerr
	}
	return ticks, err
}

// writeBehind is a ledger store whose Write hands each batch to one
// goroutine that writes them in order, so that simulating goes on while
// the ledger writes. After a write fails nothing more is written, and the
// error comes back from the next Write and from close.
type writeBehind struct {
	ledger.Store
	batches chan ledger.Batch
	done    chan struct{}

	mu  sync.Mutex
	err error
}

func newWriteBehind(ctx context.Context, store ledger.Store) *writeBehind {
	w := &writeBehind{Store: store, batches: make(chan ledger.Batch), done: make(chan struct{})}
	// When ctx ends, a batch being written is finished (it takes a
	// fraction of a second) and no other is started. Run under a context
	// that can end, each SQLite statement costs the driver a goroutine
	// of its own to interrupt it: some 20,000 a simulated hour here.
	wctx := context.WithoutCancel(ctx)
	go func() {
		defer close(w.done)
		for b := range w.batches {
			if w.failed() != nil {
				continue
			}
			err := ctx.Err()
			if err == nil {
				err = w.Store.Write(wctx, b)
			}
			if err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *writeBehind) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Write queues b, waiting while the previous batch is still being written.
func (w *writeBehind) Write(ctx context.Context, b ledger.Batch) error {
	if err := w.failed(); err != nil {
		return err
	}
	select {
	case w.batches <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close waits for every queued batch to be written.
func (w *writeBehind) close() error {
	close(w.batches)
	<-w.done
	return w.failed()
}
