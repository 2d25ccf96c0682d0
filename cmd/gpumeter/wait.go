package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// waitPoll and waitPollMax are how often wait asks after the job: at
// first soon, then less often while it runs on.
const (
	waitPoll    = 500 * time.Millisecond
	waitPollMax = 5 * time.Second
)

// The exit statuses of wait besides the job's own exit code, as timeout(1)
// and the shell use them.
const (
	exitTimeout   = 124
	exitCancelled = 125
	exitNoCode    = 126 // failed without an exit code: lost, or never started
	exitWaitError = 2
)

func newWait() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "wait ID",
		Short: "Wait for a GPU job (or every task of an array job) to end and exit with its exit code",
		Long: `Wait until the job has ended, say on stderr how, and exit with the job's
exit code: 124 if it reached its time limit, 125 if it was cancelled, 126 if
it failed without an exit code (lost, or it could not be started), and 2 if
wait itself failed (no such job, the agent unreachable). For an array job's
id, wait until every task has ended: exit 0 when every task succeeded, and
otherwise with the status the lowest-indexed task that did not would give.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := oneJob("wait")(cmd, args); err != nil {
				return waitFailed(cmd, err)
			}
			c, err := cf.client(cmd)
			if err != nil {
				return waitFailed(cmd, err)
			}
			ctx := cmd.Context()
			for delay := waitPoll; ; delay = min(delay*5/4, waitPollMax) {
				j, a, err := c.JobOrArray(ctx, args[0])
				if err != nil {
					return waitFailed(cmd, c.explain(err))
				}
				if a != nil && arrayEnded(*a) {
					code, task := arrayWaitStatus(*a)
					fmt.Fprintf(cmd.ErrOrStderr(), "%s %s\n", client.Clean(a.ID), arrayLine(*a))
					if task == nil {
						return nil
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "%s %s: %s\n", client.Clean(task.ID), client.Clean(task.State), client.Clean(endWords(*task)))
					return exitError(code)
				}
				if a == nil && ended(j) {
					code := waitStatus(j)
					fmt.Fprintf(cmd.ErrOrStderr(), "%s %s: %s\n", client.Clean(j.ID), client.Clean(j.State), client.Clean(endWords(j)))
					if code == 0 {
						return nil
					}
					return exitError(code)
				}
				select {
				case <-ctx.Done():
					return waitFailed(cmd, ctx.Err())
				case <-time.After(delay):
				}
			}
		},
	}
	cf.register(cmd)
	cmd.ValidArgsFunction = completeJobs(&cf, false, true, nil)
	return cmd
}

// waitFailed says why wait could not wait, and exits 2, which no job's
// own status is mistaken for here.
func waitFailed(cmd *cobra.Command, err error) error {
	fmt.Fprintln(cmd.ErrOrStderr(), "gpumeter: wait:", err)
	return exitError(exitWaitError)
}

// waitStatus is wait's exit status for an ended job.
func waitStatus(j apitype.Job) int {
	switch queue.State(j.State) {
	case queue.Succeeded:
		return 0
	case queue.Timeout:
		return exitTimeout
	case queue.Cancelled:
		return exitCancelled
	}
	if j.ExitCode != nil && *j.ExitCode != 0 {
		return *j.ExitCode & 0xff
	}
	return exitNoCode
}

func endWords(j apitype.Job) string {
	s := dash(j.Reason)
	if j.ReasonText != "" {
		s = j.ReasonText
	}
	// The queue's sentence often says the code already ("exited with
	// code 0", "… (exit code 143)"): it is said once.
	if j.ExitCode != nil && !strings.Contains(s, fmt.Sprintf("code %d", *j.ExitCode)) {
		s += fmt.Sprintf(" (exit code %d)", *j.ExitCode)
	}
	return s
}
