package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/waste"
)

func newWaste() *cobra.Command {
	var (
		lf     ledgerFlags
		req    report.Request
		format string
	)
	cmd := &cobra.Command{
		Use:   "waste",
		Short: "GPU time held and not used: idle, stalled, over-allocated, too old, inefficient, outside containers",
		Long: `Apply the waste rules to the ledger over a window and list what they find:
containers idle or stalled on their GPUs, holding more GPUs than they use,
running past a maximum age or with a low efficiency, and GPU use outside
containers; each with the evidence, since when, and the GPU-hours and cost
wasted. Reads the ledger as report does; the rules (waste.* settings, also
as flags here) and prices come from the config. A window of up to two days
is judged minute by minute, a longer one hour by hour.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, lf.configPath)
			if err != nil {
				return err
			}
			if !slices.Contains(waste.Formats(), format) {
				return fmt.Errorf("--format: %q is not one of %s", format, strings.Join(waste.Formats(), ", "))
			}
			if err := lf.window(&req); err != nil {
				return err
			}
			if err := validate(&req); err != nil {
				return err
			}
			if errs := cfg.WasteErrors(); len(errs) > 0 {
				return fmt.Errorf("invalid config:\n%w", errors.Join(errs...))
			}
			store, cost, err := lf.openPriced(cmd.Context(), &cfg)
			if err != nil {
				return err
			}
			defer store.Close()
			rep, err := waste.Evaluate(cmd.Context(), store, waste.Options{From: req.From, To: req.To, Node: req.Node, Rules: cfg.Waste, Cost: cost})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch format {
			case "json":
				return rep.WriteJSON(w)
			case "csv":
				return rep.WriteCSV(w)
			default:
				return rep.WriteTable(w)
			}
		},
	}
	lf.register(cmd, "rules and prices")
	f := cmd.Flags()
	f.StringVar(&req.Node, "node", "", "only this node")
	f.StringVar(&format, "format", "table", "output: table, csv or json")
	for _, k := range config.Keys() {
		if strings.HasPrefix(k.Name, "waste.") && k.Name != "waste.enabled" {
			keyFlag(f, k)
		}
	}
	return cmd
}
