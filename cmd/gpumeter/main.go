// Command gpumeter meters GPU use on Docker hosts: `gpumeter serve` runs the
// per-node agent, the other subcommands read from it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal asks for a clean stop; once it has, signals go back
	// to their default, so a second one ends a stop that hangs (a GPU
	// driver that stopped answering, say).
	context.AfterFunc(ctx, stop)
	// A command that runs for milliseconds and exits (report, ps, jobs)
	// spends less on the collector with a higher target; the agent and
	// top, which run for days, keep the default (or the operator's GOGC).
	if len(os.Args) > 1 && os.Args[1] != "serve" && os.Args[1] != "top" && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(int(ee))
		}
		fmt.Fprintln(os.Stderr, "gpumeter:", err)
		os.Exit(1)
	}
}

// exitError carries a specific exit status; the command has said on
// stderr what it means, so main adds nothing.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "gpumeter",
		Short:         "Meter GPU use on Docker hosts: per-container and per-user usage, Prometheus metrics",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServe(), newPs(), newSimulate(), newReport(), newWaste(), newWhatif(), newAdvise(), newStop(), newAudit(), newLedger(), newWhoami(), newToken(), newVersion(),
		newSubmit(), newJobs(), newJob(), newCancel(), newHold(false), newHold(true), newRequeue(), newLogs(), newWait(),
		newFairShare(), newBudget(), newNodes(), newNode(), newDoctor(), newTop())
	// --version prints what `gpumeter version` does.
	var v strings.Builder
	_ = writeVersion(&v, readBuildInfo())
	root.Version = v.String()
	root.SetVersionTemplate("{{.Version}}")
	// Every command suggests the flag meant for one it does not know.
	root.SetFlagErrorFunc(suggestFlag)
	withBashShim(root)
	return root
}
