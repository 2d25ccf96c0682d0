package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/client"
)

func newBudget() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "Act on the teams' GPU-hour budgets (queue.budgets)",
		Args:  noArgs("budget"),
	}
	cmd.AddCommand(newBudgetLift())
	return cmd
}

func newBudgetLift() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "lift TEAM",
		Short: "Let a team over its budget start jobs again, for the rest of the month (admins)",
		Long: `Lift TEAM's budget for the rest of the calendar month: its jobs that wait
with reason budget may start again. The lift is in the audit log; the
budget applies again from the first of next month.`,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return errors.New("budget lift needs a team (`gpumeter fairshare` lists them)")
			case len(args) > 1:
				return fmt.Errorf("budget lift takes one team, got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			out, err := c.LiftBudget(cmd.Context(), args[0])
			if err != nil {
				return c.explain(err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "lifted the budget of %s for the rest of the month\n", client.Clean(out.Team))
			return err
		},
	}
	cf.register(cmd)
	return cmd
}
