package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

func newWhatif() *cobra.Command {
	var (
		lf                    ledgerFlags
		req                   report.Request
		modes, fleet, format  string
		share                 int
		memFraction, overhead float64
		target                float64
		noSearch              bool
	)
	cmd := &cobra.Command{
		Use:   "whatif",
		Short: "Replay the window's measured use under exclusive GPUs, time-slicing or memory packing, or another GPU count",
		Long: `Replay the window's jobs and GPU-holding containers from the ledger through
the queue's own scheduler on a virtual clock, once per mode, and print the
modes side by side with what really happened: mean GPU utilisation (used
over capacity until the last holder ends), GPU-hours held, queue wait
p50/p95/max, makespan, jobs slowed and by how much, the GPUs each mode
needs to keep the measured p95 wait, and the cost of the hours held.

Each holder keeps its measured SM use and memory per minute and its
measured run time, and arrives as it did: a queue job when it was
submitted, a container started by hand when it started (its wait is not
counted). Modes:

  exclusive  whole GPUs, as the queue gives them today; it reproduces the
             window's measured utilisation and waits
  timeslice  up to --share holders take turns on one GPU; while they ask
             for more than 100 % SM together each is slowed to fit, and by
             --switch-overhead while it shares with another that computes
  memory     one-GPU holders packed by their measured peak memory within
             --memory-fraction of a GPU (the queue's --gpu-memory rule);
             progress as in timeslice

--fleet-gpus N, +N or -N replays every mode again on that many GPUs per
node. The figures are a model of measured use, not a forecast; the output
names the model's assumptions, and where the ledger keeps no minutes for
part of the window (retention) it says so and replays the rest.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, lf.configPath)
			if err != nil {
				return err
			}
			if !slices.Contains(whatif.Formats(), format) {
				return fmt.Errorf("--format: %q is not one of %s", format, strings.Join(whatif.Formats(), ", "))
			}
			ms, err := whatif.ParseModes(modes)
			if err != nil {
				return fmt.Errorf("--mode: %w", err)
			}
			fl, err := whatif.ParseFleet(fleet)
			if err != nil {
				return fmt.Errorf("--fleet-gpus: %w", err)
			}
			if err := lf.window(&req); err != nil {
				return err
			}
			if err := validate(&req); err != nil {
				return err
			}
			sched, err := whatif.SchedConfig(cfg.Queue)
			if err != nil {
				return fmt.Errorf("config: %w", err)
			}
			if share < 1 {
				return fmt.Errorf("--share: %d is not between 1 and 64", share)
			}
			if cmd.Flags().Changed("target") {
				sched.TargetUtilization = target
			}
			if !cmd.Flags().Changed("memory-fraction") {
				memFraction = cfg.Queue.SharedMemoryFraction
			}
			opts := whatif.Options{Modes: ms, Fleet: fl, NoSearch: noSearch,
				Params: whatif.Params{Share: share, MemoryFraction: memFraction, SwitchOverhead: overhead, Sched: sched}}
			if err := opts.Validate(); err != nil {
				return err
			}
			store, prices, err := lf.openPriced(cmd, &cfg)
			if err != nil {
				return err
			}
			defer store.Close()
			opts.Prices = prices
			h, err := whatif.Load(cmd.Context(), store, *req.From, *req.To, req.Node)
			if err != nil {
				return err
			}
			res, err := whatif.Run(h, opts)
			if err != nil {
				return err
			}
			return writeWhatif(cmd.OutOrStdout(), res, format)
		},
	}
	lf.register(cmd, "the queue's settings and prices")
	f := cmd.Flags()
	f.StringVar(&req.Node, "node", "", "only this node")
	f.StringVar(&modes, "mode", "exclusive,timeslice,memory", "modes to replay, comma-separated: exclusive, timeslice, memory")
	f.StringVar(&fleet, "fleet-gpus", "", "also replay on N GPUs per node, or +N / -N more or fewer than measured")
	f.IntVar(&share, "share", 2, "timeslice: holders that may share one GPU (1-64)")
	f.Float64Var(&memFraction, "memory-fraction", 0, "memory: fraction (0, 1] of a GPU's memory the packed holders may fill (default queue.shared_memory_fraction)")
	f.Float64Var(&overhead, "switch-overhead", whatif.DefaultSwitchOverhead, "timeslice and memory: fraction [0, 1) of its time a holder loses while it shares a GPU with another that computes")
	f.Float64Var(&target, "target", 0.7, "the utilisation (0, 1] placement by target places towards (queue.target_utilization), where queue.placement is target")
	f.BoolVar(&noSearch, "no-search", false, "skip the search for the GPUs that keep the measured p95 wait (one replay per count tried)")
	f.StringVar(&format, "format", "table", "output: table, csv or json")
	completeValues(cmd, "format", "table", "csv", "json")
	completeValues(cmd, "mode", "exclusive", "timeslice", "memory")
	return cmd
}

func writeWhatif(w io.Writer, res *whatif.Result, format string) error {
	switch format {
	case "json":
		return res.WriteJSON(w)
	case "csv":
		return res.WriteCSV(w)
	}
	return res.WriteTable(w)
}
