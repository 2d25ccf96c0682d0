package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/backend"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/record"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sim"
)

func newSimulate() *cobra.Command {
	var scenario, db, dsn, cpuProfile, memProfile string
	cmd := &cobra.Command{
		Use:   "simulate --scenario FILE [--db FILE | --dsn DSN]",
		Short: "Play a scenario on a virtual clock into a ledger, as fast as the CPU allows",
		Long: `Play a scenario through the same sampler, meter and ledger code as serve,
on a virtual clock and as fast as the CPU allows, then print a summary. The
same scenario always gives the same ledger, so reports of it are
reproducible. With no --db or --dsn the ledger is FILE's name with .db in
the current directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if scenario == "" {
				return errors.New("--scenario: a scenario file is needed")
			}
			if db != "" && dsn != "" {
				return errors.New("--db and --dsn exclude each other")
			}
			sc, err := sim.Load(scenario)
			if err != nil {
				return err
			}
			for _, c := range sc.Containers {
				if c.PID != 0 {
					return fmt.Errorf("%s: container %s has pid: %d; a virtual clock cannot follow a real process, use serve --sim", scenario, c.Name, c.PID)
				}
			}
			if db == "" && dsn == "" {
				db = strings.TrimSuffix(filepath.Base(scenario), filepath.Ext(scenario)) + ".db"
			}
			store, err := backend.Open(cmd.Context(), dsn, db, true)
			if err != nil {
				return err
			}
			defer store.Close()
			where := db
			if dsn != "" {
				where = postgresLedger
			}
			stop, err := startProfiles(cpuProfile, memProfile)
			if err != nil {
				return err
			}
			err = simulate(cmd.Context(), cmd.OutOrStdout(), sc, store, where)
			return errors.Join(err, stop())
		},
	}
	cmd.Flags().StringVar(&scenario, "scenario", "", "scenario file (see docs/scenario.md)")
	cmd.Flags().StringVar(&db, "db", "", "SQLite ledger to write")
	cmd.Flags().StringVar(&dsn, "dsn", "", "PostgreSQL ledger to write")
	// For whoever tunes simulate (see BENCHMARKS.md), not for operators:
	// hidden from --help.
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the run to FILE (go tool pprof)")
	cmd.Flags().StringVar(&memProfile, "memprofile", "", "write a heap profile (allocations) at the end of the run to FILE")
	cmd.Flags().MarkHidden("cpuprofile")
	cmd.Flags().MarkHidden("memprofile")
	return cmd
}

// startProfiles starts a CPU profile into cpu, when named; the function it
// returns stops it and writes a heap profile into mem, when named. The
// profiles cover the simulation, not the loading of the scenario.
func startProfiles(cpu, mem string) (stop func() error, err error) {
	var cpuFile *os.File
	if cpu != "" {
		if cpuFile, err = os.Create(cpu); err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(cpuFile); err != nil {
			cpuFile.Close()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	return func() error {
		var errs []error
		if cpuFile != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpuFile.Close())
		}
		if mem != "" {
			f, err := os.Create(mem)
			if err != nil {
				return errors.Join(append(errs, fmt.Errorf("--memprofile: %w", err))...)
			}
			runtime.GC() // the heap profile is as of the last collection
			errs = append(errs, pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
		}
		return errors.Join(errs...)
	}, nil
}

const postgresLedger = "the PostgreSQL ledger"

// simulateFlushEvery is how many virtual seconds of rows are summed in
// memory before they are written; it bounds memory, not correctness.
const simulateFlushEvery = time.Hour

// simulateLeaseFlush is the flush interval whose lease takeover simulate
// uses: the agent's default, as it takes a lease like an agent.
const simulateLeaseFlush = 5 * time.Second

func simulate(ctx context.Context, out io.Writer, sc *sim.Scenario, store ledger.Store, where string) (err error) {
	end := sc.Start.Add(sc.Duration)
	existing, err := store.GPUs(ctx, ledger.Filter{From: ledger.Minute(sc.Start), To: ledger.Minute(end.Add(time.Minute - 1)), Node: sc.Node})
	if err != nil {
		return err
	}
	if len(existing) > 0 {
		return fmt.Errorf("%s already holds usage of node %s between %s and %s: simulating again would count it twice; use another --db (or another database in --dsn)", where, sc.Node, sc.Start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	// A simulation writes its node's rows as an agent does, under the
	// node's lease: never beside a live agent of the same node.
	lease, err := record.Acquire(ctx, store, sc.Node, record.DefaultLeaseTakeover(simulateLeaseFlush))
	if err != nil {
		return err
	}
	defer func() {
		release, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if rerr := record.Release(release, store, lease); rerr != nil && err == nil {
			err = rerr
		}
	}()
	// A batch run: trade memory for fewer garbage collections.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	src := sim.NewSource(sc, false)
	s := sampler.New(sampler.Config{
		Node:        sc.Node,
		GPUs:        src,
		GPUName:     "sim",
		Inventories: []sampler.Named{{Name: "sim-containers", Inventory: src}},
		Resolvers:   []sampler.ProcessResolver{src},
		Meter:       meter.New(meter.Config{IdleWatts: sc.IdleWatts()}),
	})
	wb := newWriteBehind(ctx, store)
	rec := record.New(record.Config{Store: wb, Node: sc.Node, MaxRows: 1 << 30, Lease: lease})

	began := time.Now()
	ticks, err := play(ctx, s, rec, sc.Start, end, sc.Interval)
	if werr := wb.close(); err == nil {
		err = werr
	}
	if err != nil {
		return err
	}
	took := time.Since(began)

	last := s.Latest()
	var g meter.GPUSums
	for _, gt := range last.GPUs {
		g.Add(gt.Total)
	}
	fmt.Fprintf(out, "simulated %s on node %s: %d GPUs, %d containers, %d host processes\n", sc.Duration, sc.Node, len(sc.GPUs), len(sc.Containers), len(sc.HostProcesses))
	fmt.Fprintf(out, "window      %s .. %s\n", sc.Start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "ticks       %d at %s, in %s (%.0f ticks/s)\n", ticks, sc.Interval, took.Round(time.Millisecond), float64(ticks)/took.Seconds())
	fmt.Fprintf(out, "GPU-hours   %.3f metered, %.3f allocated, %.3f used, %.3f idle (nobody held the GPU)\n", g.Seconds/3600, g.AllocatedSeconds/3600, g.UsedSeconds/3600, g.IdleSeconds/3600)
	fmt.Fprintf(out, "energy      %.3f kWh, of which %.3f kWh idle pool\n", g.EnergyJoules/3.6e6, g.IdleEnergyJoules/3.6e6)
	fmt.Fprintf(out, "ledger      %s\n", where)
	flag := "--db " + where
	if where == postgresLedger {
		flag = "--dsn DSN"
	}
	fmt.Fprintf(out, "report      gpumeter report %s --from %s --to %s --by user\n", flag, sc.Start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))
	return nil
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
