package queue

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestFairShareFactor(t *testing.T) {
	for _, tc := range []struct {
		usage, share, totalUsage, totalShares, want float64
	}{
		{0, 1, 100, 4, 1},                    // used nothing
		{30, 1, 0, 4, 1},                     // nobody used anything
		{25, 1, 100, 4, 0.5},                 // used exactly their share
		{30, 1, 100, 4, 0.43527528164806206}, // 2^(-0.3/0.25) = 2^-1.2
		{50, 2, 100, 4, 0.5},                 // twice the share, twice the use
		{100, 1, 100, 4, 0.0625},             // 2^-4
		{10, 0, 100, 4, 0},                   // no share
	} {
		if got := FairShareFactor(tc.usage, tc.share, tc.totalUsage, tc.totalShares); !near(got, tc.want) {
			t.Errorf("FairShareFactor(%v, %v, %v, %v) = %v, want %v", tc.usage, tc.share, tc.totalUsage, tc.totalShares, got, tc.want)
		}
	}
}

func TestParseClass(t *testing.T) {
	for s, want := range map[string]Class{"": ClassNormal, "normal": ClassNormal, "low": ClassLow, "high": ClassHigh} {
		if got, err := ParseClass(s); err != nil || got != want {
			t.Errorf("ParseClass(%q) = %q, %v, want %q", s, got, err, want)
		}
	}
	if _, err := ParseClass("urgent"); err == nil || !strings.Contains(err.Error(), `"urgent"`) {
		t.Errorf("ParseClass(urgent) = %v, want an error naming it", err)
	}
}

// ranked returns the plan's order as "job:priority".
func order(p Plan) []string {
	var out []string
	for _, r := range p.Order {
		out = append(out, r.JobID)
	}
	return out
}

func TestFairShareOrder(t *testing.T) {
	// ann used 30 of the 100 decayed GPU-hours with 1 of 4 shares: her
	// factor is 2^-1.2 = 0.4353; bob used nothing: 1. bob's later job goes
	// first.
	ann := FairShareFactor(30, 1, 100, 4)
	in := Input{
		GPUs:      hostGPUs(1),
		Queued:    []QueuedJob{queued(1, "ann", 1), queued(2, "bob", 1)},
		FairShare: map[string]float64{"ann": ann},
		Now:       t0.Add(5 * time.Hour),
	}
	p := Schedule(in)
	if got := order(p); !slices.Equal(got, []string{"j-000002", "j-000001"}) {
		t.Fatalf("order = %q, want bob's job first", got)
	}
	if !near(p.Order[0].Priority, 1) || !near(p.Order[1].Priority, 0.43527528164806206) || p.Order[1].Position != 2 {
		t.Errorf("order = %+v", p.Order)
	}
	if w := p.Waits[0]; w.JobID != "j-000001" || w.Position != 2 || !near(w.Priority, ann) {
		t.Errorf("wait = %+v, want ann's job at position 2 with her factor", w)
	}

	// With age weighed in (full after 10 h): ann's job has waited 5 h
	// minus 1 min, bob's 5 h minus 2 min: 0.4353 + 0.4983 < 1 + 0.4967.
	in.Config = Config{Weights: Weights{FairShare: 1, Age: 1}, AgeMax: 10 * time.Hour}
	if got := order(Schedule(in)); !slices.Equal(got, []string{"j-000002", "j-000001"}) {
		t.Errorf("order with age = %q, want bob first", got)
	}
	// Age alone: first come, first served.
	in.Config.Weights = Weights{Age: 1}
	if got := order(Schedule(in)); !slices.Equal(got, []string{"j-000001", "j-000002"}) {
		t.Errorf("order by age = %q, want ann first", got)
	}
	// The class outweighs both.
	in.Config.Weights = Weights{FairShare: 1, Age: 1, Class: 10}
	in.Queued[0].Class = ClassHigh
	in.Queued[1].Class = ClassLow
	if got := order(Schedule(in)); !slices.Equal(got, []string{"j-000001", "j-000002"}) {
		t.Errorf("order by class = %q, want ann's high job first", got)
	}
	// Equal factors: FIFO.
	in.Config = Config{}
	in.FairShare = map[string]float64{"ann": 0.5, "bob": 0.5}
	in.Queued[0].Class, in.Queued[1].Class = "", ""
	if got := order(Schedule(in)); !slices.Equal(got, []string{"j-000001", "j-000002"}) {
		t.Errorf("order with equal factors = %q, want FIFO", got)
	}
}

func TestTeamGPULimit(t *testing.T) {
	job := func(n int, user, team string, gpus int) QueuedJob {
		j := queued(n, user, gpus)
		j.Team = team
		return j
	}
	in := Input{
		GPUs:    hostGPUs(8),
		Running: []RunningJob{{ID: "j-r", User: "ann", Team: "nlp", GPUs: []string{"GPU-0", "GPU-1"}, StartedAt: t0}},
		Queued: []QueuedJob{
			job(1, "bob", "nlp", 2), job(2, "cat", "nlp", 1), job(3, "dan", "vision", 2),
			job(4, "eve", "vision", 1), job(5, "fay", "", 3), job(6, "gus", "nlp", 4),
		},
		Config: Config{MaxGPUsPerTeam: 2, TeamMaxGPUs: map[string]int{"nlp": 3}},
		Now:    t0,
	}
	check(t, Schedule(in), []string{"j-000002=GPU-2", "j-000003=GPU-3,GPU-4", "j-000005=GPU-5,GPU-6,GPU-7"}, []string{
		"j-000001 team_gpu_limit: team nlp's jobs hold 2 of the 3 GPUs queue.max_gpus_per_team allows; this job asks for 2 more",
		"j-000004 team_gpu_limit: team vision's jobs hold 2 of the 2 GPUs queue.max_gpus_per_team allows; this job asks for 1 more",
		"j-000006 team_gpu_limit: asks for 4 free GPUs, more than team nlp's limit of 3 (queue.max_gpus_per_team)",
	})
}

func TestBudget(t *testing.T) {
	a, b := queued(1, "ann", 1), queued(2, "bob", 1)
	a.Team, b.Team = "nlp", "vision"
	in := Input{GPUs: hostGPUs(1), Queued: []QueuedJob{a, b}, OverBudget: map[string]bool{"nlp": true}, Now: t0}
	check(t, Schedule(in), []string{"j-000002=GPU-0"}, []string{
		"j-000001 budget: team nlp is over its GPU-hour budget for this month (queue.budgets); its jobs wait for the next month or an admin to lift it",
	})
}

func limited(n int, user string, gpus int, limit time.Duration) QueuedJob {
	j := queued(n, user, gpus)
	j.TimeLimit = limit
	return j
}

func TestBackfillAroundReservation(t *testing.T) {
	// GPUs 0–1 free at 10:00 (j-a's limit), GPU 2 at 12:00, GPU 3 free now.
	// The head asks for 3: reserved at 10:00 on GPUs 0, 1 and 3.
	in := Input{
		GPUs: hostGPUs(4),
		Running: []RunningJob{
			running("j-a", "zed", t0.Add(-time.Hour), 2*time.Hour, "GPU-0", "GPU-1"),
			running("j-b", "zed", t0, 3*time.Hour, "GPU-2"),
		},
		Queued: []QueuedJob{
			limited(1, "ann", 3, 4*time.Hour),
			limited(2, "bob", 1, 2*time.Hour),    // would run past 10:00 on GPU 3: refused
			limited(3, "cat", 1, 30*time.Minute), // ends 09:30: backfills
			queued(4, "dan", 1),                  // no time limit: refused
		},
		Config: Config{MaxGPUsPerUser: 8},
		Now:    t0,
	}
	p := Schedule(in)
	check(t, p, []string{"j-000003=GPU-3"}, []string{
		"j-000001 resources: waiting for 3 free GPUs; 1 is free; j-a (zed) reaches its time limit in 1 h; no job ahead of you waits for GPUs; next GPUs free by j-a's time limit at 10:00 UTC",
		"j-000002 resources: waiting behind j-000001 (ann), first in the queue, which waits for 3 free GPUs; 1 job ahead of you waits for GPUs; next GPUs free by j-b's time limit at 12:00 UTC",
		"j-000004 resources: waiting behind j-000001 (ann), first in the queue, which waits for 3 free GPUs; 2 jobs ahead of you wait for GPUs; next GPUs free by j-000001's time limit at 14:00 UTC",
	})
	want := []time.Time{t0.Add(time.Hour), t0.Add(3 * time.Hour), t0.Add(5 * time.Hour)}
	for k, w := range p.Waits {
		if !w.EstimatedStart.Equal(want[k]) {
			t.Errorf("%s estimated at %v, want %v", w.JobID, w.EstimatedStart, want[k])
		}
	}

	// One more GPU, free now and not one the head needs: bob's long job
	// takes it.
	in.GPUs = hostGPUs(5)
	p = Schedule(in)
	if got := starts(p); !slices.Equal(got, []string{"j-000002=GPU-4", "j-000003=GPU-3"}) {
		t.Errorf("starts = %q, want bob on the unreserved GPU 4, cat on GPU 3", got)
	}
	if p.Waits[0].JobID != "j-000001" || !p.Waits[0].EstimatedStart.Equal(t0.Add(time.Hour)) {
		t.Errorf("head = %+v, want it still at 10:00", p.Waits[0])
	}
}

func TestNoEstimateWithoutTimeLimits(t *testing.T) {
	in := Input{
		GPUs:    hostGPUs(2),
		Running: []RunningJob{running("j-a", "zed", t0, 0, "GPU-0")},
		Queued:  []QueuedJob{limited(1, "ann", 2, time.Hour), limited(2, "bob", 1, time.Minute)},
		Now:     t0,
	}
	// The head can never be estimated: it keeps every free GPU, first come,
	// first served, and bob's one-minute job waits too.
	p := Schedule(in)
	if len(p.Starts) != 0 || len(p.Waits) != 2 || !p.Waits[0].EstimatedStart.IsZero() || !p.Waits[1].EstimatedStart.IsZero() {
		t.Errorf("plan = %+v, want both waiting without estimates", p)
	}
}

// fairBenchInput is issue 14's load: 10,000 queued jobs from 100 users in
// 10 teams on 8 GPUs, GPUs 6 and 7 shared and 64 of the jobs memory jobs,
// with fair-share factors, class weights, team caps, a team over budget,
// time limits on every job (so reservations and backfill run), four whole
// GPUs and both shared GPUs busy, and target placement.
func fairBenchInput() Input {
	in := benchInput(10000, 100, 8)
	in.Config = Config{
		Placement:      Target,
		MaxGPUsPerTeam: 3,
		Weights:        Weights{FairShare: 1, Age: 0.5, Class: 0.2},
		SharedGPUs:     []string{"GPU-6", "GPU-7"},
	}
	in.FairShare, in.Expected, in.Util = map[string]float64{}, map[string]float64{}, map[string]float64{}
	for u := range 100 {
		user := fmt.Sprintf("u%d", u)
		in.FairShare[user] = FairShareFactor(float64(u%17), 1, 100, 100)
		in.Expected[user] = float64(u%10) / 10
	}
	for i := range 8 {
		in.Util[fmt.Sprintf("GPU-%d", i)] = float64(i) / 10
	}
	in.OverBudget = map[string]bool{"t3": true}
	mem := 0
	for i := range in.Queued {
		j := &in.Queued[i]
		n, _ := strconv.Atoi(strings.TrimPrefix(j.ID, "j-"))
		j.Team = fmt.Sprintf("t%d", n%10)
		j.TimeLimit = time.Duration(1+n%8) * time.Hour
		j.Class = []Class{ClassLow, ClassNormal, ClassHigh}[n%3]
		if n%150 == 0 && mem < 64 {
			j.GPUs, j.GPUMemory = 0, uint64(10+n%30)*gib
			mem++
		}
	}
	in.Running = []RunningJob{
		{ID: "j-r1", User: "u1", Team: "t1", GPUs: []string{"GPU-0", "GPU-1"}, StartedAt: t0, TimeLimit: 30 * time.Hour},
		{ID: "j-r2", User: "u2", Team: "t2", GPUs: []string{"GPU-4", "GPU-5"}, StartedAt: t0, TimeLimit: 32 * time.Hour},
		{ID: "j-r3", User: "u3", Team: "t3", GPUs: []string{"GPU-6"}, GPUMemory: 60 * gib, StartedAt: t0, TimeLimit: 26 * time.Hour},
		{ID: "j-r4", User: "u4", Team: "t4", GPUs: []string{"GPU-7"}, GPUMemory: 50 * gib, StartedAt: t0, TimeLimit: 28 * time.Hour},
	}
	return in
}

// BenchmarkScheduleFair10k is one pass over fairBenchInput; the target is
// a median of at most 5 ms over -count 10. No sentence is built: a pass
// keeps figures, and Wait.Text writes a sentence when someone asks.
func BenchmarkScheduleFair10k(b *testing.B) {
	in := fairBenchInput()
	b.ReportAllocs()
	for b.Loop() {
		Schedule(in)
	}
}

// TestFairBenchInput checks that the benchmark's load does what it says:
// memory jobs, backfill, estimates and every reason it means to cover.
func TestFairBenchInput(t *testing.T) {
	in := fairBenchInput()
	mem := 0
	for _, j := range in.Queued {
		if j.GPUMemory > 0 {
			mem++
		}
	}
	p := Schedule(in)
	reasons, estimated := waitCounts(p)
	if mem != 64 || len(p.Starts) < 3 || reasons[ReasonBudget] == 0 || reasons[ReasonTeamGPULimit] == 0 || reasons[ReasonResources] == 0 || estimated < 5000 {
		t.Errorf("%d memory jobs, %d starts, reasons %v, %d estimates", mem, len(p.Starts), reasons, estimated)
	}
}

// TestEstimateAndSentenceSayTheSameMinute: the estimate is rounded up to
// the minute, and the sentence says that minute, not the one before.
func TestEstimateAndSentenceSayTheSameMinute(t *testing.T) {
	now := time.Date(2026, 12, 1, 20, 50, 9, 0, time.UTC)
	in := Input{
		GPUs:    hostGPUs(1),
		Running: []RunningJob{running("j-a", "zed", now.Add(-2*time.Minute), 10*time.Minute, "GPU-0")}, // ends 20:58:09
		Queued:  []QueuedJob{limited(1, "ann", 1, time.Hour), limited(2, "bob", 1, 30*time.Second)},
		Now:     now,
	}
	p := Schedule(in)
	if len(p.Waits) != 2 {
		t.Fatalf("waits = %+v, want both", p.Waits)
	}
	head, next := p.Waits[0], p.Waits[1]
	if want := time.Date(2026, 12, 1, 20, 59, 0, 0, time.UTC); !head.EstimatedStart.Equal(want) {
		t.Errorf("estimated start %v, want %v (20:58:09 rounded up)", head.EstimatedStart, want)
	}
	if want := "waiting for 1 free GPU; none is free; j-a (zed) reaches its time limit in 8 min; no job ahead of you waits for GPUs; next GPUs free by j-a's time limit at 20:59 UTC"; head.Text() != want {
		t.Errorf("text = %q, want %q", head.Text(), want)
	}
	if want := time.Date(2026, 12, 1, 21, 59, 0, 0, time.UTC); !next.EstimatedStart.Equal(want) || !strings.HasSuffix(next.Text(), "at 21:59 UTC") {
		t.Errorf("second: %v %q, want %v", next.EstimatedStart, next.Text(), want)
	}

	// An estimate on the next day says its date.
	in.Running[0].TimeLimit = 4 * time.Hour
	if text := Schedule(in).Waits[0].Text(); !strings.HasSuffix(text, "at 2 Dec 00:49 UTC") {
		t.Errorf("text = %q, want the estimate with its date", text)
	}
}

// TestShortLimitInSeconds: a limit under a minute away reads in seconds.
func TestShortLimitInSeconds(t *testing.T) {
	in := Input{
		GPUs:    hostGPUs(1),
		Running: []RunningJob{running("j-a", "zed", t0, 10*time.Second, "GPU-0")},
		Queued:  []QueuedJob{limited(1, "ann", 1, time.Hour)},
		Now:     t0,
	}
	text := Schedule(in).Waits[0].Text()
	if want := "j-a (zed) reaches its time limit in 10 s;"; !strings.Contains(text, want) {
		t.Errorf("text = %q, want it to say %q", text, want)
	}
}

// TestHeldJobHasNoEstimate: a held job, ahead of others or on a free
// GPU, gets no estimate and its sentence says nothing of a start.
func TestHeldJobHasNoEstimate(t *testing.T) {
	held := limited(1, "ann", 1, time.Hour)
	held.Held = true
	in := Input{
		GPUs:    hostGPUs(1),
		Running: []RunningJob{running("j-a", "zed", t0, time.Hour, "GPU-0")},
		Queued:  []QueuedJob{held, limited(2, "bob", 1, time.Hour)},
		Now:     t0,
	}
	for _, running := range [][]RunningJob{in.Running, nil} {
		in.Running = running
		p := Schedule(in)
		var w Wait
		for _, x := range p.Waits {
			if x.JobID == held.ID {
				w = x
			}
		}
		if w.Reason != ReasonHeld || !w.EstimatedStart.IsZero() || w.Text() != heldText || strings.Contains(w.Text(), "start by") || strings.Contains(w.Text(), "time limit at") {
			t.Errorf("held job (%d running): %+v %q, want held without an estimate", len(running), w, w.Text())
		}
	}
}

// TestWaitWithoutFigures: a Wait made outside a pass says its reason's
// meaning.
func TestWaitWithoutFigures(t *testing.T) {
	w := Wait{JobID: "j-1", Reason: ReasonEngineUnavailable}
	if w.Text() != ReasonEngineUnavailable.Meaning() || w.Text() == "" {
		t.Errorf("text = %q, want the reason's meaning", w.Text())
	}
}

// BenchmarkWaitText is the sentence of one waiting job of
// fairBenchInput's pass, built when asked for.
func BenchmarkWaitText(b *testing.B) {
	p := Schedule(fairBenchInput())
	b.ReportAllocs()
	k := 0
	for b.Loop() {
		_ = p.Waits[k%len(p.Waits)].Text()
		k++
	}
}
