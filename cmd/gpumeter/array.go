package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// arraysOf fetches the array jobs the listed tasks belong to, so that a
// folded line counts every task, ended ones too; nil with expand.
func arraysOf(ctx context.Context, c *agentClient, jobs []apitype.Job, expand bool) (map[string]apitype.ArrayJob, error) {
	if expand {
		return nil, nil
	}
	out := map[string]apitype.ArrayJob{}
	for _, j := range jobs {
		if j.ArrayID == "" {
			continue
		}
		if _, ok := out[j.ArrayID]; ok {
			continue
		}
		a, err := c.Array(ctx, j.ArrayID)
		if err != nil {
			return nil, fmt.Errorf("array %s: %w", client.Clean(j.ArrayID), err)
		}
		out[j.ArrayID] = a
	}
	return out, nil
}

// foldJobs replaces the tasks of each array in fold by one row, where
// its first listed task was; a task of an array not in fold stays.
func foldJobs(jobs []apitype.Job, fold map[string]apitype.ArrayJob) (rows []apitype.Job, arrays map[int]apitype.ArrayJob) {
	arrays = map[int]apitype.ArrayJob{}
	seen := map[string]bool{}
	for _, j := range jobs {
		a, ok := fold[j.ArrayID]
		if j.ArrayID == "" || !ok {
			rows = append(rows, j)
			continue
		}
		if seen[j.ArrayID] {
			continue
		}
		seen[j.ArrayID] = true
		arrays[len(rows)] = a
		rows = append(rows, j)
	}
	return rows, arrays
}

// arrayCounts says how many tasks each state has, in the order of the
// states' lives: "8 running, 80 queued, 12 succeeded".
func arrayCounts(states map[string]int) string {
	var parts []string
	for _, s := range []queue.State{queue.Running, queue.Starting, queue.Queued, queue.Lost, queue.Succeeded, queue.Failed, queue.Timeout, queue.Cancelled} {
		if n := states[string(s)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	for s, n := range states { // a state this CLI does not know
		if _, err := queue.ParseState(s); err != nil && n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, client.Clean(s)))
		}
	}
	return strings.Join(parts, ", ")
}

// arrayLine is a folded array's summary: "[0-99%8] 8 running, 80 queued".
func arrayLine(a apitype.ArrayJob) string {
	return "[" + client.Clean(a.Array) + "] " + arrayCounts(a.States)
}

// arrayEnded says whether every task of a has ended.
func arrayEnded(a apitype.ArrayJob) bool {
	for _, t := range a.Tasks {
		if !ended(t) {
			return false
		}
	}
	return len(a.Tasks) > 0
}

// arrayWaitStatus is wait's exit status for an ended array: 0 when every
// task succeeded, else the status of the lowest-indexed task that did
// not, and that task.
func arrayWaitStatus(a apitype.ArrayJob) (int, *apitype.Job) {
	var worst *apitype.Job
	for i := range a.Tasks {
		t := &a.Tasks[i]
		if waitStatus(*t) == 0 {
			continue
		}
		if worst == nil || t.ArrayIndex != nil && worst.ArrayIndex != nil && *t.ArrayIndex < *worst.ArrayIndex {
			worst = t
		}
	}
	if worst == nil {
		return 0, nil
	}
	return waitStatus(*worst), worst
}

// writeArray prints an array job: its summary, then a row per task.
func writeArray(w io.Writer, a apitype.ArrayJob, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, client.Clean(v)) }
	line("array", a.ID)
	line("user", a.User)
	line("tasks", fmt.Sprintf("%d (%s)", a.ArrayCount, a.Array))
	if a.ArrayMaxRunning > 0 {
		line("running at most", fmt.Sprint(a.ArrayMaxRunning))
	} else {
		line("running at most", "no limit")
	}
	line("states", arrayCounts(a.States))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tasks := slices.Clone(a.Tasks)
	return writeJobs(w, tasks, now, nil)
}

// orArray calls act when err is the 404 of a job id that may name an
// array instead; ok says whether the array answered (with err its
// error), false leaves err the job's.
func orArray(err error, act func() (apitype.ArrayJob, error)) (a apitype.ArrayJob, ok bool, aerr error) {
	if !client.IsNotFound(err) {
		return a, false, nil
	}
	a, aerr = act()
	if client.IsNotFound(aerr) {
		return a, false, nil
	}
	return a, true, aerr
}
