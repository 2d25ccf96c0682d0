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

func newAdvise() *cobra.Command {
	var (
		lf                 ledgerFlags
		req                report.Request
		user, team, format string
	)
	cmd := &cobra.Command{
		Use:   "advise",
		Short: "What each user should ask for, from their measured use: GPUs, GPU memory, time limit, idle policy",
		Long: `Read the window's measured use from the ledger, per user and per group of
similar jobs (the same name pattern, numbers made a wildcard, image and GPU
count), and say what to ask for, with the evidence, the GPU-hours and
money it would have saved over the window, and the flag to use:

  gpus          asked for N GPUs, computed on k at p95 of the minutes: --gpus k
  gpu_memory    one GPU, a peak of M (at most half of a shared GPU's usable
                memory) and SM use under 50 %: --gpu-memory M (M rounded
                up to a GiB) on a GPU marked for sharing
  time_limit    queue jobs whose limit is at least twice their p95 run, or
                that have none: --time-limit 1.25 × the p95 run
  idle_policy   held GPUs idle at least half the time, in stretches longer
                than the idle rule's window: the idle rule with a stop action
  data_loading  efficiency under 30 % with more than half the GPU's memory
                held and stalls: a pointer to the input pipeline, no flag

Exit status 0 with or without advice, 2 when the window is wrong.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, lf.configPath)
			if err != nil {
				return err
			}
			if !slices.Contains(whatif.Formats(), format) {
				return fmt.Errorf("--format: %q is not one of %s", format, strings.Join(whatif.Formats(), ", "))
			}
			if user != "" && team != "" {
				return fmt.Errorf("--user and --team exclude each other: give one")
			}
			if err := lf.window(&req); err != nil {
				return badWindow(cmd, err)
			}
			if err := validate(&req); err != nil {
				return badWindow(cmd, err)
			}
			store, prices, err := lf.openPriced(cmd, &cfg)
			if err != nil {
				return err
			}
			defer store.Close()
			h, err := whatif.Load(cmd.Context(), store, *req.From, *req.To, req.Node)
			if err != nil {
				return err
			}
			rep := whatif.Advise(h, whatif.AdviseOptions{User: user, Team: team, Prices: prices,
				MemoryFraction: cfg.Queue.SharedMemoryFraction, IdleWindow: cfg.Waste.Idle.Window, IdleGrace: cfg.Waste.Idle.Grace})
			return writeAdvice(cmd.OutOrStdout(), rep, format)
		},
	}
	lf.register(cmd, "prices and the idle rule")
	f := cmd.Flags()
	f.StringVar(&req.Node, "node", "", "only this node")
	f.StringVar(&user, "user", "", "only this user's advice")
	f.StringVar(&team, "team", "", "only this team's advice")
	f.StringVar(&format, "format", "table", "output: table, csv or json")
	completeValues(cmd, "format", "table", "csv", "json")
	return cmd
}

// badWindow says what is wrong with the window and exits 2.
func badWindow(cmd *cobra.Command, err error) error {
	fmt.Fprintln(cmd.ErrOrStderr(), "gpumeter:", err)
	return exitError(2)
}

func writeAdvice(w io.Writer, rep *whatif.AdviceReport, format string) error {
	switch format {
	case "json":
		return rep.WriteJSON(w)
	case "csv":
		return rep.WriteCSV(w)
	}
	return rep.WriteTable(w)
}
