package report

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// JobReader is the part of the queue's job store a report by job reads;
// ledger.JobStore is one.
type JobReader interface {
	Jobs(ctx context.Context, f ledger.JobFilter) ([]queue.Job, error)
}

// JobInfo is the job of a row in a report by job: its whole life as the
// job store has it, not only the report's window. It is the report's own
// JSON shape (times as RFC 3339 or null, the wait and the run in
// seconds), part of the report's contract, and not a copy of queue.Job. A job the store does not
// know (its rows were written by another ledger, say) has the user of its
// container's labels, state "" and no times.
type JobInfo struct {
	User          string     `json:"user"`
	State         string     `json:"state"`
	GPUsRequested int        `json:"gpus_requested"` // 0 when the store does not know the job
	SubmittedAt   *time.Time `json:"submitted_at"`
	StartedAt     *time.Time `json:"started_at"`
	EndedAt       *time.Time `json:"ended_at"`
	// WaitedSeconds is from submission to start; RanSeconds from start to
	// the end, or to Options.Now while it runs. Null when unknown.
	WaitedSeconds *float64 `json:"waited_seconds"`
	RanSeconds    *float64 `json:"ran_seconds"`
}

// jobOf is the job a record's container runs: its gpumeter.job label,
// which is trusted as the user labels are, and the node whose queue made
// it, its gpumeter.node label (the node that metered it when the label
// is missing). A container labelled with another node's job is that
// node's: the same id on two nodes is two jobs.
func jobOf(u *ledger.UsageTotal) (node, id string) {
	if u.Container == nil {
		return "", ""
	}
	j := container.JobOf(u.Container.Labels, u.Node)
	return j.Node, j.ID
}

// jobKeyer keys a record by the job its container runs: the job's id,
// and "node/id" when the report's jobs are of more than one node.
// Everything else is one row, "(not a job)", so that the rows still add
// up to the host.
func jobKeyer(usage []ledger.UsageTotal) func(*ledger.UsageTotal) string {
	nodes := map[string]bool{}
	for i := range usage {
		if node, id := jobOf(&usage[i]); id != "" {
			nodes[node] = true
		}
	}
	qualify := len(nodes) > 1
	return func(u *ledger.UsageTotal) string {
		if u.OwnerKind == ledger.KindNone {
			return KeyUnattributed
		}
		node, id := jobOf(u)
		switch {
		case id == "":
			return KeyNotJob
		case qualify:
			return node + "/" + id
		}
		return id
	}
}

// jobInfo is the job of the row key whose first record is first, looked
// up by its node and id; a job the store keeps without a node (an older
// release wrote none) is found by its id.
func jobInfo(key string, first *ledger.UsageTotal, jobs map[[2]string]*queue.Job, now time.Time) *JobInfo {
	if key == KeyUnattributed || key == KeyNotJob {
		return nil
	}
	node, id := jobOf(first)
	j := jobs[[2]string{node, id}]
	if j == nil {
		j = jobs[[2]string{"", id}]
	}
	if j == nil {
		info := &JobInfo{}
		if first.Container != nil {
			info.User = first.Container.User
		}
		return info
	}
	info := &JobInfo{User: j.User, State: string(j.State), GPUsRequested: j.GPUsRequested,
		SubmittedAt: utcOrNil(j.SubmittedAt), StartedAt: utcOrNil(j.StartedAt), EndedAt: utcOrNil(j.EndedAt)}
	if !j.StartedAt.IsZero() {
		if !j.SubmittedAt.IsZero() {
			info.WaitedSeconds = seconds(j.StartedAt.Sub(j.SubmittedAt))
		}
		switch end := j.EndedAt; {
		case !end.IsZero():
			info.RanSeconds = seconds(end.Sub(j.StartedAt))
		case !now.IsZero():
			info.RanSeconds = seconds(now.Sub(j.StartedAt))
		}
	}
	return info
}

// seconds is d in seconds, nil when negative: times that contradict each
// other are unknown, not a negative wait.
func seconds(d time.Duration) *float64 {
	if d < 0 {
		return nil
	}
	s := round(d.Seconds())
	return &s
}

func utcOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// readJobs reads the jobs of a report by job from the job store.
func readJobs(ctx context.Context, jobs JobReader) ([]queue.Job, error) {
	if jobs == nil {
		return nil, fmt.Errorf("a report by job reads the queue's jobs, and this ledger has no job store")
	}
	js, err := jobs.Jobs(ctx, ledger.JobFilter{IncludeEnded: true})
	if err != nil {
		return nil, fmt.Errorf("read jobs: %w", err)
	}
	return js, nil
}

// jobCSVHeader are the columns WriteCSV adds by job, after the others.
var jobCSVHeader = []string{"user", "state", "gpus_requested", "waited_seconds", "ran_seconds"}

// jobCSV is a row's job columns; empty where the row is not a job.
func jobCSV(x *Row) []string {
	j := x.Job
	if j == nil {
		return make([]string, len(jobCSVHeader))
	}
	return []string{j.User, j.State, strconv.Itoa(j.GPUsRequested), optNum(j.WaitedSeconds), optNum(j.RanSeconds)}
}

// writeJobTable is WriteTable by job: the columns that say what a job
// cost and how well it used what it held. GPUS is the GPUs the job asked
// for; WAITED and RAN are "-" where unknown.
func (r *Report) writeJobTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	shared := r.Idle.Shared
	head := []string{"JOB", "USER", "STATE", "GPUS", "ALLOC GPU-H", "HELD GPU-H", "USED GPU-H", "EFF", "WAITED", "RAN"}
	if shared {
		head = append(head, "IDLE SHARE")
	}
	head = append(head, "COST "+r.Currency)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	row := func(x *Row) {
		held, eff := "-", "-"
		if x.GPUHoursHeld != nil {
			held = fixed(*x.GPUHoursHeld, 2)
			if *x.GPUHoursHeld > 0 {
				eff = fixed(100*x.Efficiency, 1) + "%"
			}
		}
		user, state, gpus, waited, ran := "-", "-", "-", "-", "-"
		if j := x.Job; j != nil {
			user, state, waited, ran = dashed(j.User), dashed(j.State), span(j.WaitedSeconds), span(j.RanSeconds)
			if j.GPUsRequested > 0 {
				gpus = strconv.Itoa(j.GPUsRequested)
			}
		}
		f := []string{x.Key, user, state, gpus, fixed(x.GPUHoursAllocated, 2), held, fixed(x.GPUHoursUsed, 2), eff, waited, ran}
		if shared {
			f = append(f, fixed(x.CostIdleShare, 2))
		}
		f = append(f, fixed(x.Cost, 2))
		fmt.Fprintln(tw, strings.Join(f, "\t"))
	}
	other := func(key string, hours float64, cost string) {
		f := []string{key, "-", "-", "-", fixed(hours, 2), "-", "-", "-", "-", "-"}
		if shared {
			f = append(f, "-")
		}
		f = append(f, cost)
		fmt.Fprintln(tw, strings.Join(f, "\t"))
	}
	for i := range r.Rows {
		row(&r.Rows[i])
	}
	t := r.Totals
	t.Key = "TOTAL"
	row(&t)
	idleCost := fixed(r.Idle.Cost, 2)
	if shared {
		idleCost = "(shared " + idleCost + ")"
	}
	other("(idle)", r.Idle.GPUHours, idleCost)
	if r.Basis != cost.BasisAllocated {
		other("(unbilled)", r.Unbilled.GPUHours, fixed(r.Unbilled.Cost, 2))
	}
	other("HOST", r.Host.GPUHours, fixed(r.Host.Cost, 2))
	if err := tw.Flush(); err != nil {
		return err
	}
	return r.writeNotes(w)
}

// span writes seconds for people: 45s, 38m, 2h05m, 3d04h; "-" when
// unknown.
func span(s *float64) string {
	if s == nil {
		return "-"
	}
	d := time.Duration(*s * float64(time.Second)).Round(time.Second)
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

func dashed(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
