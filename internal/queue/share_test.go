package queue

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sharedHost returns four 80 GiB GPUs, GPUs 2 and 3 marked for sharing.
func sharedHost() Input {
	return Input{GPUs: hostGPUs(4), Config: Config{SharedGPUs: []string{"GPU-2", "GPU-3"}}, Now: t0}
}

func memJob(n int, user string, mem uint64) QueuedJob {
	j := queued(n, user, 0)
	j.GPUMemory = mem
	return j
}

func memRunning(id string, mem uint64, gpu string, limit time.Duration) RunningJob {
	return RunningJob{ID: id, User: "zed", GPUs: []string{gpu}, GPUMemory: mem, StartedAt: t0, TimeLimit: limit}
}

func TestMemoryPackingAtTheEdge(t *testing.T) {
	// GPU 2: 40 GiB declared, 2 GiB outside; usable 90% of 80 = 72 GiB, so
	// 30 GiB fits exactly and a byte more does not. GPU 3 is emptier: binpack
	// puts the 30 GiB job on GPU 2.
	in := sharedHost()
	in.Running = []RunningJob{memRunning("j-m", 40*gib, "GPU-2", time.Hour)}
	in.Outside.MemoryUsed = map[string]uint64{"GPU-2": 2 * gib}
	in.Queued = []QueuedJob{memJob(1, "ann", 30*gib)}
	check(t, Schedule(in), []string{"j-000001=GPU-2"}, nil)

	in.Queued = []QueuedJob{memJob(1, "ann", 30*gib+1)}
	check(t, Schedule(in), []string{"j-000001=GPU-3"}, nil)

	// GPU 3 taken by a container outside the queue: the bigger job waits.
	in.Outside.Containers = []OutsideContainer{{Name: "nb", User: "bob", GPUs: []string{"GPU-3"}}}
	p := Schedule(in)
	check(t, p, nil, []string{
		"j-000001 outside_use: waiting for 30.0 GiB on a shared GPU; GPU 2 has 30.0 GiB of its 72.0 GiB free (40.0 GiB declared by jobs, 2.0 GiB used outside the queue); GPU 3 is held by bob's container nb (outside the queue); no job ahead of you waits for shared GPU memory; next GPU memory free by j-m's time limit at 10:00 UTC",
	})
}

func TestTwoMemoryJobsShareAThirdWaits(t *testing.T) {
	in := sharedHost()
	in.Config.SharedGPUs = []string{"GPU-3"}
	in.Queued = []QueuedJob{memJob(1, "ann", 30*gib), memJob(2, "bob", 30*gib), memJob(3, "cat", 30*gib), queued(4, "dan", 3)}
	in.Queued[1].TimeLimit = 2 * time.Hour
	p := Schedule(in)
	check(t, p, []string{"j-000001=GPU-3", "j-000002=GPU-3", "j-000004=GPU-0,GPU-1,GPU-2"}, []string{
		"j-000003 resources: waiting for 30.0 GiB on a shared GPU; GPU 3 has 12.0 GiB of its 72.0 GiB free (60.0 GiB declared by jobs); no job ahead of you waits for shared GPU memory; next GPU memory free by j-000002's time limit at 11:00 UTC",
	})
	if p.Starts[0].Placement == nil || len(p.Starts[0].Placement.Candidates) != 1 || !p.Starts[0].Placement.Candidates[0].Chosen {
		t.Errorf("placement = %+v, want GPU 3 the one candidate, chosen", p.Starts[0].Placement)
	}
}

func TestMemoryRequests(t *testing.T) {
	in := sharedHost()
	both := queued(2, "bob", 1)
	both.GPUMemory = gib
	in.Queued = []QueuedJob{memJob(1, "ann", 73*gib), both, queued(3, "cat", 3), memJob(4, "dan", gib)}
	in.Config.UserMaxGPUs = map[string]int{"dan": 0}
	check(t, Schedule(in), nil, []string{
		"j-000001 too_big: asks for 73.0 GiB on one GPU; the most a shared GPU here allows is 72.0 GiB (90% of 80.0 GiB, queue.shared_memory_fraction)",
		"j-000002 invalid_request: asks for 1 GPUs and 1.0 GiB of GPU memory; a job asks for one or the other",
		"j-000003 too_big: asks for 3 GPUs; this host has 2 not marked for sharing",
		"j-000004 user_gpu_limit: dan's limit is 0 GPUs (queue.max_gpus_per_user): none of its jobs start",
	})
	in.Config.SharedGPUs = nil
	in.Queued = in.Queued[:1]
	check(t, Schedule(in), nil, []string{
		"j-000001 too_big: asks for 73.0 GiB on a shared GPU; this host has no GPU marked for sharing (queue.shared_gpus)",
	})
}

func TestMemoryBackfill(t *testing.T) {
	// One shared GPU of 72 GiB usable: 50 GiB declared until 10:00. The head
	// asks for 40 GiB: reserved at 10:00. A 20 GiB job that ends by then
	// backfills; one that runs past it waits.
	in := sharedHost()
	in.Config.SharedGPUs = []string{"GPU-3"}
	in.Running = []RunningJob{memRunning("j-m", 50*gib, "GPU-3", time.Hour)}
	short, long := memJob(2, "bob", 20*gib), memJob(3, "cat", 20*gib)
	short.TimeLimit, long.TimeLimit = time.Hour, 61*time.Minute
	in.Queued = []QueuedJob{memJob(1, "ann", 40*gib), short, long}
	p := Schedule(in)
	if got := starts(p); !slices.Equal(got, []string{"j-000002=GPU-3"}) {
		t.Errorf("starts = %q, want bob's short job", got)
	}
	if len(p.Waits) != 2 || !p.Waits[0].EstimatedStart.Equal(t0.Add(time.Hour)) || p.Waits[1].JobID != "j-000003" {
		t.Errorf("waits = %+v, want the head at 10:00 and cat's job waiting", p.Waits)
	}
}

func TestTargetPlacement(t *testing.T) {
	// u = utilisation + ann's expected 0.3: GPU 0 0.4 (score 70), GPU 1
	// 0.8 (90), GPU 2 0.3 (60); GPU 3 is busy.
	in := Input{
		GPUs:     hostGPUs(4),
		Running:  []RunningJob{running("j-r", "zed", t0, time.Hour, "GPU-3")},
		Queued:   []QueuedJob{queued(1, "ann", 1)},
		Util:     map[string]float64{"GPU-0": 0.1, "GPU-1": 0.5, "GPU-2": 0},
		Expected: map[string]float64{"ann": 0.3},
		Config:   Config{Placement: Target},
		Now:      t0,
	}
	p := Schedule(in)
	if got := starts(p); !slices.Equal(got, []string{"j-000001=GPU-1"}) {
		t.Fatalf("starts = %q, want GPU 1", got)
	}
	rec := p.Starts[0].Placement
	want := []struct {
		uuid   string
		score  float64
		chosen bool
	}{{"GPU-1", 90, true}, {"GPU-0", 70, false}, {"GPU-2", 60, false}}
	if rec.Policy != Target || len(rec.Candidates) != len(want) {
		t.Fatalf("record = %+v", rec)
	}
	for k, w := range want {
		c := rec.Candidates[k]
		if c.UUID != w.uuid || !near(c.Score, w.score) || c.Chosen != w.chosen {
			t.Errorf("candidate %d = %+v, want %s score %v chosen %v", k, c, w.uuid, w.score, w.chosen)
		}
	}

	// A new user is expected to use the whole GPU: u = util + 1, so the
	// idlest GPU comes closest (GPU 2: 1.0, score 70); a target of 1 makes
	// no difference in order.
	in.Queued[0].User = "new"
	if got := starts(Schedule(in)); !slices.Equal(got, []string{"j-000001=GPU-2"}) {
		t.Errorf("starts for a new user = %q, want GPU 2", got)
	}
	// Ties break by binpack: all idle, the GPU next to the busy one.
	in.Util = nil
	if got := starts(Schedule(in)); !slices.Equal(got, []string{"j-000001=GPU-2"}) {
		t.Errorf("starts with equal scores = %q, want GPU 2 (next to busy GPU 3)", got)
	}
}

func TestTargetMemoryPlacement(t *testing.T) {
	// Two shared GPUs; the memory job's expected 0.4 brings GPU 2 (0.2) to
	// 0.6 (score 90) and GPU 3 (0.5) to 0.9 (80). A second job of the same
	// user in the pass sees GPU 2 at 1.0 (70) and goes to GPU 3.
	in := sharedHost()
	in.Config.Placement = Target
	in.Util = map[string]float64{"GPU-2": 0.2, "GPU-3": 0.5}
	in.Expected = map[string]float64{"ann": 0.4}
	in.Queued = []QueuedJob{memJob(1, "ann", 10*gib), memJob(2, "ann", 10*gib)}
	p := Schedule(in)
	if got := starts(p); !slices.Equal(got, []string{"j-000001=GPU-2", "j-000002=GPU-3"}) {
		t.Errorf("starts = %q", got)
	}
	if c := p.Starts[1].Placement.Candidates; len(c) != 2 || c[0].UUID != "GPU-3" || !near(c[0].Score, 80) || !near(c[1].Score, 70) || !near(c[1].Util, 1.0) {
		t.Errorf("second record = %+v", c)
	}
}

func TestPlacementRecordBinpack(t *testing.T) {
	in := Input{GPUs: hostGPUs(4), Running: []RunningJob{running("j-r", "zed", t0, 0, "GPU-1")}, Queued: []QueuedJob{queued(1, "ann", 1)}, Now: t0}
	rec := Schedule(in).Starts[0].Placement
	var got []string
	for _, c := range rec.Candidates {
		got = append(got, strings.Join([]string{c.UUID, ftoa(c.Score), map[bool]string{true: "chosen", false: ""}[c.Chosen]}, " "))
	}
	if want := []string{"GPU-0 1 chosen", "GPU-2 1 ", "GPU-3 0 "}; rec.Policy != Binpack || !slices.Equal(got, want) {
		t.Errorf("record %s %q, want binpack %q", rec.Policy, got, want)
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func TestSpreadMemoryPlacement(t *testing.T) {
	// Spread puts a memory job on the emptiest shared GPU; binpack on the
	// fullest it fits on.
	in := sharedHost()
	in.Running = []RunningJob{memRunning("j-m", 20*gib, "GPU-2", 0)}
	in.Queued = []QueuedJob{memJob(1, "ann", 10*gib)}
	check(t, Schedule(in), []string{"j-000001=GPU-2"}, nil)
	in.Config.Placement = Spread
	p := Schedule(in)
	check(t, p, []string{"j-000001=GPU-3"}, nil)
	// 10 of 72 GiB in use on GPU 3 once the job is on it, 30 on GPU 2.
	if c := p.Starts[0].Placement.Candidates; len(c) != 2 || !near(c[0].Score, 1-10.0/72) || !near(c[1].Score, 1-30.0/72) {
		t.Errorf("candidates = %+v", c)
	}
}
