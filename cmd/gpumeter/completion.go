package main

import (
	"context"
	"io"
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

// bashShim stands in for the bash-completion package's
// _get_comp_words_by_ref, which cobra's bash script calls: without the
// package every Tab printed "_get_comp_words_by_ref: command not found".
// It gives cur, prev, words and cword as bash splits the line (at
// COMP_WORDBREAKS, so --flag=value is three words), which is all the
// script needs to complete commands, flags and their values.
const bashShim = `# Without the bash-completion package, a minimal _get_comp_words_by_ref.
if ! declare -F _get_comp_words_by_ref >/dev/null 2>&1; then
_get_comp_words_by_ref() {
    while [[ $# -gt 0 && $1 == -* ]]; do
        [[ $1 == -n ]] && shift
        shift
    done
    local __cwords=("${COMP_WORDS[@]}")
    while [[ $# -gt 0 ]]; do
        case $1 in
        cur) cur=${COMP_WORDS[COMP_CWORD]} ;;
        prev) prev=${COMP_WORDS[COMP_CWORD-1]} ;;
        words) words=("${__cwords[@]}") ;;
        cword) cword=$COMP_CWORD ;;
        esac
        shift
    done
}
fi
`

// withBashShim makes `completion bash` print bashShim before cobra's
// script, and says so in its help.
func withBashShim(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		for _, sh := range c.Commands() {
			if sh.Name() != "bash" {
				continue
			}
			sh.Long = strings.Replace(sh.Long, "This script depends on the 'bash-completion' package.\nIf it is not installed already, you can install it via your OS's package manager.",
				"The script works without the 'bash-completion' package (it brings a minimal\nstand-in for the one function it needs); with the package it uses the package's.", 1)
			sh.RunE = func(cmd *cobra.Command, _ []string) error {
				noDesc, _ := cmd.Flags().GetBool("no-descriptions") // absent: descriptions
				if _, err := io.WriteString(cmd.OutOrStdout(), bashShim); err != nil {
					return err
				}
				return cmd.Root().GenBashCompletionV2(cmd.OutOrStdout(), !noDesc)
			}
		}
	}
}
