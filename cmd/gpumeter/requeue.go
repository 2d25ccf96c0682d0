package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
)

func newRequeue() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "requeue ID",
		Short: "Submit an ended GPU job again, as a new job with the same request",
		Long: `Make a new job from an ended one (yours, or anyone's for an admin) and print
its id. The new job asks for what the ended one asked for, and shows
requeue_of (the job it was made from) and
attempt (2 for the first requeue, then 3, ...); the ended job stays as it
ended. A job that is still waiting or running is refused. A job's environment
values are removed when it ends, so one submitted with --env cannot be
requeued: submit it again with its values.`,
		Args: oneJob("requeue"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			j, err := c.Requeue(cmd.Context(), args[0])
			if err != nil {
				return c.explain(err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), client.Clean(j.ID))
			return err
		},
	}
	cf.register(cmd)
	cmd.ValidArgsFunction = completeJobs(&cf, false, true, func(j apitype.Job) bool { return ended(j) })
	return cmd
}

// writeLineage adds to gpumeter job what the job waits for and where it
// comes from: its dependencies, its requeues, the job it was requeued
// from.
func writeLineage(line func(k, v string), j apitype.Job) {
	if len(j.After) > 0 {
		deps := make([]string, len(j.After))
		for i, d := range j.After {
			deps[i] = d.Type + ":" + d.ID
		}
		line("after", strings.Join(deps, " "))
	}
	if j.RequeueOf != "" {
		line("requeue of", fmt.Sprintf("%s (attempt %d)", j.RequeueOf, j.Attempt))
	}
	if j.Requeues > 0 {
		line("requeues", strconv.Itoa(j.Requeues))
	}
}
