package whatif_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

func load(t testing.TB, h history, from, to time.Time) *whatif.History {
	t.Helper()
	got, err := whatif.Load(context.Background(), write(t, h), from, to, "")
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func mode(t *testing.T, r *whatif.Result, m whatif.Mode) whatif.ModeResult {
	t.Helper()
	for _, x := range r.Modes {
		if x.Mode == m {
			return x
		}
	}
	t.Fatalf("no %s mode in %+v", m, r.Modes)
	return whatif.ModeResult{}
}

func near(got, want, tol float64) bool {
	return math.Abs(got-want) <= tol*math.Max(1e-9, math.Abs(want))
}

// TestExclusiveHandComputed replays four one-GPU jobs on two GPUs,
// whose figures are worked out by hand: a and b start at once, c waits
// for them (60 min), d, submitted at 30 min, waits 30 min.
func TestExclusiveHandComputed(t *testing.T) {
	h := readHistory(t, "queue2.json")
	hist := load(t, h, h.Start, h.Start.Add(3*time.Hour))
	res, err := whatif.Run(hist, whatif.Options{Params: whatif.Params{Share: 2}, Prices: cost.Model{GPUHour: map[string]float64{"default": 2}, Currency: "EUR"}})
	if err != nil {
		t.Fatal(err)
	}
	ex := mode(t, res, whatif.Exclusive)
	want := whatif.ModeResult{Mode: whatif.Exclusive, GPUs: 2, UtilMean: 0.5, GPUHoursHeld: 4,
		Wait: whatif.Spread{P50: 0, P95: 3600, Max: 3600}, MakespanS: 7200, Stretch: whatif.Stretch{P50: 1, P95: 1},
		Cost: whatif.Money{Amount: 8, Currency: "EUR"}}
	gpusFor := ex.GPUsForP95Wait
	ex.UtilSeries, ex.UtilStepS, ex.GPUsForP95Wait = nil, 0, nil
	if fmt.Sprintf("%+v", ex) != fmt.Sprintf("%+v", want) {
		t.Errorf("exclusive:\n got %+v\nwant %+v", ex, want)
	}
	if res.Measured.UtilMean != 0.5 || res.Measured.Wait != (whatif.Spread{P95: 3600, Max: 3600}) {
		t.Errorf("measured: got %+v", res.Measured)
	}
	// Time-slicing two jobs of 50 % on each GPU slows none of them: all
	// four start on arrival and the work is done by 90 min.
	ts := mode(t, res, whatif.Timeslice)
	if ts.Wait.Max != 0 || ts.MakespanS != 5400 || ts.JobsSlowed != 0 {
		t.Errorf("timeslice: got waits %+v, makespan %v, slowed %d; want no wait, 5400 s, none", ts.Wait, ts.MakespanS, ts.JobsSlowed)
	}
	if !(ts.UtilMean > ex.UtilMean) || !near(ts.UtilMean, 2.0/3, 1e-9) {
		t.Errorf("timeslice utilisation: got %v, want 2/3, above exclusive's %v", ts.UtilMean, ex.UtilMean)
	}
	// With 10 GiB peaks, memory packing binpacks all four onto one GPU:
	// none waits, all are slowed (150 %, then 200 % of SM asked), and
	// the GPUs are held for fewer hours.
	if mm := mode(t, res, whatif.Memory); mm.Wait.Max != 0 || mm.JobsSlowed != 4 || mm.GPUHoursHeld >= ex.GPUHoursHeld {
		t.Errorf("memory: got %+v", mm)
	}
	// Two GPUs keep the measured p95 wait (60 min) exclusively; with one,
	// d would wait 90 min.
	if g := gpusFor; g == nil || *g != 2 {
		t.Errorf("exclusive GPUs for the p95 wait: got %v, want 2", g)
	}
}

// TestExclusiveReproducesHistory replays a simulated week of a queue on
// four GPUs, decided first come first served as the queue decides one-GPU
// jobs of equal time limits, with containers started by hand on free
// GPUs: exclusive mode must give the measured utilisation and waits
// within 2 %.
func TestExclusiveReproducesHistory(t *testing.T) {
	h := simulated(4, 130, 7*24*60)
	hist := load(t, h, h.Start, h.Start.Add(8*24*time.Hour))
	res, err := whatif.Run(hist, whatif.Options{Modes: []whatif.Mode{whatif.Exclusive}, NoSearch: true})
	if err != nil {
		t.Fatal(err)
	}
	ex, m := mode(t, res, whatif.Exclusive), res.Measured
	t.Logf("measured %+v; exclusive util %v waits %+v held %v; %d queue jobs", m, ex.UtilMean, ex.Wait, ex.GPUHoursHeld, res.Model.QueueJobs)
	if res.Model.QueueJobs < 100 || m.Wait.P95 == 0 {
		t.Fatalf("the history is too light to test: %d queue jobs, measured waits %+v", res.Model.QueueJobs, m.Wait)
	}
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"utilisation", ex.UtilMean, m.UtilMean},
		{"wait p50", ex.Wait.P50, m.Wait.P50},
		{"wait p95", ex.Wait.P95, m.Wait.P95},
		{"wait max", ex.Wait.Max, m.Wait.Max},
		{"GPU-hours held", ex.GPUHoursHeld, m.GPUHoursHeld},
	} {
		if !near(c.got, c.want, 0.02) {
			t.Errorf("%s: replayed %v, measured %v: more than 2 %% apart", c.what, c.got, c.want)
		}
	}
}

// simulated is a deterministic history of n one-GPU jobs over minutes
// on gpus GPUs, started first come first served, with a container by
// hand every so often on a GPU that is free when it starts.
func simulated(gpus, n, minutes int) history {
	h := history{Node: "gpu1", Start: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), GPUs: gpus, Model: "NVIDIA A100-SXM4-80GB", MemGiB: 80}
	seed := uint64(42)
	rnd := func(k int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int(seed>>33) % k
	}
	free := make([]int, gpus) // minute each GPU comes free
	submit := 0
	for i := range n {
		submit += 1 + rnd(2*minutes/n)
		run := 30 + rnd(600)
		if i%10 == 9 {
			// A container by hand: on a GPU free at submit, else skipped.
			for g := range free {
				if free[g] <= submit {
					free[g] = submit + run
					h.Holders = append(h.Holders, holder{Name: fmt.Sprintf("nb-%d", i), User: "nat", Image: "jupyter", Start: submit, End: submit + run,
						GPUs: []int{g}, Util: []float64{0.1}, MemGiB: 4})
					break
				}
			}
			continue
		}
		g := 0
		for k := range free {
			if free[k] < free[g] {
				g = k
			}
		}
		start := max(submit, free[g])
		free[g] = start + run
		h.Holders = append(h.Holders, holder{Name: fmt.Sprintf("job-%d", i), User: fmt.Sprintf("u%d", i%3), Image: "train:2", Job: true,
			Submit: submit, Start: start, End: start + run, GPUs: []int{g}, Util: []float64{0.3 + float64(rnd(60))/100}, MemGiB: 20, LimitMins: 720})
	}
	return h
}

// TestRetentionGap: where retention has deleted the window's first
// minutes, the replay says so and starts where the minutes do.
func TestRetentionGap(t *testing.T) {
	h := readHistory(t, "queue2.json")
	store := write(t, h)
	// Keep minutes of the last hour only (cut-offs are whole hours).
	if err := store.Retain(context.Background(), "", h.Start.Add(2*time.Hour+30*time.Minute), 90*time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	hist, err := whatif.Load(context.Background(), store, h.Start, h.Start.Add(3*time.Hour), "")
	if err != nil {
		t.Fatal(err)
	}
	if want := h.Start.Add(time.Hour); !hist.ReplayedFrom.Equal(want) {
		t.Errorf("replayed from %v, want %v", hist.ReplayedFrom, want)
	}
	if len(hist.Notes) == 0 || !strings.Contains(hist.Notes[0], "retention") || !strings.Contains(hist.Notes[0], "1h0m0s of the window before it is not replayed") {
		t.Errorf("notes: %q", hist.Notes)
	}
	res, err := whatif.Run(hist, whatif.Options{Modes: []whatif.Mode{whatif.Exclusive}})
	if err != nil {
		t.Fatal(err)
	}
	// c and d ran in the hour kept; the replay starts them at its start,
	// as running then.
	if res.Window.ReplayedFrom != hist.ReplayedFrom || res.Model.Holders != 2 || res.Model.Notes[0] != hist.Notes[0] {
		t.Errorf("result: window %+v, %d holders, notes %q", res.Window, res.Model.Holders, res.Model.Notes)
	}
}
