package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/agent"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/backend"
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
			if err := agent.CanSimulate(sc); err != nil {
				return err
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

// simulate plays sc into store and prints what it played; where names
// the ledger, a file or postgresLedger.
func simulate(ctx context.Context, out io.Writer, sc *sim.Scenario, store ledger.Ledger, where string) error {
	r, err := agent.Simulate(ctx, sc, store, where)
	if err != nil {
		return err
	}
	end := sc.Start.Add(sc.Duration)
	g := r.GPU
	fmt.Fprintf(out, "simulated %s on node %s: %d GPUs, %d containers, %d host processes\n", sc.Duration, sc.Node, len(sc.GPUs), len(sc.Containers), len(sc.HostProcesses))
	fmt.Fprintf(out, "window      %s .. %s\n", sc.Start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "ticks       %d at %s, in %s (%.0f ticks/s)\n", r.Ticks, sc.Interval, r.Took.Round(time.Millisecond), float64(r.Ticks)/r.Took.Seconds())
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
