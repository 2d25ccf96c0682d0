package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// Shell completion: cobra's `completion bash|zsh|fish` scripts call the
// hidden `__complete` command, which asks the functions here. Flag values
// come from fixed lists; container names and job ids from the agent.

// completeTimeout bounds the agent's answer to a completion: a shell that
// waits longer for a tab than this feels hung.
const completeTimeout = 2 * time.Second

// completeValues makes the flag name of cmd complete to values. A flag
// that takes a comma-separated list completes the item after the last
// comma, keeping the ones before.
func completeValues(cmd *cobra.Command, name string, values ...string) {
	err := cmd.RegisterFlagCompletionFunc(name, func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		prefix, last := "", toComplete
		if i := strings.LastIndexByte(toComplete, ','); i >= 0 && isSliceFlag(cmd, name) {
			prefix, last = toComplete[:i+1], toComplete[i+1:]
		}
		var out []cobra.Completion
		for _, v := range values {
			if strings.HasPrefix(v, last) && !slices.Contains(strings.Split(prefix, ","), v) {
				out = append(out, prefix+v)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	})
	if err != nil {
		// Only a programming error: a flag that does not exist, or one
		// registered twice.
		panic(err)
	}
}

// isSliceFlag says whether cmd's flag name takes a comma-separated list.
func isSliceFlag(cmd *cobra.Command, name string) bool {
	f := cmd.Flags().Lookup(name)
	return f != nil && strings.HasSuffix(f.Value.Type(), "Slice")
}

// completeKeyFlags makes each setting flag of cmd that takes one of a
// few values (--log-level, --source, --queue-placement, ...) complete to
// them.
func completeKeyFlags(cmd *cobra.Command) {
	for _, k := range config.Keys() {
		if v := k.Values(); len(v) > 0 && cmd.Flags().Lookup(k.Flag()) != nil {
			completeValues(cmd, k.Flag(), v...)
		}
	}
}

// completionClient is a client for the agent cf names, for completions:
// it prints no warnings, and the caller bounds its calls with
// completeTimeout.
func completionClient(cf *clientFlags) (*client.Client, error) {
	s, err := client.Resolve(client.Flags(*cf), hostEnv())
	if err != nil {
		return nil, err
	}
	return client.New(s.Options)
}

// completeFromAgent turns list, a call to the agent, into a completion
// function. Whatever goes wrong (no agent, a refused token, a timeout)
// completes nothing and says nothing: a shell prints what a completion
// writes in the middle of the command line. cobra's debug file
// (BASH_COMP_DEBUG_FILE) gets the reason.
func completeFromAgent(cf *clientFlags, many bool, list func(ctx context.Context, c *client.Client) ([]cobra.Completion, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if !many && len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := completionClient(cf)
		if err != nil {
			cobra.CompDebugln("gpumeter: completion: "+err.Error(), false)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout)
		defer cancel()
		all, err := list(ctx, c)
		if err != nil {
			cobra.CompDebugln("gpumeter: completion: "+err.Error(), false)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, comp := range all {
			v, _, _ := strings.Cut(comp, "\t")
			if strings.HasPrefix(v, toComplete) && !slices.Contains(args, v) {
				out = append(out, comp)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeContainers completes the names of the running containers the
// agent lists, described by image and owner.
func completeContainers(cf *clientFlags) cobra.CompletionFunc {
	return completeFromAgent(cf, false, func(ctx context.Context, c *client.Client) ([]cobra.Completion, error) {
		resp, err := c.Containers(ctx)
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, ct := range resp.Containers {
			if ct.Running && ct.Resolved && ct.Name != "" {
				out = append(out, cobra.CompletionWithDesc(client.Clean(ct.Name), client.Clean(ct.Image+", "+ownerOf(ct))))
			}
		}
		return out, nil
	})
}

// ownerOf is the user a container is booked to, as a description says it.
func ownerOf(c apitype.Container) string {
	if c.User == "" {
		return "no user"
	}
	return c.User
}

// completeJobs completes the ids of the jobs keep selects, described by
// name and state: everyone's for an admin or a viewer, the caller's own
// for a user. all also asks for the ended jobs.
func completeJobs(cf *clientFlags, many, all bool, keep func(apitype.Job) bool) cobra.CompletionFunc {
	return completeFromAgent(cf, many, func(ctx context.Context, c *client.Client) ([]cobra.Completion, error) {
		who, err := c.Whoami(ctx)
		if err != nil {
			return nil, err
		}
		// A user asking for all_users is refused and audited; ask only
		// for what the role may see.
		everyone := who.Role == string(config.RoleAdmin) || who.Role == string(config.RoleViewer)
		jobs, err := c.Jobs(ctx, client.JobsQuery{All: all, AllUsers: everyone})
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, j := range jobs {
			if keep != nil && !keep(j) {
				continue
			}
			desc := j.State
			if j.Held {
				desc += ", held"
			}
			if j.Name != "" {
				desc = j.Name + " (" + desc + ")"
			}
			if everyone && j.User != "" {
				desc += " by " + j.User
			}
			out = append(out, cobra.CompletionWithDesc(client.Clean(j.ID), client.Clean(desc)))
		}
		return out, nil
	})
}

// jobStates are the values of --state.
func jobStates() []string {
	var out []string
	for _, s := range queue.States() {
		out = append(out, string(s))
	}
	return out
}
