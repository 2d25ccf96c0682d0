package queue

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const gib = 1 << 30

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// hostGPUs returns n GPUs GPU-0 … GPU-(n-1) of 80 GiB.
func hostGPUs(n int) []GPU {
	gs := make([]GPU, n)
	for i := range gs {
		gs[i] = GPU{UUID: fmt.Sprintf("GPU-%d", i), Index: i, MemoryTotal: 80 * gib}
	}
	return gs
}

// queued returns a job j-00000N of user asking for gpus, submitted n
// minutes after t0.
func queued(n int, user string, gpus int) QueuedJob {
	return QueuedJob{ID: fmt.Sprintf("j-%06d", n), User: user, Team: "lab", GPUs: gpus, SubmittedAt: t0.Add(time.Duration(n) * time.Minute)}
}

func running(id, user string, started time.Time, limit time.Duration, gpus ...string) RunningJob {
	return RunningJob{ID: id, User: user, GPUs: gpus, StartedAt: started, TimeLimit: limit}
}

// starts returns the plan's starts as "job=GPU,GPU".
func starts(p Plan) []string {
	var out []string
	for _, s := range p.Starts {
		out = append(out, s.JobID+"="+strings.Join(s.GPUs, ","))
	}
	return out
}

// waits returns the plan's waits as "job reason: text".
func waits(p Plan) []string {
	var out []string
	for _, w := range p.Waits {
		out = append(out, fmt.Sprintf("%s %s: %s", w.JobID, w.Reason, w.Text()))
	}
	return out
}

func check(t *testing.T, p Plan, wantStarts, wantWaits []string) {
	t.Helper()
	if got := starts(p); !slices.Equal(got, wantStarts) {
		t.Errorf("starts:\n got %q\nwant %q", got, wantStarts)
	}
	if got := waits(p); !slices.Equal(got, wantWaits) {
		t.Errorf("waits:\n got %q\nwant %q", got, wantWaits)
	}
}

func TestSixJobsOnFourGPUs(t *testing.T) {
	in := Input{GPUs: hostGPUs(4), Now: t0.Add(time.Hour)}
	for i, u := range []string{"ann", "bob", "cat", "dan", "eve", "fay"} {
		in.Queued = append(in.Queued, queued(i+1, u, 1))
	}
	check(t, Schedule(in),
		[]string{"j-000001=GPU-0", "j-000002=GPU-1", "j-000003=GPU-2", "j-000004=GPU-3"},
		[]string{
			"j-000005 resources: waiting for 1 free GPU; none is free; no job ahead of you waits for GPUs; no start estimate: what it waits for has no time limit",
			"j-000006 resources: waiting behind j-000005 (eve), first in the queue, which waits for 1 free GPU; 1 job ahead of you waits for GPUs; no start estimate: what it waits for has no time limit",
		})

	// The next pass, with the four running under time limits.
	now := t0.Add(2 * time.Hour)
	in.Queued = in.Queued[4:]
	in.Running = []RunningJob{
		running("j-000001", "ann", t0, 4*time.Hour, "GPU-0"),
		running("j-000002", "bob", t0, 3*time.Hour, "GPU-1"),
		running("j-000003", "cat", t0.Add(-22*time.Minute), 2*time.Hour+time.Hour, "GPU-2"),
		running("j-000004", "dan", t0, 5*time.Hour, "GPU-3"),
	}
	in.Now = now
	check(t, Schedule(in), nil, []string{
		"j-000005 resources: waiting for 1 free GPU; none is free; j-000003 (cat) reaches its time limit in 38 min; no job ahead of you waits for GPUs; next GPUs free by j-000003's time limit at 11:38 UTC",
		"j-000006 resources: waiting behind j-000005 (eve), first in the queue, which waits for 1 free GPU; 1 job ahead of you waits for GPUs; next GPUs free by j-000002's time limit at 12:00 UTC",
	})

	// One ends: the first waiting job starts on its GPU.
	in.Running = slices.Delete(in.Running, 1, 2)
	check(t, Schedule(in), []string{"j-000005=GPU-1"}, []string{
		"j-000006 resources: waiting for 1 free GPU; none is free; j-000003 (cat) reaches its time limit in 38 min; no job ahead of you waits for GPUs; next GPUs free by j-000003's time limit at 11:38 UTC",
	})
}

func TestTwoGPUJobWaitsForTwo(t *testing.T) {
	in := Input{
		GPUs: hostGPUs(4),
		Running: []RunningJob{
			running("j-000001", "carol", t0, time.Hour, "GPU-0"),
			running("j-000002", "dave", t0, 2*time.Hour, "GPU-1"),
			running("j-000003", "erin", t0, 3*time.Hour, "GPU-3"),
		},
		Queued: []QueuedJob{queued(10, "alice", 2), queued(11, "bob", 1)},
		Now:    t0.Add(22 * time.Minute),
	}
	// The one-GPU job behind, with no time limit, does not take the free
	// GPU: the head's reservation at 10:00 needs it.
	check(t, Schedule(in), nil, []string{
		"j-000010 resources: waiting for 2 free GPUs; 1 is free; j-000001 (carol) reaches its time limit in 38 min; no job ahead of you waits for GPUs; next GPUs free by j-000001's time limit at 10:00 UTC",
		"j-000011 resources: waiting behind j-000010 (alice), first in the queue, which waits for 2 free GPUs; 1 job ahead of you waits for GPUs; next GPUs free by j-000002's time limit at 11:00 UTC",
	})
	in.Running = in.Running[1:]
	check(t, Schedule(in), []string{"j-000010=GPU-0,GPU-2"}, []string{
		"j-000011 resources: waiting for 1 free GPU; none is free; j-000002 (dave) reaches its time limit in 1 h 38 min; no job ahead of you waits for GPUs; next GPUs free by j-000002's time limit at 11:00 UTC",
	})
}

func TestHeldJobKeepsPlaceAndDoesNotStart(t *testing.T) {
	held := queued(1, "alice", 1)
	held.Held = true
	in := Input{GPUs: hostGPUs(1), Queued: []QueuedJob{queued(2, "bob", 1), held}, Now: t0}
	check(t, Schedule(in), []string{"j-000002=GPU-0"}, []string{"j-000001 held: " + heldText})

	// Released, it is first again.
	in.Queued[1].Held = false
	check(t, Schedule(in), []string{"j-000001=GPU-0"}, []string{
		"j-000002 resources: waiting for 1 free GPU; none is free; no job ahead of you waits for GPUs; no start estimate: what it waits for has no time limit",
	})
}

func TestOutsideContainerHoldsGPU2(t *testing.T) {
	in := Input{
		GPUs: hostGPUs(4),
		Outside: Outside{Containers: []OutsideContainer{
			{Name: "notebook", User: "bob", GPUs: []string{"GPU-2"}},
			{Name: "nameless", GPUs: []string{"GPU-9"}}, // not on this host
		}},
		Now: t0,
	}
	for i := 1; i <= 4; i++ {
		in.Queued = append(in.Queued, queued(i, fmt.Sprintf("u%d", i), 1))
	}
	// Binpack takes the GPUs next to the busy one first.
	check(t, Schedule(in), []string{"j-000001=GPU-1", "j-000002=GPU-0", "j-000003=GPU-3"}, []string{
		"j-000004 outside_use: waiting for 1 free GPU; none is free; GPU 2 is held by bob's container notebook (outside the queue); no job ahead of you waits for GPUs; no start estimate: what it waits for has no time limit",
	})

	// A container nobody is known for, and a job that would not fit anyway.
	in.Outside.Containers[0].User = ""
	in.Queued = []QueuedJob{queued(5, "u5", 4)}
	check(t, Schedule(in), nil, []string{
		"j-000005 outside_use: waiting for 4 free GPUs; 3 are free; GPU 2 is held by container notebook (outside the queue); no job ahead of you waits for GPUs; no start estimate: what it waits for has no time limit",
	})
	in.Running = []RunningJob{running("j-000001", "u1", t0, 0, "GPU-0")}
	check(t, Schedule(in), nil, []string{
		"j-000005 resources: waiting for 4 free GPUs; 2 are free; GPU 2 is held by container notebook (outside the queue); no job ahead of you waits for GPUs; no start estimate: what it waits for has no time limit",
	})
}

func TestOutsideMemoryThreshold(t *testing.T) {
	for _, tc := range []struct {
		name      string
		used      uint64
		threshold float64
		want      []string // waits; none means it starts
	}{
		{"under", 3 * gib, 0, nil},
		{"at the threshold", 4 * gib, 0, nil},
		{"over", 5 * gib, 0, []string{
			"j-000001 outside_use: waiting for 1 free GPU; none is free; GPU 0 has 5.0 GiB used by processes outside the queue (over 5% of its memory); no job ahead of you waits for GPUs; no start estimate: what it waits for has no time limit",
		}},
		{"small", 512 << 20, 0.005, []string{
			"j-000001 outside_use: waiting for 1 free GPU; none is free; GPU 0 has 512 MiB used by processes outside the queue (over 0.5% of its memory); no job ahead of you waits for GPUs; no start estimate: what it waits for has no time limit",
		}},
		{"under a set threshold", 30 * gib, 0.5, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{
				GPUs:    hostGPUs(1),
				Queued:  []QueuedJob{queued(1, "alice", 1)},
				Outside: Outside{MemoryUsed: map[string]uint64{"GPU-0": tc.used}},
				Config:  Config{OutsideMemoryThreshold: tc.threshold},
				Now:     t0,
			}
			var wantStarts []string
			if tc.want == nil {
				wantStarts = []string{"j-000001=GPU-0"}
			}
			check(t, Schedule(in), wantStarts, tc.want)
		})
	}
}

func TestUserGPULimit(t *testing.T) {
	in := Input{
		GPUs: hostGPUs(8),
		Running: []RunningJob{
			running("j-000001", "alice", t0, time.Hour, "GPU-0", "GPU-1", "GPU-2"),
		},
		Queued: []QueuedJob{queued(2, "alice", 2), queued(3, "bob", 1), queued(4, "alice", 1), queued(5, "alice", 1), queued(6, "carol", 5)},
		Now:    t0,
	}
	check(t, Schedule(in), []string{"j-000003=GPU-3", "j-000004=GPU-4"}, []string{
		"j-000002 user_gpu_limit: alice's jobs hold 3 of the 4 GPUs queue.max_gpus_per_user allows; this job asks for 2 more",
		"j-000005 user_gpu_limit: alice's jobs hold 4 of the 4 GPUs queue.max_gpus_per_user allows; this job asks for 1 more",
		"j-000006 user_gpu_limit: asks for 5 free GPUs, more than carol's limit of 4 (queue.max_gpus_per_user)",
	})

	in.Config = Config{MaxGPUsPerUser: 2, UserMaxGPUs: map[string]int{"alice": 8, "bob": 0}}
	check(t, Schedule(in), []string{"j-000002=GPU-3,GPU-4", "j-000004=GPU-5", "j-000005=GPU-6"}, []string{
		"j-000003 user_gpu_limit: asks for 1 free GPU, more than bob's limit of 0 (queue.max_gpus_per_user)",
		"j-000006 user_gpu_limit: asks for 5 free GPUs, more than carol's limit of 2 (queue.max_gpus_per_user)",
	})
}

func TestTooBigAndInvalidDoNotBlock(t *testing.T) {
	in := Input{GPUs: hostGPUs(2), Queued: []QueuedJob{queued(1, "a", 3), queued(2, "b", 0), queued(3, "c", 1)},
		Config: Config{MaxGPUsPerUser: 8}, Now: t0}
	check(t, Schedule(in), []string{"j-000003=GPU-0"}, []string{
		"j-000001 too_big: asks for 3 GPUs; this host has 2",
		"j-000002 invalid_request: asks for 0 GPUs; a job needs at least 1",
	})
}

func TestFIFOOrder(t *testing.T) {
	a, b, c := queued(5, "a", 1), queued(5, "b", 1), queued(1, "c", 1)
	a.ID, b.ID = "j-000020", "j-000010" // same submit time: by id
	in := Input{GPUs: hostGPUs(2), Queued: []QueuedJob{a, b, c}, Now: t0}
	check(t, Schedule(in), []string{"j-000001=GPU-0", "j-000010=GPU-1"}, []string{
		"j-000020 resources: waiting for 1 free GPU; none is free; no job ahead of you waits for GPUs; no start estimate: what it waits for has no time limit",
	})
}

func TestPlacement(t *testing.T) {
	four := []QueuedJob{queued(1, "a", 1), queued(2, "b", 1), queued(3, "c", 1), queued(4, "d", 1)}
	for _, tc := range []struct {
		name    string
		p       Placement
		queued  []QueuedJob
		running []RunningJob
		want    []string
	}{
		{"binpack fills from the lowest index", Binpack, four, nil,
			[]string{"j-000001=GPU-0", "j-000002=GPU-1", "j-000003=GPU-2", "j-000004=GPU-3"}},
		{"default is binpack", "", four[:2], nil, []string{"j-000001=GPU-0", "j-000002=GPU-1"}},
		{"spread leaves gaps", Spread, four, nil,
			[]string{"j-000001=GPU-0", "j-000002=GPU-2", "j-000003=GPU-4", "j-000004=GPU-6"}},
		{"binpack next to a busy GPU", Binpack, four[:1], []RunningJob{running("j-9", "z", t0, 0, "GPU-4")},
			[]string{"j-000001=GPU-3"}},
		{"binpack fills a gap", Binpack, four[:1], []RunningJob{running("j-9", "z", t0, 0, "GPU-0", "GPU-2")},
			[]string{"j-000001=GPU-1"}},
		{"binpack between busy GPUs first", Binpack, []QueuedJob{queued(1, "a", 2)}, []RunningJob{running("j-9", "z", t0, 0, "GPU-1", "GPU-3")},
			[]string{"j-000001=GPU-0,GPU-2"}},
		{"spread away from a busy GPU", Spread, four[:1], []RunningJob{running("j-9", "z", t0, 0, "GPU-0", "GPU-1")},
			[]string{"j-000001=GPU-3"}},
		{"binpack two GPUs together", Binpack, []QueuedJob{queued(1, "a", 2)}, []RunningJob{running("j-9", "z", t0, 0, "GPU-3")},
			[]string{"j-000001=GPU-1,GPU-2"}},
		{"spread two GPUs apart", Spread, []QueuedJob{queued(1, "a", 2)}, nil,
			[]string{"j-000001=GPU-0,GPU-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{GPUs: hostGPUs(8), Queued: tc.queued, Running: tc.running, Config: Config{Placement: tc.p}, Now: t0}
			if got := starts(Schedule(in)); !slices.Equal(got, tc.want) {
				t.Errorf("starts = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDeterministic runs the same input, shuffled in every list, and
// wants the same plan each time; Schedule must not change its input.
func TestDeterministic(t *testing.T) {
	in := benchInput(500, 20, 8)
	in.Running = []RunningJob{running("j-r1", "u1", t0, time.Hour, "GPU-5"), running("j-r2", "u2", t0, 2*time.Hour, "GPU-6")}
	in.Outside = Outside{
		Containers: []OutsideContainer{{Name: "nb", User: "bob", GPUs: []string{"GPU-1"}}},
		MemoryUsed: map[string]uint64{"GPU-2": 10 * gib},
	}
	in.Config.UserMaxGPUs = map[string]int{"u3": 1}
	want := Schedule(in)
	if len(want.Starts) == 0 || len(want.Starts)+len(want.Waits) != len(in.Queued) {
		t.Fatalf("plan has %d starts and %d waits for %d jobs", len(want.Starts), len(want.Waits), len(in.Queued))
	}
	keep := slices.Clone(in.Queued)
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		if got := Schedule(in); !reflect.DeepEqual(got, want) {
			t.Fatal("the same input gave another plan")
		}
		if !slices.Equal(in.Queued, keep) {
			t.Fatal("Schedule changed its input")
		}
		r.Shuffle(len(in.Queued), func(i, j int) { in.Queued[i], in.Queued[j] = in.Queued[j], in.Queued[i] })
		r.Shuffle(len(in.GPUs), func(i, j int) { in.GPUs[i], in.GPUs[j] = in.GPUs[j], in.GPUs[i] })
		slices.Reverse(in.Running)
		keep = slices.Clone(in.Queued)
	}
}

func TestParsePlacement(t *testing.T) {
	for s, want := range map[string]Placement{"": Binpack, "binpack": Binpack, "spread": Spread, "target": Target} {
		if got, err := ParsePlacement(s); err != nil || got != want {
			t.Errorf("ParsePlacement(%q) = %q, %v, want %q", s, got, err, want)
		}
	}
	if _, err := ParsePlacement("nearest"); err == nil || !strings.Contains(err.Error(), `"nearest"`) {
		t.Errorf("ParsePlacement(nearest) = %v, want an error naming it", err)
	}
}

// benchInput returns jobs queued jobs of users users, one or two GPUs
// each, on gpus GPUs, in a shuffled order.
func benchInput(jobs, users, gpus int) Input {
	in := Input{GPUs: hostGPUs(gpus), Queued: make([]QueuedJob, jobs), Now: t0.Add(24 * time.Hour)}
	for i := range in.Queued {
		in.Queued[i] = queued(i+1, fmt.Sprintf("u%d", i%users), 1+i%7/6)
	}
	r := rand.New(rand.NewPCG(3, 4))
	r.Shuffle(len(in.Queued), func(i, j int) { in.Queued[i], in.Queued[j] = in.Queued[j], in.Queued[i] })
	return in
}

// BenchmarkSchedule10k is one pass over 10,000 queued jobs from 100 users
// on 8 GPUs, four of them busy; the target is at most 10 ms.
func BenchmarkSchedule10k(b *testing.B) {
	in := benchInput(10000, 100, 8)
	in.Running = []RunningJob{
		running("j-r1", "u1", t0, 4*time.Hour, "GPU-0", "GPU-1"),
		running("j-r2", "u2", t0, 8*time.Hour, "GPU-4", "GPU-5"),
	}
	b.ReportAllocs()
	for b.Loop() {
		Schedule(in)
	}
}
