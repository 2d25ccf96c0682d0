package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/report"
)

func newReport() *cobra.Command {
	var (
		lf     ledgerFlags
		labels []string
		req    report.Request
	)
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Usage and cost by user, team, project, container, image, GPU or node",
		Long: `Report GPU usage and cost over a window from the ledger: allocated, present
and used GPU-hours, efficiency, peak GPU memory, energy, CPU and RAM, cost,
the idle pool and totals that reconcile with the host. Reads the agent's
ledger (data_dir or ledger.dsn from the config) unless --db or --dsn names
another, such as one that simulate wrote. Prices come from the config's
cost section.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, lf.configPath)
			if err != nil {
				return err
			}
			if err := lf.window(&req); err != nil {
				return err
			}
			for _, l := range labels {
				k, v, err := report.ParseLabel(l)
				if err != nil {
					return fmt.Errorf("--label: %w", err)
				}
				if req.Labels == nil {
					req.Labels = map[string]string{}
				}
				req.Labels[k] = v
			}
			if err := validate(&req); err != nil {
				return err
			}
			store, cost, err := lf.openPriced(cmd.Context(), &cfg)
			if err != nil {
				return err
			}
			defer store.Close()
			rep, err := report.Run(cmd.Context(), store, req, cost)
			if err != nil {
				return err
			}
			return writeReport(cmd, rep, req.Format)
		},
	}
	lf.register(cmd, "prices")
	f := cmd.Flags()
	f.StringVar(&req.By, "by", "user", "group by: user, team, project, container, image, gpu or node")
	f.StringVar(&req.User, "user", "", "only this user's usage")
	f.StringVar(&req.Team, "team", "", "only this team's usage")
	f.StringArrayVar(&labels, "label", nil, "only containers with this label, key=value (repeatable)")
	f.StringVar(&req.Node, "node", "", "only this node")
	f.StringVar(&req.Format, "format", "table", "output: table, csv, json or focus (FOCUS 1.2 CSV)")
	return cmd
}

func writeReport(cmd *cobra.Command, rep *report.Report, format string) error {
	w := cmd.OutOrStdout()
	switch format {
	case "csv":
		return rep.WriteCSV(w)
	case "json":
		return rep.WriteJSON(w)
	case "focus":
		return rep.WriteFOCUS(w)
	default:
		return rep.WriteTable(w)
	}
}
