package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/term"
	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/top"
	"github.com/gpumeter/gpumeter/internal/units"
)

func newTop() *cobra.Command {
	var (
		cf                       clientFlags
		once, reverse, fleet     bool
		interval, group, sortCol string
		user                     string
		width                    int
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Watch the GPUs, containers and users of an agent live, like top",
		Long: `Watch an agent live: a bar and a sparkline per GPU (utilisation, memory,
power, temperature), then one row per container, user or process with its
GPUs, SM utilisation, GPU memory, CPU use, running time, queue job and
waste findings. top asks the agent once per redraw (GET /api/v1/snapshot)
and redraws at most once a second; a user's token shows their own rows.

Keys: q quits, g steps the grouping (container, user, process), s and S
step the sort column, r reverses it, / filters by user, the arrows move,
enter shows the detail of a row, esc goes back. When the agent stops
answering top says so and keeps trying.

--once prints one frame as plain text and exits, for scripts.

--fleet watches the fleet instead (the agents that share one PostgreSQL
ledger, queue.fleet: true): a row per node with its state (up, draining,
lost), the age of its ledger lease, its score, its GPUs free, held by jobs
and used outside the queue, and its jobs running, from GET /api/v1/nodes
and the jobs list, asked once per redraw; enter shows a node's GPUs and
the job holding each. On an agent outside a fleet it exits 1 saying so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := units.ParseDuration(interval)
			if err != nil {
				return fmt.Errorf("--interval: %w", err)
			}
			g, err := top.ParseGroup(group)
			if err != nil {
				return fmt.Errorf("--group: %w", err)
			}
			col, err := top.ParseColumn(sortCol)
			if err != nil {
				return fmt.Errorf("--sort: %w", err)
			}
			if width < 0 {
				return fmt.Errorf("--width: %d is below 0", width)
			}
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if fleet {
				for _, name := range []string{"group", "sort", "reverse", "user"} {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s is for the node's own view: --fleet shows a row per node", name)
					}
				}
				return topFleet(cmd, c, d, once, width)
			}
			fetch := func() (apitype.Snapshot, error) {
				s, err := c.Snapshot(ctx)
				if client.IsUnauthorized(err) || client.IsForbidden(err) {
					// Asking again will not change the agent's mind.
					return s, top.Fatal(c.explain(err))
				}
				return s, err
			}
			m, err := top.New(top.Options{Interval: d, Group: g, Sort: col, Reverse: reverse, User: user, Fetch: fetch, Width: width})
			if err != nil {
				return fmt.Errorf("--interval: %w", err)
			}
			if once {
				s, err := c.Snapshot(ctx)
				if err != nil {
					return c.explain(err)
				}
				next, _ := m.Update(top.SnapshotMsg{Snapshot: s})
				_, err = fmt.Fprintln(cmd.OutOrStdout(), next.(top.Model).Plain())
				return err
			}
			if !term.IsTerminal(os.Stdout.Fd()) {
				return errors.New("top draws on a terminal and standard output is not one; --once prints one frame as plain text")
			}
			return runTop(ctx, m)
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.BoolVar(&once, "once", false, "print one frame as plain text and exit")
	f.BoolVar(&fleet, "fleet", false, "watch the fleet's nodes instead of this agent's GPUs (queue.fleet)")
	f.StringVar(&interval, "interval", "1s", "time between redraws, each one call to the agent; at least 1s")
	f.StringVar(&group, "group", "container", "one row per container, user or process")
	f.StringVar(&sortCol, "sort", "sm", "the column to sort on: name, user, gpu, sm, mem, cpu, time, job or waste")
	f.BoolVar(&reverse, "reverse", false, "sort the other way round")
	f.StringVar(&user, "user", "", "show only the rows of users whose name contains NAME")
	f.IntVar(&width, "width", 0, "with --once, cut lines to this many columns (0: as long as they are)")
	completeValues(cmd, "group", top.GroupNames()...)
	completeValues(cmd, "sort", top.ColumnNames()...)
	return cmd
}

// topFleet runs `top --fleet`: the first look at the fleet is taken
// before the view starts, so that an agent outside a fleet, or a token
// it refuses, ends top with the agent's sentence and status 1 before the
// terminal is taken over.
func topFleet(cmd *cobra.Command, c *agentClient, interval time.Duration, once bool, width int) error {
	ctx := cmd.Context()
	if _, err := c.Nodes(ctx); err != nil {
		return c.explain(err)
	}
	// Admins and viewers see every user's jobs; a user their own, and
	// asking for more would only put a refusal in the audit log each
	// second.
	who, err := c.Whoami(ctx)
	if err != nil {
		return c.explain(err)
	}
	q := client.JobsQuery{AllUsers: who.Role == string(config.RoleAdmin) || who.Role == string(config.RoleViewer)}
	fetch := func() (top.Fleet, error) {
		ns, err := c.Nodes(ctx)
		if err == nil {
			var jobs []apitype.Job
			if jobs, err = c.Jobs(ctx, q); err == nil {
				return cleanFleet(top.Fleet{Nodes: ns.Nodes, Jobs: jobs, At: time.Now()}), nil
			}
		}
		// Asking again will not change the agent's mind, nor put it in a
		// fleet.
		var se *client.StatusError
		if client.IsUnauthorized(err) || client.IsForbidden(err) || errors.As(err, &se) && se.Code == apitype.CodeFleetOff {
			return top.Fleet{}, top.Fatal(c.explain(err))
		}
		return top.Fleet{}, err
	}
	m, err := top.NewFleet(top.FleetOptions{Interval: interval, Fetch: fetch, Width: width})
	if err != nil {
		return fmt.Errorf("--interval: %w", err)
	}
	if once {
		fl, err := fetch()
		if err != nil {
			return c.explain(err)
		}
		next, _ := m.Update(top.FleetMsg{Fleet: fl})
		_, err = fmt.Fprintln(cmd.OutOrStdout(), next.(top.FleetModel).Plain())
		return err
	}
	if !term.IsTerminal(os.Stdout.Fd()) {
		return errors.New("top draws on a terminal and standard output is not one; --once prints one frame as plain text")
	}
	return runTop(ctx, m)
}

// cleanFleet is fl with what other callers may have put in it (node
// names, job names) made safe to print on a terminal.
func cleanFleet(fl top.Fleet) top.Fleet {
	for i := range fl.Nodes {
		n := &fl.Nodes[i]
		n.Node, n.State, n.AgentVersion = client.Clean(n.Node), client.Clean(n.State), client.Clean(n.AgentVersion)
		for k := range n.GPUs {
			n.GPUs[k].Model = client.Clean(n.GPUs[k].Model)
		}
	}
	for i := range fl.Jobs {
		j := &fl.Jobs[i]
		j.ID, j.Name, j.User, j.Node, j.State = client.Clean(j.ID), client.Clean(j.Name), client.Clean(j.User), client.Clean(j.Node), client.Clean(j.State)
	}
	return fl
}

// runTop runs the view on the terminal until q, ctrl-c, a fatal error or
// a signal, and Bubble Tea restores the terminal on each. A SIGTERM or
// SIGINT reaches Bubble Tea's own handler, and both quit as q does. The
// program is not given ctx, which the same signals cancel (see main), and
// an interrupt is turned into a quit, because bubbletea v2.1.1 takes
// either for a kill, whose shutdown closes the terminal's reader while its
// read loop still runs (a data race, charmbracelet/bubbletea#1599, fixed
// after that release). The fetches still run under ctx, so none outlives
// the signal.
func runTop(ctx context.Context, m tea.Model) error {
	quitOnInterrupt := func(_ tea.Model, msg tea.Msg) tea.Msg {
		if _, ok := msg.(tea.InterruptMsg); ok {
			return tea.QuitMsg{}
		}
		return msg
	}
	p := tea.NewProgram(m, tea.WithOutput(os.Stdout), tea.WithFilter(quitOnInterrupt))
	final, err := p.Run()
	if err != nil {
		if ctx.Err() != nil {
			return nil // a signal asked top to stop
		}
		return fmt.Errorf("terminal: %w", err)
	}
	if fm, ok := final.(interface{ Err() error }); ok && fm.Err() != nil {
		return fm.Err()
	}
	return nil
}
