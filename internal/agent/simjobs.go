package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// simJob is a scenario job as the simulation places it.
type simJob struct {
	sim.Job
	stored     queue.Job
	start, end time.Duration // from the scenario's start; start < 0: never started
	gpus       []int
	timedOut   bool
}

// submitSimJobs writes the scenario's jobs to the job store as queued, in
// the order they were submitted, so that each has its ID.
func submitSimJobs(ctx context.Context, sc *sim.Scenario, store ledger.JobStore) ([]*simJob, error) {
	jobs := make([]*simJob, len(sc.Jobs))
	for i, j := range sc.Jobs {
		jobs[i] = &simJob{Job: j, start: -1}
	}
	slices.SortStableFunc(jobs, func(a, b *simJob) int { return int(a.Submit - b.Submit) })
	for _, j := range jobs {
		at := sc.Start.Add(j.Submit)
		stored, err := store.SubmitJob(ctx, queue.Job{Node: sc.Node, Name: j.Name, User: j.User, Team: j.Team, State: queue.Queued,
			GPUsRequested: j.GPUs, Image: j.Image, Command: []string{"simulated"}, TimeLimit: j.TimeLimit, SubmittedAt: at,
			Request: &queue.Request{}}, audit.Event{Time: at, Node: sc.Node, Kind: audit.KindAPI, Caller: j.User, Role: "user",
			Source: "simulate", Action: "jobs.submit", Status: 201})
		if err != nil {
			return nil, fmt.Errorf("submit job %s: %w", j.Name, err)
		}
		j.stored = stored
	}
	return jobs, nil
}

// placeSimJobs runs the queue's scheduler (its default settings: first
// come, first served) at every submission and end on the scenario's
// clock, with the scenario's containers as use outside the queue, and
// returns the scenario with each started job's container added: named
// gpumeter-job-<id> and labelled with its job and owner, as the queue's
// launcher names and labels them.
func placeSimJobs(sc *sim.Scenario, jobs []*simJob) *sim.Scenario {
	gpus := make([]queue.GPU, len(sc.GPUs))
	for i, g := range sc.GPUs {
		gpus[i] = queue.GPU{UUID: g.UUID, Index: g.Index, MemoryTotal: g.Memory}
	}
	index := map[string]int{}
	for i, g := range sc.GPUs {
		index[g.UUID] = i
	}
	byID := map[string]*simJob{}
	for _, j := range jobs {
		byID[j.stored.ID] = j
	}
	times := []time.Duration{}
	for _, j := range jobs {
		times = append(times, j.Submit)
	}
	for _, c := range sc.Containers {
		times = append(times, c.Start, c.End)
	}
	for len(times) > 0 {
		slices.Sort(times)
		times = slices.Compact(times)
		t := times[0]
		times = times[1:]
		if t >= sc.Duration {
			break
		}
		in := queue.Input{GPUs: gpus, Now: sc.Start.Add(t)}
		for _, c := range sc.Containers {
			if c.Start <= t && t < c.End && len(c.GPUs) > 0 {
				oc := queue.OutsideContainer{Name: c.Name, User: c.Labels["gpumeter.user"]}
				for _, g := range c.GPUs {
					oc.GPUs = append(oc.GPUs, sc.GPUs[g].UUID)
				}
				in.Outside.Containers = append(in.Outside.Containers, oc)
			}
		}
		for _, j := range jobs {
			switch {
			case j.start < 0 && j.Submit <= t:
				in.Queued = append(in.Queued, queue.QueuedJob{ID: j.stored.ID, User: j.User, Team: j.Team, GPUs: j.GPUs,
					TimeLimit: j.TimeLimit, SubmittedAt: j.stored.SubmittedAt})
			case j.start >= 0 && t < j.end:
				r := queue.RunningJob{ID: j.stored.ID, User: j.User, Team: j.Team, StartedAt: sc.Start.Add(j.start), TimeLimit: j.TimeLimit}
				for _, g := range j.gpus {
					r.GPUs = append(r.GPUs, sc.GPUs[g].UUID)
				}
				in.Running = append(in.Running, r)
			}
		}
		if len(in.Queued) == 0 {
			continue
		}
		for _, st := range queue.Schedule(in).Starts {
			j := byID[st.JobID]
			j.start = t
			for _, u := range st.GPUs {
				j.gpus = append(j.gpus, index[u])
			}
			slices.Sort(j.gpus)
			run := j.Run
			if j.TimeLimit > 0 && run > j.TimeLimit {
				run, j.timedOut = j.TimeLimit, true
			}
			j.end = t + run
			times = append(times, j.end)
		}
	}
	out := *sc
	out.Containers = slices.Clone(sc.Containers)
	for _, j := range jobs {
		if j.start < 0 {
			continue
		}
		name := "gpumeter-job-" + j.stored.ID
		labels := map[string]string{container.JobLabel: j.stored.ID, "gpumeter.user": j.User}
		if j.Team != "" {
			labels["gpumeter.team"] = j.Team
		}
		out.Containers = append(out.Containers, sim.Container{ID: sim.ContainerID(sc.Node, name), Name: name, Image: j.Image, Labels: labels,
			GPUs: j.gpus, Start: j.start, End: min(j.end, sc.Duration), Phases: []sim.Phase{{Util: j.Util, Memory: j.Memory}}})
	}
	return &out
}

// recordSimJobs writes where the placed jobs stand at the scenario's
// end: started (with GPUs and container), and ended (succeeded, or
// timeout past their limit) when their run ended before it.
func recordSimJobs(ctx context.Context, sc *sim.Scenario, store ledger.JobStore, jobs []*simJob) error {
	for _, j := range jobs {
		if j.start < 0 {
			continue
		}
		id := j.stored.ID
		var uuids []string
		for _, g := range j.gpus {
			uuids = append(uuids, sc.GPUs[g].UUID)
		}
		if _, err := store.UpdateJob(ctx, id, queue.Queued, func(q *queue.Job) {
			q.State, q.StartedAt, q.GPUs, q.ContainerID = queue.Running, sc.Start.Add(j.start), uuids, sim.ContainerID(sc.Node, "gpumeter-job-"+id)
		}, audit.Event{}); err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
		if j.end > sc.Duration {
			continue
		}
		state, reason, exit := queue.Succeeded, queue.Reason(""), 0
		if j.timedOut {
			state, exit = queue.Timeout, 137
		}
		if _, err := store.UpdateJob(ctx, id, queue.Running, func(q *queue.Job) {
			q.State, q.Reason, q.EndedAt, q.ExitCode = state, reason, sc.Start.Add(j.end), &exit
		}, audit.Event{}); err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
	}
	return nil
}
