package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/waste"
)

func newWaste() *cobra.Command {
	var (
		lf     ledgerFlags
		cf     clientFlags
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
is judged minute by minute, a longer one hour by hour but for its first
partial hour and its last hour, judged minute by minute: both find the same,
a finding since the same time to the hour. A finding is active (NOW) when
its condition held at the window's end and its node's rows reach to within
a minute and ledger.flush_interval of that end: an agent that stopped
longer ago has nothing active.

It reads where report does, but for the agent: from an agent (one named by
--url, $GPUMETER_URL or url: in the client config, else the local one over
its socket) it lists the live findings instead, judged by the agent's own
rules. A window (--since, --from, --to), a rule (--waste-*) or --config
asks for the ledger: an agent named is then an error, the local one is
passed over for the ledger its config names. One line on stderr says which
was read.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agent, err := chooseSource(cmd, &lf, &cf, hostEnv(), wasteUnserved)
			if err != nil {
				return err
			}
			if agent != nil {
				if !slices.Contains(waste.Formats(), format) {
					return fmt.Errorf("--format: %q is not one of %s", format, strings.Join(waste.Formats(), ", "))
				}
				return wasteFromAgent(cmd, agent, req.Node, format)
			}
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
			store, cost, err := lf.openPriced(cmd, &cfg)
			if err != nil {
				return err
			}
			defer store.Close()
			rep, err := waste.Evaluate(cmd.Context(), store, waste.Options{From: *req.From, To: *req.To, Node: req.Node, Rules: cfg.Waste, Cost: cost, Flush: cfg.FlushInterval})
			if err != nil {
				return err
			}
			return writeWaste(cmd.OutOrStdout(), rep, format)
		},
	}
	lf.register(cmd, "rules and prices")
	cf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&req.Node, "node", "", "only this node")
	f.StringVar(&format, "format", "table", "output: table, csv or json")
	completeValues(cmd, "format", "table", "csv", "json")
	for _, k := range config.Keys() {
		if strings.HasPrefix(k.Name, "waste.") && k.Name != "waste.enabled" {
			keyFlag(f, k)
		}
	}
	completeKeyFlags(cmd)
	return cmd
}

// wasteUnserved names the flags that shape a judgement of the ledger (a
// window, the rules), which the agent cannot serve: its live findings
// have no window, and it judges by its own rules.
func wasteUnserved(f *pflag.Flag) error {
	switch {
	case f.Name == "since" || f.Name == "from" || f.Name == "to":
		return fmt.Errorf("--%s: the agent's live findings have no window; --db or --dsn reads the ledger over one", f.Name)
	case strings.HasPrefix(f.Name, "waste-"):
		return fmt.Errorf("--%s: the agent judges by its own waste rules; --db or --dsn applies these to the ledger", f.Name)
	}
	return nil
}

// wasteFromAgent prints the agent's live findings, on node only when
// node is set.
func wasteFromAgent(cmd *cobra.Command, c *agentClient, node, format string) error {
	got, err := c.Waste(cmd.Context())
	if err != nil {
		return c.explain(err)
	}
	c.announce(cmd)
	rep := wasteFromWire(got)
	if node != "" {
		rep = rep.Only(func(f *waste.Finding) bool { return f.Node == node })
	}
	return writeWaste(cmd.OutOrStdout(), rep, format)
}

func writeWaste(w io.Writer, rep *waste.Report, format string) error {
	switch format {
	case "json":
		return rep.WriteJSON(w)
	case "csv":
		return rep.WriteCSV(w)
	default:
		return rep.WriteTable(w)
	}
}

// wasteFromWire is the agent's findings as the waste package prints
// them, so that they print as those of the ledger do.
func wasteFromWire(r *apitype.WasteReport) *waste.Report {
	out := &waste.Report{From: r.From, To: r.To, Currency: r.Currency}
	if r.Findings != nil {
		out.Findings = make([]waste.Finding, len(r.Findings))
	}
	for i, f := range r.Findings {
		out.Findings[i] = waste.Finding{
			ID: f.ID, Rule: f.Rule, Node: f.Node, OwnerKind: f.OwnerKind,
			ContainerID: f.ContainerID, Container: f.Container, Image: f.Image,
			Owner: f.Owner, Team: f.Team, Project: f.Project,
			Since: f.Since, FirstSeen: f.FirstSeen, Until: f.Until, Active: f.Active,
			Evidence: f.Evidence, WastedGPUHours: f.WastedGPUHours, Cost: f.Cost,
		}
		if f.GPUs != nil {
			out.Findings[i].GPUs = make([]waste.GPURef, len(f.GPUs))
		}
		for j, g := range f.GPUs {
			out.Findings[i].GPUs[j] = waste.GPURef{Index: g.Index, UUID: g.UUID, Model: g.Model}
		}
	}
	if r.Totals != nil {
		out.Totals = make([]waste.Total, len(r.Totals))
	}
	for i, t := range r.Totals {
		out.Totals[i] = waste.Total{Rule: t.Rule, Findings: t.Findings, Active: t.Active, WastedGPUHours: t.WastedGPUHours, Cost: t.Cost}
	}
	return out
}
