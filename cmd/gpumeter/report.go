package main

import (
	"fmt"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/report"
)

func newReport() *cobra.Command {
	var (
		lf     ledgerFlags
		cf     clientFlags
		labels []string
		req    report.Request
	)
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Usage and cost by user, team, project, container, image, GPU, node or job",
		Long: `Report GPU usage and cost over a window from the ledger: allocated, held,
present and used GPU-hours, efficiency (used / held, within 0-100 % also on
shared GPUs), peak GPU memory, energy, CPU and RAM, cost, the idle pool and
totals that reconcile with the host.

Where it reads, in order: the ledger --db or --dsn names (one that simulate
wrote, say); the agent that --url, $GPUMETER_URL or url: in the client
config names; with --config, the ledger that config names; the local agent
over its socket, when one runs; else the agent's ledger (data_dir or
ledger.dsn from the config). An agent makes the report from its ledger with
its prices, and it is printed as the agent returns it; a ledger read here is
priced by the config's cost section. One line on stderr says which was read.

--by job gives one row per queue job (the gpumeter.job label of its
container): the user, the GPUs it asked for, its GPU-hours and efficiency,
how long it waited and ran (its whole life, from the job store), and its
cost. Containers outside the queue and host processes are one row, "(not a
job)", so that the rows still add up to the host.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agent, err := chooseSource(cmd, &lf, &cf, hostEnv(), nil)
			if err != nil {
				return err
			}
			remote := agent != nil
			var cfg config.Config
			if !remote {
				if cfg, err = loadConfig(cmd, lf.configPath); err != nil {
					return err
				}
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
			if remote {
				return reportFromAgent(cmd, agent, lf, req, labels)
			}
			store, cost, err := lf.openPriced(cmd, &cfg)
			if err != nil {
				return err
			}
			defer store.Close()
			rep, err := report.Run(cmd.Context(), store, store, req, cost)
			if err != nil {
				return err
			}
			return writeReport(cmd, rep, req.Format)
		},
	}
	lf.register(cmd, "prices")
	cf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&req.By, "by", "user", "group by: user, team, project, container, image, gpu, node or job")
	f.StringVar(&req.User, "user", "", "only this user's usage")
	f.StringVar(&req.Team, "team", "", "only this team's usage")
	f.StringArrayVar(&labels, "label", nil, "only containers with this label, key=value (repeatable)")
	f.StringVar(&req.Node, "node", "", "only this node")
	f.StringVar(&req.Format, "format", "table", "output: table, csv, json or focus (FOCUS 1.2 CSV)")
	completeValues(cmd, "by", report.Groupings()...)
	completeValues(cmd, "format", "table", "csv", "json", "focus")
	return cmd
}

// reportFromAgent asks the agent for the report the flags describe and
// prints it as it comes. The window goes as the flags gave it, so that
// the agent reads it against its own clock.
func reportFromAgent(cmd *cobra.Command, c *agentClient, lf ledgerFlags, req report.Request, labels []string) error {
	q := url.Values{}
	for k, v := range map[string]string{
		"by": req.By, "since": lf.since, "from": lf.from, "to": lf.to,
		"user": req.User, "team": req.Team, "node": req.Node, "format": req.Format,
	} {
		if v != "" {
			q.Set(k, v)
		}
	}
	q["label"] = labels
	doc, err := c.UsageDocument(cmd.Context(), q)
	if err != nil {
		return c.explain(err)
	}
	c.announce(cmd)
	_, err = cmd.OutOrStdout().Write(doc.Body)
	return err
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
