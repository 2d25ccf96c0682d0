package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/units"
)

func newPs() *cobra.Command {
	var (
		cf     clientFlags
		format string
		all    bool
	)
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List GPU use by container and user, like docker ps for GPUs",
		Long: `List GPU use by container and host user from a running agent: one row per
owner and GPU, with the allocation share, SM utilisation and GPU memory now,
and the GPU-hours and energy booked since the agent started.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("ps takes no arguments, got %q", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "table" && format != "json" {
				return fmt.Errorf("--format: %q is not table or json", format)
			}
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			resp, err := c.Containers(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			if format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(resp)
			}
			return writePs(cmd.OutOrStdout(), resp, all)
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&format, "format", "table", "output format: table or json")
	completeValues(cmd, "format", "table", "json")
	cmd.Flags().BoolVarP(&all, "all", "a", false, "also show stopped containers and containers without GPUs")
	return cmd
}

// writePs prints one row per owner and GPU. JOB is the queue job a
// container runs (its gpumeter.job label), node/id for another node's
// job (its gpumeter.node label), "-" for everything else; it comes last
// so that the columns before it keep their place.
func writePs(w io.Writer, r apitype.ContainersResponse, all bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER ID\tNAME\tUSER\tTEAM\tGPU\tSHARE\tSM\tGPU MEMORY\tALLOC GPU-H\tUSED GPU-H\tENERGY kWh\tJOB")
	row := func(id, name, user, team, job string, s *apitype.GPUShare) {
		gpu, share, sm, mem, alloc, used, kwh := "-", "-", "-", "-", "-", "-", "-"
		if s != nil {
			gpu = strconv.Itoa(s.GPU)
			if s.Share > 0 {
				share = strconv.FormatFloat(s.Share, 'f', 2, 64)
			}
			sm = strconv.FormatFloat(s.SMPercent, 'f', 0, 64) + "%"
			mem = units.HumanSize(s.MemoryBytes)
			alloc = strconv.FormatFloat(s.AllocatedSeconds/3600, 'f', 3, 64)
			used = strconv.FormatFloat(s.UsedSeconds/3600, 'f', 3, 64)
			kwh = strconv.FormatFloat(s.EnergyJoules/3.6e6, 'f', 4, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, name, dash(user), dash(team), gpu, share, sm, mem, alloc, used, kwh, dash(job))
	}
	for _, c := range r.Containers {
		job := container.JobOf(c.Labels, r.Node).On(r.Node)
		if len(c.GPUs) == 0 {
			if all || (c.Running && c.GPURequest != "") {
				row(container.ShortID(c.ID), c.Name, c.User, c.Team, job, nil)
			}
			continue
		}
		if !c.Running && !all {
			continue
		}
		for i := range c.GPUs {
			row(container.ShortID(c.ID), c.Name, c.User, c.Team, job, &c.GPUs[i])
		}
	}
	for _, h := range r.HostUsers {
		for i := range h.GPUs {
			row("-", "(host)", h.User, "", "", &h.GPUs[i])
		}
	}
	for i := range r.Unresolved {
		row("-", "(unknown)", "", "", "", &r.Unresolved[i])
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
