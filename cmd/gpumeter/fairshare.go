package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
)

func newFairShare() *cobra.Command {
	var (
		cf     clientFlags
		format string
	)
	cmd := &cobra.Command{
		Use:   "fairshare",
		Short: "Show each user's and team's fair share of the GPU queue, as Slurm's sshare does",
		Long: `Show each user's and team's share (queue.shares), its decayed GPU-hours on
queue.fair_share.basis with half-life queue.fair_share.half_life, and the
fair-share factor the queue orders jobs by: 1 for no use, 0.5 for use equal
to the share, less for more. BUDGET and USED are a team's GPU-hours for the
calendar month (queue.budgets). A user sees their own row, their team's and
the totals; admins and viewers every row.`,
		Args: noArgs("fairshare"),
		RunE: showBody(&cf, &format, func(ctx context.Context, c *agentClient) (apitype.FairShare, error) { return c.FairShare(ctx) }, writeFairShare),
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&format, "format", "table", "output format: table or json")
	completeValues(cmd, "format", "table", "json")
	return cmd
}

// writeFairShare prints the users, then the teams, then the totals.
func writeFairShare(w io.Writer, fs apitype.FairShare) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tSHARE\tNORM-SHARE\tUSAGE\tNORM-USAGE\tFACTOR\tBUDGET\tUSED")
	rows := append(append(append([]apitype.FairShareRow{}, fs.Users...), fs.Teams...), fs.Totals)
	for _, r := range rows {
		name := client.Clean(r.Name)
		if r.Kind == apitype.FairShareUser && r.Team != "" {
			name += " (" + client.Clean(r.Team) + ")"
		}
		budget, used := "-", "-"
		if r.BudgetGPUHours != nil {
			budget, used = gpuHours(*r.BudgetGPUHours), gpuHours(r.BudgetUsedGPUHours)
			if r.BudgetLifted {
				budget += " (lifted)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%s\t%.3f\t%.3f\t%s\t%s\n", name, client.Clean(r.Kind),
			strconv.FormatFloat(r.Share, 'g', -1, 64), r.NormShare, gpuHours(r.UsageGPUHours), r.NormUsage, r.Factor, budget, used)
	}
	return tw.Flush()
}

// gpuHours writes GPU-hours as the config's budgets are written: 2000h.
// Under a tenth of an hour it keeps three decimals, so that a few minutes
// of use do not read as none beside a NORM-USAGE that counts them.
func gpuHours(h float64) string {
	switch a := math.Abs(h); {
	case a == 0:
		return "0.0h"
	case a < 0.0005:
		return "<0.001h"
	case a < 0.1:
		return strconv.FormatFloat(h, 'f', 3, 64) + "h"
	}
	return strconv.FormatFloat(h, 'f', 1, 64) + "h"
}
