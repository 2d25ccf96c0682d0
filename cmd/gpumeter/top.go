package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/term"
	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/top"
	"github.com/gpumeter/gpumeter/internal/units"
)

func newTop() *cobra.Command {
	var (
		cf                       clientFlags
		once, reverse            bool
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

--once prints one frame as plain text and exits, for scripts.`,
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

// runTop runs the view on the terminal until q, ctrl-c, a fatal error or
// a signal, and Bubble Tea restores the terminal on each. A SIGTERM or
// SIGINT reaches Bubble Tea's own handler, and both quit as q does. The
// program is not given ctx, which the same signals cancel (see main), and
// an interrupt is turned into a quit, because bubbletea v2.1.1 takes
// either for a kill, whose shutdown closes the terminal's reader while its
// read loop still runs (a data race, charmbracelet/bubbletea#1599, fixed
// after that release). The fetches still run under ctx, so none outlives
// the signal.
func runTop(ctx context.Context, m top.Model) error {
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
	if fm, ok := final.(top.Model); ok && fm.Err() != nil {
		return fm.Err()
	}
	return nil
}
