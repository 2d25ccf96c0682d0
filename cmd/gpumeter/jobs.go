package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/units"
)

func newJobs() *cobra.Command {
	var (
		cf     clientFlags
		q      client.JobsQuery
		states []string
		format string
		limit  int
		expand bool
	)
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List your GPU jobs: waiting (with why) and running",
		Long: `List your jobs on the agent's GPU queue that wait or run, oldest first; -a adds
the ended ones, as ps -a does. A waiting job's row says why it waits.
--all-users lists everyone's, for admins and viewers. --limit (100 unless
given; 0 for all) bounds the rows, and a last line says how many there are
in all; --after ID lists the page after job ID. An array job's tasks are
folded into one line with the count of its tasks in each state
(j-000123 [0-99%8] 8 running, 80 queued, 12 succeeded) unless --expand.`,
		Args: noArgs("jobs"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "table" && format != "json" {
				return fmt.Errorf("--format: %q is not table or json", format)
			}
			st, err := queue.ParseStates(states)
			if err != nil {
				return fmt.Errorf("--state: %w", err)
			}
			q.States = queue.StateNames(st)
			if q.Limit, err = jobsLimit(limit); err != nil {
				return err
			}
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			page, err := c.JobsPage(cmd.Context(), q)
			if err != nil {
				return c.explain(err)
			}
			if format == "json" {
				return writeJSONOut(cmd.OutOrStdout(), page)
			}
			fold, err := arraysOf(cmd.Context(), c, page.Jobs, expand)
			if err != nil {
				return c.explain(err)
			}
			if err := writeJobs(cmd.OutOrStdout(), page.Jobs, time.Now(), fold); err != nil {
				return err
			}
			if err := writeNoJobsLine(cmd.OutOrStdout(), page, q); err != nil {
				return err
			}
			return writePageLine(cmd.OutOrStdout(), page)
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.BoolVarP(&q.All, "all", "a", false, "also list ended jobs")
	f.BoolVar(&q.AllUsers, "all-users", false, "list everyone's jobs (admins and viewers)")
	f.StringSliceVar(&states, "state", nil, "only jobs in these states (queued, starting, running, succeeded, failed, timeout, cancelled, lost)")
	f.StringVar(&format, "format", "table", "output format: table or json")
	f.IntVar(&limit, "limit", defaultJobsLimit, "list at most this many jobs; 0 lists them all")
	f.StringVar(&q.After, "after", "", "list the jobs after this job id (the page after the one that ended with it)")
	f.BoolVar(&expand, "expand", false, "list an array job's tasks one a line instead of folding them into one")
	completeValues(cmd, "state", jobStates()...)
	completeValues(cmd, "format", "table", "json")
	return cmd
}

func newJob() *cobra.Command {
	var (
		cf     clientFlags
		format string
	)
	cmd := &cobra.Command{
		Use:   "job ID",
		Short: "Show one GPU job: its state, why it waits or ended, its GPUs",
		Long: `Show one GPU job: its state, why it waits or ended, its GPUs. For an array
job's id, show the array: how many of its tasks are in each state, and a row
per task.`,
		Args: oneJob("job"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return fmt.Errorf("--format: %q is not text or json", format)
			}
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			j, a, err := c.JobOrArray(cmd.Context(), args[0])
			if err != nil {
				return c.explain(err)
			}
			switch {
			case format == "json" && a != nil:
				return writeJSONOut(cmd.OutOrStdout(), a)
			case format == "json":
				return writeJSONOut(cmd.OutOrStdout(), j)
			case a != nil:
				return writeArray(cmd.OutOrStdout(), *a, time.Now())
			}
			return writeJob(cmd.OutOrStdout(), j)
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	completeValues(cmd, "format", "text", "json")
	cmd.ValidArgsFunction = completeJobs(&cf, false, true, nil)
	return cmd
}

// newHold makes hold and release, which differ only in what they ask.
func newHold(release bool) *cobra.Command {
	var cf clientFlags
	verb, short, done := "hold", "Hold a waiting GPU job: it keeps its place and does not start", "held"
	if release {
		verb, short, done = "release", "Release a held GPU job: it may start again", "released"
	}
	cmd := &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Long:  short + ". An array job's id acts on each of its tasks that can take it; a task's id (j-000123_4) on that task only.",
		Args:  oneJob(verb),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			act := c.Hold
			if release {
				act = c.Release
			}
			actArray := c.HoldArray
			if release {
				actArray = c.ReleaseArray
			}
			j, err := act(cmd.Context(), args[0])
			if a, ok, aerr := orArray(err, func() (apitype.ArrayJob, error) { return actArray(cmd.Context(), args[0]) }); ok {
				if aerr != nil {
					return c.explain(aerr)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s %s\n", done, client.Clean(a.ID), arrayLine(a))
				return err
			}
			if err != nil {
				return c.explain(err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", done, client.Clean(j.ID))
			return err
		},
	}
	cf.register(cmd)
	// Only a queued job can be held, and only a held one released.
	cmd.ValidArgsFunction = completeJobs(&cf, false, false, func(j apitype.Job) bool { return queue.State(j.State) == queue.Queued && j.Held == release })
	return cmd
}

func newLogs() *cobra.Command {
	var (
		cf     clientFlags
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a GPU job's output; -f follows it while the job runs",
		Long: `Print what the job's container wrote, as docker logs does. Logs are kept
queue.log_retention after the job ends. Viewers may not read logs: they can
hold secrets.`,
		Args: oneJob("logs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			err = c.Logs(cmd.Context(), args[0], follow, cmd.OutOrStdout())
			if err != nil && cmd.Context().Err() != nil {
				return nil // interrupted while following, as docker logs -f is
			}
			return c.explain(err)
		},
	}
	cf.register(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "go on printing while the job runs")
	cmd.ValidArgsFunction = completeJobs(&cf, false, true, nil)
	return cmd
}

func noArgs(name string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%s takes no arguments, got %q", name, args[0])
		}
		return nil
	}
}

func oneJob(name string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return fmt.Errorf("%s needs a job id (`gpumeter jobs` lists them)", name)
		case len(args) > 1:
			return fmt.Errorf("%s takes one job id, got %d", name, len(args))
		}
		return nil
	}
}

func writeJSONOut(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeJobs prints one row per job; a waiting job's row ends with why it
// waits, an ended one's with why it ended. The tasks of an array in fold
// are one row, its state "array" and its reason the count of its tasks
// in each state; nil folds none. A NODE column says where each job runs
// or ran when the jobs span nodes (a fleet); on one host it would say
// the same on every row, and is left out.
func writeJobs(w io.Writer, jobs []apitype.Job, now time.Time, fold map[string]apitype.ArrayJob) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	nodes := spansNodes(jobs)
	node := func(n string) string {
		if !nodes {
			return ""
		}
		return dash(client.Clean(n)) + "\t"
	}
	fmt.Fprintln(tw, "ID\tNAME\tUSER\tSTATE\tGPUS\t"+node("NODE")+"PRI\tPOS\tAGE\tREASON")
	rows, arrays := foldJobs(jobs, fold)
	for k, j := range rows {
		if a, ok := arrays[k]; ok {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s%s\t%s\t%s\t%s\n", client.Clean(a.ID), dash(client.Clean(j.Name)), client.Clean(j.User),
				"array", gpusWord(j), node(""), "-", "-", age(j.SubmittedAt, now), arrayLine(a))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s%s\t%s\t%s\t%s\n", client.Clean(j.ID), dash(client.Clean(j.Name)), client.Clean(j.User),
			stateWord(j), gpusWord(j), node(j.Node), priorityWord(j.Priority), positionWord(j.Position), age(j.SubmittedAt, now), client.Clean(reasonWords(j)))
	}
	return tw.Flush()
}

// spansNodes says whether the jobs name more than one node, counting a
// fleet's waiting job, which has none yet, as one more.
func spansNodes(jobs []apitype.Job) bool {
	seen, named := map[string]bool{}, false
	for _, j := range jobs {
		seen[j.Node] = true
		named = named || j.Node != ""
	}
	return named && len(seen) > 1
}

// writeNoJobsLine says, under a table with no rows, what the list left
// out and the flags that show it: an admin's own list is often empty
// while others' jobs wait.
func writeNoJobsLine(w io.Writer, r apitype.JobsResponse, q client.JobsQuery) error {
	if len(r.Jobs) > 0 || q.After != "" {
		return nil
	}
	var line string
	switch {
	case q.AllUsers && q.All:
		return nil
	case q.AllUsers:
		line = "no waiting or running jobs; -a adds the ended ones"
	case q.All:
		line = "no jobs of yours; --all-users lists everyone's (admins and viewers)"
	default:
		line = "no waiting or running jobs of yours; -a adds the ended ones, --all-users everyone's (admins and viewers)"
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// gpusWord is what a job asks for: a number of GPUs, or the memory of a
// memory job.
func gpusWord(j apitype.Job) string {
	if j.GPUMemoryRequested > 0 {
		return units.FormatSize(j.GPUMemoryRequested)
	}
	return strconv.Itoa(j.GPUsRequested)
}

func priorityWord(p *float64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatFloat(*p, 'f', 3, 64)
}

func positionWord(p *int) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(*p)
}

func stateWord(j apitype.Job) string {
	if j.Held && queue.State(j.State) == queue.Queued {
		return "queued (held)"
	}
	return client.Clean(j.State)
}

// ended reports whether the job is in a state it never leaves.
func ended(j apitype.Job) bool { return queue.State(j.State).Ended() }

// reasonWords is the sentence of a waiting job, the code and exit code
// of an ended one.
func reasonWords(j apitype.Job) string {
	switch {
	case queue.State(j.State) == queue.Queued && j.ReasonText != "":
		return j.ReasonText
	case ended(j) && j.ExitCode != nil:
		return fmt.Sprintf("%s (exit code %d)", j.Reason, *j.ExitCode)
	}
	return dash(j.Reason)
}

func age(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return units.FormatAge(now.Sub(*t))
}

// writeJob prints one job in full, its reason's sentence whole.
func writeJob(w io.Writer, j apitype.Job) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, client.Clean(v)) }
	line("id", j.ID)
	line("name", dash(j.Name))
	line("user", j.User)
	line("team", dash(j.Team))
	line("state", stateWord(j))
	line("reason", dash(j.Reason))
	line("why", dash(j.ReasonText))
	if j.GPUMemoryRequested > 0 {
		line("gpus", fmt.Sprintf("%s on one shared GPU asked; held: %s", units.FormatSize(j.GPUMemoryRequested), dash(strings.Join(j.GPUs, ", "))))
	} else {
		line("gpus", fmt.Sprintf("%d asked; held: %s", j.GPUsRequested, dash(strings.Join(j.GPUs, ", "))))
	}
	line("class", dash(j.Class))
	line("priority", priorityWord(j.Priority))
	line("position", positionWord(j.Position))
	line("image", j.Image)
	line("command", quoteArgs(j.Command))
	line("env", dash(strings.Join(j.EnvKeys, ", ")))
	line("time limit", j.TimeLimit)
	writeLineage(line, j)
	for _, t := range []struct {
		k string
		v *time.Time
	}{{"submitted", j.SubmittedAt}, {"estimated start", j.EstimatedStart}, {"started", j.StartedAt}, {"ended", j.EndedAt}} {
		if t.v != nil {
			line(t.k, t.v.UTC().Format(time.RFC3339))
		}
	}
	if j.StartedAt != nil && j.EndedAt != nil {
		line("ran", units.FormatDuration(j.EndedAt.Sub(*j.StartedAt).Round(time.Second)))
	}
	if j.ExitCode != nil {
		line("exit code", strconv.Itoa(*j.ExitCode))
	}
	if j.ContainerID != "" {
		line("container", j.ContainerID)
	}
	if p := j.Placement; p != nil {
		line("placement", p.Policy)
		for _, c := range p.Candidates {
			chosen := ""
			if c.Chosen {
				chosen = " (chosen)"
			}
			line("  GPU "+strconv.Itoa(c.Index), fmt.Sprintf("%s score %.1f util %.0f%%%s", c.UUID, c.Score, 100*c.Util, chosen))
		}
	}
	return tw.Flush()
}

// quoteArgs writes a command as a shell would need it typed.
func quoteArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'\\$`!*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
