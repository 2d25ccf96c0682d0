package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/units"
)

func newNodes() *cobra.Command {
	var (
		cf          clientFlags
		format      string
		consolidate bool
	)
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "Show the fleet's nodes: their state, lease, score and GPUs",
		Long: `Show every node of the fleet (the agents that share one PostgreSQL ledger,
queue.fleet: true): its state, up, draining (no new job starts there; its
running jobs finish) or lost (its agent has been silent for longer than
ledger.lease_takeover); how long ago its agent last renewed its ledger
lease; its agent's version; its score, 100 × (1 − |SM − target|) on its
GPUs' mean SM utilisation and queue.target_utilization; and how many of its
GPUs are free, held by jobs, or taken by use outside the queue.

With --consolidate, advice for quiet hours instead: which nodes could be
drained (gpumeter node drain) because every job running there would fit on
the other nodes without taking them past queue.target_utilization, and
where each job would go. Nothing moves: drained nodes' jobs finish where
they are.`,
		Args: noArgs("nodes"),
	}
	show := showBody(&cf, &format, func(ctx context.Context, c *agentClient) (apitype.Nodes, error) { return c.Nodes(ctx) }, writeNodes)
	advise := showBody(&cf, &format, func(ctx context.Context, c *agentClient) (apitype.Consolidation, error) { return c.Consolidate(ctx) }, writeConsolidation)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if consolidate {
			return advise(cmd, args)
		}
		return show(cmd, args)
	}
	cf.register(cmd)
	cmd.Flags().BoolVar(&consolidate, "consolidate", false, "say which nodes could be drained: their jobs fit on the others at queue.target_utilization")
	cmd.Flags().StringVar(&format, "format", "table", "output format: table or json")
	completeValues(cmd, "format", "table", "json")
	return cmd
}

// writeNodes prints a row per node: its GPUs, and how many of them are
// free, held by jobs and taken by use outside the queue.
func writeNodes(w io.Writer, ns apitype.Nodes) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tLEASE-AGE\tVERSION\tSCORE\tSM\tGPUS\tFREE/HELD/OUTSIDE")
	for _, n := range ns.Nodes {
		free, held, outside := n.GPUCounts()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.0f\t%.0f%%\t%d\t%d/%d/%d\n", client.Clean(n.Node), client.Clean(n.State),
			units.FormatAge(time.Duration(n.LeaseAgeSeconds*float64(time.Second))), dash(client.Clean(n.AgentVersion)), n.Score, 100*n.SMUtil,
			len(n.GPUs), free, held, outside)
	}
	if len(ns.Nodes) == 0 {
		fmt.Fprintln(tw, "no node has registered in the ledger yet")
	}
	return tw.Flush()
}

// writeConsolidation prints a row per node: whether it could be drained,
// its jobs, and why.
func writeConsolidation(w io.Writer, c apitype.Consolidation) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADVICE\tJOBS\tWHY")
	for _, a := range c.Advice {
		advice := "keep"
		switch {
		case a.Drained:
			advice = "drained"
		case a.Drain:
			advice = "drain"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", client.Clean(a.Node), advice, len(a.Jobs), client.Clean(a.Why))
	}
	if len(c.Advice) == 0 {
		fmt.Fprintln(tw, "no node is up to advise on")
	}
	return tw.Flush()
}

func newNode() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Drain a node of the fleet, or undrain it (admins)",
		Args:  noArgs("node"),
	}
	cmd.AddCommand(newNodeDrain(true), newNodeDrain(false))
	return cmd
}

func newNodeDrain(drained bool) *cobra.Command {
	var cf clientFlags
	verb, short, long, done := "drain", "Start no new jobs on a node; its running jobs finish (admins)",
		`Drain NODE: the fleet's scheduler starts no new job there, and the jobs
running there finish as they would (nothing is stopped). Use it before a
node's maintenance; `+"`gpumeter nodes`"+` shows it as draining until it is
undrained. The drain is in the audit log.`,
		"drained node %s: no new jobs start there; its running jobs finish\n"
	if !drained {
		verb, short, long, done = "undrain", "Let new jobs start on a drained node again (admins)",
			`Undrain NODE: the fleet's scheduler may start jobs there again. The
undrain is in the audit log.`,
			"undrained node %s: new jobs may start there again\n"
	}
	cmd := &cobra.Command{
		Use:   verb + " NODE",
		Short: short,
		Long:  long,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return errors.New("node " + verb + " needs a node (`gpumeter nodes` lists them)")
			case len(args) > 1:
				return fmt.Errorf("node %s takes one node, got %d", verb, len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			out, err := c.SetDrained(cmd.Context(), args[0], drained)
			if err != nil {
				return c.explain(err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), done, client.Clean(out.Node))
			return err
		},
	}
	cf.register(cmd)
	cmd.ValidArgsFunction = completeNodes(&cf)
	return cmd
}

// completeNodes completes the names of the fleet's nodes, described by
// their state.
func completeNodes(cf *clientFlags) cobra.CompletionFunc {
	return completeFromAgent(cf, false, func(ctx context.Context, c *client.Client) ([]cobra.Completion, error) {
		ns, err := c.Nodes(ctx)
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, n := range ns.Nodes {
			out = append(out, cobra.CompletionWithDesc(client.Clean(n.Node), client.Clean(n.State)+", "+strconv.Itoa(len(n.GPUs))+" GPUs"))
		}
		return out, nil
	})
}
