package queue

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// preemptible returns a preemptible running job of class c, started at
// started, holding gpus.
func preemptible(id string, c Class, started time.Time, gpus ...string) RunningJob {
	r := running(id, "pat", started, 0, gpus...)
	r.Preemptible, r.Class = true, c
	return r
}

// preempted returns the plan's preemptions as "job>for".
func preempted(p Plan) []string {
	var out []string
	for _, pr := range p.Preemptions {
		out = append(out, pr.JobID+">"+pr.For)
	}
	return out
}

// preemptInput is a host of 4 GPUs whose head job j-000001 (ann) has
// waited an hour, past the default preempt_after, for gpus GPUs.
func preemptInput(gpus int, run ...RunningJob) Input {
	return Input{GPUs: hostGPUs(4), Now: t0.Add(time.Hour + time.Minute), Queued: []QueuedJob{queued(1, "ann", gpus)}, Running: run}
}

func TestPreemptFewestNewestLowestFirst(t *testing.T) {
	old, mid, recent := t0.Add(10*time.Minute), t0.Add(20*time.Minute), t0.Add(30*time.Minute)
	for _, tc := range []struct {
		name string
		gpus int
		run  []RunningJob
		want []string
	}{
		{"the newest of two", 1, []RunningJob{
			preemptible("j-000100", "", old, "GPU-0"),
			preemptible("j-000101", "", recent, "GPU-1"),
			running("j-000102", "bob", old, 0, "GPU-2", "GPU-3"),
		}, []string{"j-000101>j-000001"}},
		{"the low class before the newest", 1, []RunningJob{
			preemptible("j-000100", ClassLow, old, "GPU-0"),
			preemptible("j-000101", "", recent, "GPU-1"),
			running("j-000102", "bob", old, 0, "GPU-2", "GPU-3"),
		}, []string{"j-000100>j-000001"}},
		{"one job of two GPUs rather than two of one", 2, []RunningJob{
			preemptible("j-000100", "", old, "GPU-0", "GPU-1"),
			preemptible("j-000101", ClassLow, recent, "GPU-2"),
			preemptible("j-000102", ClassLow, recent, "GPU-3"),
		}, []string{"j-000100>j-000001"}},
		{"free GPUs count: one more is enough", 2, []RunningJob{
			preemptible("j-000100", "", old, "GPU-0"),
			preemptible("j-000101", "", mid, "GPU-1"),
			running("j-000102", "bob", old, 0, "GPU-2"),
		}, []string{"j-000101>j-000001"}},
		{"all three when it takes all", 4, []RunningJob{
			preemptible("j-000100", "", old, "GPU-0", "GPU-1"),
			preemptible("j-000101", "", mid, "GPU-2"),
			preemptible("j-000102", "", recent, "GPU-3"),
		}, []string{"j-000102>j-000001", "j-000101>j-000001", "j-000100>j-000001"}},
		{"none when even all would not do", 4, []RunningJob{
			preemptible("j-000100", "", old, "GPU-0"),
			running("j-000102", "bob", old, 0, "GPU-1"),
		}, nil},
		{"a preemption under way counts first", 1, []RunningJob{
			func() RunningJob { r := preemptible("j-000100", "", old, "GPU-0"); r.Preempting = true; return r }(),
			preemptible("j-000101", ClassLow, recent, "GPU-1"),
			running("j-000102", "bob", old, 0, "GPU-2", "GPU-3"),
		}, []string{"j-000100>j-000001"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Schedule(preemptInput(tc.gpus, tc.run...))
			if got := preempted(p); !slices.Equal(got, tc.want) {
				t.Errorf("preemptions %q, want %q", got, tc.want)
			}
			if len(p.Starts) != 0 {
				t.Errorf("starts %q, want none: the head starts once the preempted jobs have stopped", starts(p))
			}
		})
	}
}

func TestPickVictimsIsFewestThenPreferred(t *testing.T) {
	// a (newest, 1 GPU), b (3 GPUs), c (oldest, 2 GPUs): need 2 is one
	// job, b, the newer of the two that could; need 4 is two, a and b,
	// since a leaves 3 to cover with one slot.
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	cands := func() []victim {
		a, b, c := preemptible("a", "", at(3), "x"), preemptible("b", "", at(2), "x"), preemptible("c", "", at(1), "x")
		return []victim{{&b, 3}, {&c, 2}, {&a, 1}}
	}
	ids := func(vs []victim) string {
		var s []string
		for _, v := range vs {
			s = append(s, v.job.ID)
		}
		return strings.Join(s, ",")
	}
	for need, want := range map[int]string{1: "a", 2: "b", 3: "b", 4: "a,b", 5: "b,c", 6: "a,b,c", 7: ""} {
		if got := ids(pickVictims(cands(), need)); got != want {
			t.Errorf("need %d: got %q, want %q", need, got, want)
		}
	}
}

func TestNoPreemptionBeforePreemptAfter(t *testing.T) {
	run := []RunningJob{preemptible("j-000100", "", t0, "GPU-0", "GPU-1", "GPU-2", "GPU-3")}
	in := preemptInput(1, run...)
	in.Config.PreemptAfter = 2 * time.Hour
	if p := Schedule(in); len(p.Preemptions) != 0 {
		t.Errorf("preemptions %q after a wait of 1 h with preempt_after 2 h, want none", preempted(p))
	}
	in.Config.PreemptAfter = time.Hour
	if got := preempted(Schedule(in)); !slices.Equal(got, []string{"j-000100>j-000001"}) {
		t.Errorf("preemptions %q after a wait of 1 h with preempt_after 1 h, want j-000100 for j-000001", got)
	}
}

func TestPreemptibleWaitingJobDoesNotPreempt(t *testing.T) {
	in := preemptInput(1, preemptible("j-000100", "", t0, "GPU-0", "GPU-1", "GPU-2", "GPU-3"))
	in.Queued[0].Preemptible = true
	if p := Schedule(in); len(p.Preemptions) != 0 {
		t.Errorf("preemptions %q for a preemptible job, want none", preempted(p))
	}
}

func TestPreemptedGPUOutsideUseIsNotCounted(t *testing.T) {
	// GPU-1's preemptible job shares it with a container outside the
	// queue: stopping it would not free the GPU.
	in := preemptInput(1, preemptible("j-000100", "", t0, "GPU-0"), preemptible("j-000101", "", t0.Add(time.Minute), "GPU-1"),
		running("j-000102", "bob", t0, 0, "GPU-2", "GPU-3"))
	in.Outside.Containers = []OutsideContainer{{Name: "notebook", GPUs: []string{"GPU-1"}}}
	if got := preempted(Schedule(in)); !slices.Equal(got, []string{"j-000100>j-000001"}) {
		t.Errorf("preemptions %q, want j-000100 (GPU-1 stays held from outside)", got)
	}
}

func TestMemoryJobsNeitherPreemptNorArePreempted(t *testing.T) {
	in := preemptInput(1, running("j-000102", "bob", t0, 0, "GPU-0", "GPU-1", "GPU-2"))
	in.Config.SharedGPUs = []string{"GPU-3"}
	m := preemptible("j-000100", "", t0, "GPU-3")
	m.GPUMemory = 10 * gib
	in.Running = append(in.Running, m)
	if p := Schedule(in); len(p.Preemptions) != 0 {
		t.Errorf("preemptions %q of a memory job, want none", preempted(p))
	}
	mem := queued(2, "cat", 0)
	mem.GPUMemory = 65 * gib
	in.Queued = []QueuedJob{mem}
	if p := Schedule(in); len(p.Preemptions) != 0 {
		t.Errorf("preemptions %q for a memory job, want none", preempted(p))
	}
}

func TestPreemptibleJobsQueueBehindAndUseReservedGPUs(t *testing.T) {
	// ann's head job waits for 4 GPUs, 2 of them held until 11:00; bob's
	// preemptible job, submitted first with the higher fair share, comes
	// behind her and takes a reserved GPU although its limit ends after
	// the reservation.
	now := t0.Add(5 * time.Minute)
	head := queued(3, "ann", 4)
	pre := queued(1, "bob", 1)
	pre.Preemptible, pre.TimeLimit = true, 10*time.Hour
	in := Input{GPUs: hostGPUs(4), Now: now, Queued: []QueuedJob{head, pre},
		Running:   []RunningJob{running("j-000100", "cat", t0, 2*time.Hour, "GPU-0", "GPU-1")},
		FairShare: map[string]float64{"ann": 0.2, "bob": 1}}
	p := Schedule(in)
	if got := order(p); !slices.Equal(got, []string{"j-000003", "j-000001"}) {
		t.Errorf("order %q, want the preemptible job last", got)
	}
	if got := starts(p); !slices.Equal(got, []string{"j-000001=GPU-2"}) {
		t.Errorf("starts %q, want the preemptible job on a reserved GPU", got)
	}
	// Past preempt_after, with the preemptible job running, the head
	// preempts it, and a second preemptible job keeps off the
	// reservation.
	in.Now = t0.Add(2*time.Hour + time.Minute)
	in.Running = []RunningJob{preemptible("j-000001", "", now, "GPU-2")}
	pre2 := queued(4, "bob", 1)
	pre2.Preemptible, pre2.TimeLimit = true, 10*time.Hour
	in.Queued = []QueuedJob{head, pre2}
	p = Schedule(in)
	if got := preempted(p); !slices.Equal(got, []string{"j-000001>j-000003"}) {
		t.Errorf("preemptions %q, want j-000001 for j-000003", got)
	}
	if len(p.Starts) != 0 {
		t.Errorf("starts %q, want none: the head preempts, and its reservation binds", starts(p))
	}
	if w := p.Waits[0]; !strings.Contains(w.Text(), "preempting preemptible job j-000001, which holds GPUs it needs") {
		t.Errorf("the head's sentence %q does not name the preemption", w.Text())
	}
}

func TestPreemptedJobWaitsAsPreempted(t *testing.T) {
	j := queued(1, "ann", 4)
	j.Preempted, j.Preemptible = true, true
	in := Input{GPUs: hostGPUs(4), Now: t0.Add(time.Hour), Queued: []QueuedJob{j},
		Running: []RunningJob{running("j-000100", "cat", t0, 0, "GPU-0")}}
	p := Schedule(in)
	if w := p.Waits[0]; w.Reason != ReasonPreempted || !strings.HasPrefix(w.Text(), "preempted: its GPUs went to a job") {
		t.Errorf("wait %s %q, want preempted with its sentence", w.Reason, w.Text())
	}
}

func TestPreemptAtIsWhenTheHeadMayPreempt(t *testing.T) {
	in := preemptInput(1, preemptible("j-000100", "", t0, "GPU-0", "GPU-1", "GPU-2", "GPU-3"))
	in.Now = t0.Add(3 * time.Minute)
	p := Schedule(in)
	if want := t0.Add(time.Minute + DefaultPreemptAfter); !p.PreemptAt.Equal(want) || len(p.Preemptions) != 0 {
		t.Errorf("PreemptAt %v, preemptions %q; want %v and none yet", p.PreemptAt, preempted(p), want)
	}
	in.Running[0].Preemptible = false
	if p := Schedule(in); !p.PreemptAt.IsZero() {
		t.Errorf("PreemptAt %v with no preemptible job running, want zero", p.PreemptAt)
	}
}
