package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/container"
)

func newStop() *cobra.Command {
	var (
		cf  clientFlags
		req apitype.StopRequest
	)
	cmd := &cobra.Command{
		Use:   "stop CONTAINER",
		Short: "Stop a container through the agent, recorded in its audit log",
		Long: `Ask the agent to stop a container, named by its ID, a prefix of 12 or more
characters of it, or its name. Docker sends SIGTERM, and SIGKILL after
--timeout. Admins may stop any container, users their own; the agent records
the call, with --reason, in its audit log.`,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return errors.New("stop needs a container name or id (`gpumeter ps` lists them)")
			case len(args) > 1:
				return fmt.Errorf("stop takes one container name or id, got %d; stop them one by one", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := apitype.ParseStop(req); err != nil {
				return fmt.Errorf("--%w", err)
			}
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			resp, err := c.Stop(cmd.Context(), args[0], req)
			var se *client.StatusError
			switch {
			case err != nil && !errors.As(err, &se) && cmd.Context().Err() == nil:
				// No answer: the agent may have stopped it all the same.
				return fmt.Errorf("%w; the container may have been stopped all the same: `gpumeter ps -a` shows whether it runs, and `gpumeter audit` what the agent did", err)
			case err != nil:
				return c.explain(err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), stopped(resp))
			return err
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&req.Timeout, "timeout", "", "how long Docker waits before it kills the container, at most 10m (default 10s)")
	f.StringVar(&req.Reason, "reason", "", "why, for the audit log (at most 500 characters)")
	cmd.ValidArgsFunction = completeContainers(&cf)
	return cmd
}

// stopped says what a stop did: how long it took and, when the container
// outlived its grace period, that Docker killed it.
func stopped(r apitype.StopResponse) string {
	if r.Grace == "" {
		// An agent from before the answer said more.
		return fmt.Sprintf("stopped %s (%s)", client.Clean(r.Name), container.ShortID(r.ID))
	}
	took := time.Duration(r.Seconds * float64(time.Second)).Round(100 * time.Millisecond)
	s := fmt.Sprintf("stopped %s (%s) in %s", client.Clean(r.Name), container.ShortID(r.ID), took)
	if r.Killed() {
		s += fmt.Sprintf(": it was still running when the %s timeout ended, so Docker killed it", r.Grace)
	}
	return s
}
