package queue

import (
	"fmt"
	"testing"
	"time"
)

// simJob is a job of the preemption model: its request and the work it
// has left, which a preemption keeps (it checkpoints on SIGTERM).
type simJob struct {
	q       QueuedJob
	work    time.Duration // left
	gpus    []string
	started time.Time
	stopAt  time.Time // a preemption's kill, zero when none
	ended   time.Time
}

// simulate plays jobs on 4 GPUs through Schedule minute by minute, with
// one job (A, 2 GPUs, 2 h) running from the start, a preemption's grace
// of 2 min, and returns the GPU-minutes held, the minute the last job
// ended, and the head job's start.
func simulate(t *testing.T, preemptible bool) (busy, makespan, headStart int, preempts int) {
	t.Helper()
	start := t0
	gpus := hostGPUs(4)
	var jobs []*simJob
	add := func(id, user string, n int, work, limit time.Duration, at time.Duration, pre bool) {
		jobs = append(jobs, &simJob{q: QueuedJob{ID: id, User: user, GPUs: n, TimeLimit: limit, SubmittedAt: start.Add(at), Preemptible: pre}, work: work})
	}
	add("j-000001", "cat", 2, 2*time.Hour, 3*time.Hour, 0, false)         // A: holds 2 GPUs for 2 h
	add("j-000002", "ann", 4, time.Hour, 2*time.Hour, time.Minute, false) // the head: every GPU, for 1 h
	for k := range 6 {                                                    // bob's fillers: 1 GPU, 40 min, a day's limit
		add(fmt.Sprintf("j-%06d", 10+k), "bob", 1, 40*time.Minute, 24*time.Hour, 2*time.Minute, preemptible)
	}
	byID := map[string]*simJob{}
	for _, j := range jobs {
		byID[j.q.ID] = j
	}
	headStart = -1
	for m := 0; m < 24*60; m++ {
		now := start.Add(time.Duration(m) * time.Minute)
		// Ends: work done, or a preemption's kill.
		for _, j := range jobs {
			if j.gpus == nil {
				continue
			}
			switch {
			case now.Sub(j.started) >= j.work:
				j.gpus, j.ended = nil, now
			case !j.stopAt.IsZero() && !now.Before(j.stopAt):
				j.work -= now.Sub(j.started)
				j.gpus, j.stopAt = nil, time.Time{}
				j.q.Preempted = true
			}
		}
		in := Input{GPUs: gpus, Now: now, Config: Config{MaxGPUsPerUser: 4}}
		done := true
		for _, j := range jobs {
			switch {
			case !j.ended.IsZero():
			case j.gpus != nil:
				done = false
				in.Running = append(in.Running, RunningJob{ID: j.q.ID, User: j.q.User, GPUs: j.gpus, StartedAt: j.started, TimeLimit: j.q.TimeLimit,
					Preemptible: j.q.Preemptible, Preempting: !j.stopAt.IsZero()})
			case !j.q.SubmittedAt.After(now):
				done = false
				in.Queued = append(in.Queued, j.q)
			default:
				done = false
			}
		}
		if done {
			return busy, m, headStart, preempts
		}
		p := Schedule(in)
		for _, s := range p.Starts {
			j := byID[s.JobID]
			j.gpus, j.started = s.GPUs, now
			if j.q.ID == "j-000002" {
				headStart = m
			}
		}
		for _, pr := range p.Preemptions {
			if j := byID[pr.JobID]; j.stopAt.IsZero() {
				j.stopAt = now.Add(2 * time.Minute)
				preempts++
			}
		}
		for _, j := range jobs {
			busy += len(j.gpus)
		}
	}
	t.Fatal("the model did not end within a day")
	return
}

// TestPreemptionUtilisation measures, in a model through the same
// Schedule on a virtual clock, what preemptible fillers change on 4 GPUs
// where a 4-GPU job waits 2 h for a 2-GPU one: the GPUs held over the
// run, when it ends, and when the waiting job starts. Run it with -v for
// the figures the README gives.
func TestPreemptionUtilisation(t *testing.T) {
	busyOff, endOff, headOff, nOff := simulate(t, false)
	busyOn, endOn, headOn, nOn := simulate(t, true)
	t.Logf("without preemptible fillers: %d GPU-min held of %d (%.0f%%), all done at %d min, the 4-GPU job starts at %d min, %d preemptions",
		busyOff, 4*endOff, 100*float64(busyOff)/float64(4*endOff), endOff, headOff, nOff)
	t.Logf("with preemptible fillers:    %d GPU-min held of %d (%.0f%%), all done at %d min, the 4-GPU job starts at %d min, %d preemptions",
		busyOn, 4*endOn, 100*float64(busyOn)/float64(4*endOn), endOn, headOn, nOn)
	if nOff != 0 || nOn == 0 {
		t.Errorf("preemptions %d without preemptible jobs and %d with, want 0 and some", nOff, nOn)
	}
	if !(endOn < endOff) {
		t.Errorf("all done at %d min with preemptible fillers, %d without; want sooner with", endOn, endOff)
	}
	if headOn > headOff+3 {
		t.Errorf("the waiting job starts at %d min with preemptible fillers, %d without; want at most the grace (and a minute's step) later", headOn, headOff)
	}
}
