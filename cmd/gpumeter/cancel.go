package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// defaultJobsLimit is how many jobs gpumeter jobs lists unless --limit
// says otherwise: a deep queue's listing stays quick to read and to fetch.
const defaultJobsLimit = 100

// jobsLimit checks --limit: 0 is every job.
func jobsLimit(n int) (int, error) {
	if n < 0 || n > apitype.MaxJobsLimit {
		return 0, fmt.Errorf("--limit: %d is out of range; give 1 to %d, or 0 for every job", n, apitype.MaxJobsLimit)
	}
	return n, nil
}

// writePageLine says, under a listing that is one page of more, how many
// jobs there are in all and how to see the rest.
func writePageLine(w io.Writer, r apitype.JobsResponse) error {
	p := r.Page
	if p == nil || p.NextAfter == "" && len(r.Jobs) >= p.Total {
		return nil
	}
	line := fmt.Sprintf("showing %s of %s jobs; --limit 0 for all", thousands(len(r.Jobs)), thousands(p.Total))
	if p.NextAfter != "" {
		line += ", --after " + client.Clean(p.NextAfter) + " for the next page"
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// thousands writes n with commas between its thousands: 5,123.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func newCancel() *cobra.Command {
	var (
		cf       clientFlags
		states   []string
		held     bool
		name     string
		allUsers bool
		wait     bool
		format   string
	)
	cmd := &cobra.Command{
		Use:   "cancel ID... | cancel --state STATE [--held] [--name GLOB] [--all-users]",
		Short: "Cancel GPU jobs: a waiting one leaves the queue, a running one is stopped",
		Long: `Cancel each job named. A waiting job ends at once; a running one is asked to
stop (SIGTERM, then SIGKILL after queue.stop_grace) and the answer comes at
once, the job still running while it stops: --wait answers once it has
ended. An array job's id cancels every task of it that has not ended; a
task's id (j-000123_4) that task only. Every job named is tried; the exit
status is 1 if any could not be.

Without ids, --state cancels every job of yours in those states (queued,
starting, running) in one call: --held keeps to held jobs, --name to names
that match a shell pattern ('sweep-*'), and --all-users takes everyone's
jobs (admins only). The filters need --state and take no ids.`,
		Args: func(cmd *cobra.Command, args []string) error {
			filtered := cmd.Flags().Changed("state") || held || name != "" || allUsers
			switch {
			case len(args) > 0 && filtered:
				return errors.New("--state, --held, --name and --all-users choose the jobs themselves; give them or job ids, not both")
			case len(args) == 0 && !filtered:
				return errors.New("cancel needs one or more job ids (`gpumeter jobs` lists them), or --state to cancel by filter")
			case filtered && !cmd.Flags().Changed("state"):
				return errors.New("--held, --name and --all-users need --state: name the states to cancel (queued, starting, running)")
			case filtered && wait:
				return errors.New("--wait waits for the jobs named by id; a cancel by filter answers at once")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return fmt.Errorf("--format: %q is not text or json", format)
			}
			var st []queue.State
			if len(args) == 0 {
				var err error
				if st, err = queue.ParseStates(states); err != nil {
					return fmt.Errorf("--state: %w", err)
				}
				if len(st) == 0 {
					return errors.New("--state: name the states to cancel (queued, starting, running)")
				}
			}
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			if len(args) == 0 {
				return cancelByFilter(cmd, c, apitype.CancelJobsRequest{State: queue.StateNames(st), Held: held, Name: name, AllUsers: allUsers}, format)
			}
			act := c.Cancel
			if wait {
				act = c.CancelWait
			}
			var failed []string
			var out []apitype.Job
			for _, id := range args {
				j, err := act(cmd.Context(), id)
				if a, ok, aerr := orArray(err, func() (apitype.ArrayJob, error) { return c.CancelArray(cmd.Context(), id) }); ok {
					// An array's id: every task of it that has not ended;
					// with --wait, the answer once each has.
					if aerr == nil && wait {
						a, aerr = awaitArray(cmd.Context(), c, a)
					}
					if aerr == nil {
						if format == "text" {
							fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", client.Clean(a.ID), arrayLine(a))
						}
						out = append(out, a.Tasks...)
						continue
					}
					err = aerr
				}
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "gpumeter: cancel %s: %v\n", client.Clean(id), c.explain(err))
					failed = append(failed, client.Clean(id))
					continue
				}
				out = append(out, j)
				if format == "text" {
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", client.Clean(j.ID), cancelWord(j))
				}
			}
			if format == "json" {
				if err := writeJSONOut(cmd.OutOrStdout(), apitype.JobsResponse{Jobs: append([]apitype.Job{}, out...)}); err != nil {
					return err
				}
			}
			if len(failed) > 0 {
				return fmt.Errorf("could not cancel %d of %d jobs: %s", len(failed), len(args), strings.Join(failed, ", "))
			}
			return nil
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "cancel every job in these states: queued, starting, running")
	f.BoolVar(&held, "held", false, "with --state queued: only held jobs")
	f.StringVar(&name, "name", "", "with --state: only jobs whose name matches this shell pattern, such as 'sweep-*'")
	f.BoolVar(&allUsers, "all-users", false, "with --state: everyone's jobs, not only yours (admins)")
	f.BoolVar(&wait, "wait", false, "answer once each job named has ended (a running one stops within queue.stop_grace)")
	f.StringVar(&format, "format", "text", "output: text or json")
	completeValues(cmd, "state", string(queue.Queued), string(queue.Starting), string(queue.Running))
	completeValues(cmd, "format", "text", "json")
	cmd.ValidArgsFunction = completeJobs(&cf, true, false, func(j apitype.Job) bool { return !ended(j) })
	return cmd
}

// cancelWord is what became of a job cancel answered for: its state, and
// for a started one that it is being stopped.
func cancelWord(j apitype.Job) string {
	if !ended(j) && queue.State(j.State) != queue.Queued {
		return client.Clean(j.State) + " (being stopped)"
	}
	return client.Clean(j.State)
}

// cancelByFilter is gpumeter cancel --state ...: one call for every job
// the filter selects.
func cancelByFilter(cmd *cobra.Command, c *agentClient, req apitype.CancelJobsRequest, format string) error {
	out, err := c.CancelJobs(cmd.Context(), req)
	if err != nil {
		return c.explain(err)
	}
	if format == "json" {
		return writeJSONOut(cmd.OutOrStdout(), out)
	}
	line := fmt.Sprintf("cancelled %s jobs", thousands(out.Cancelled))
	if out.Cancelled == 1 {
		line = "cancelled 1 job"
	}
	if out.Stopping > 0 {
		line += fmt.Sprintf(" (%s started, being stopped)", thousands(out.Stopping))
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), line)
	return err
}

// awaitArray polls array a until every task of it has ended, as wait
// does, and returns it then.
func awaitArray(ctx context.Context, c *agentClient, a apitype.ArrayJob) (apitype.ArrayJob, error) {
	for delay := waitPoll; !arrayEnded(a); delay = min(delay*5/4, waitPollMax) {
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-time.After(delay):
		}
		var err error
		if a, err = c.Array(ctx, a.ID); err != nil {
			return a, err
		}
	}
	return a, nil
}
