package whatif_test

import (
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

// TestAdvisePlanted reads a history with planted truth: olga asks for 4
// GPUs and computes on 1, nina's notebooks idle 90 % of the time, mia's
// sweeps peak at 12 GiB of 80 GiB with 30 % SM, tom's evaluations end in
// 2 h under a 24 h limit, dan's pretraining stalls with 70 GiB held,
// and hal is healthy. Each gets the right flag and a saving within 1 %
// of the one worked out here; hal gets none.
func TestAdvisePlanted(t *testing.T) {
	h := readHistory(t, "advise.json")
	hist := load(t, h, h.Start, h.Start.Add(72*time.Hour))
	rep := whatif.Advise(hist, whatif.AdviseOptions{Prices: cost.Model{GPUHour: map[string]float64{"default": 2.5}, Currency: "EUR"}, MemoryFraction: 0.9})
	type want struct {
		kind  whatif.Kind
		flag  string
		saved float64 // GPU-hours, by hand
	}
	wants := map[string]want{
		// 5 runs of 4 h, 3 GPUs of 4 never computing.
		"olga": {whatif.KindGPUs, "--gpus 1", 5 * 4 * 3},
		// 3 notebooks of 24 h, each 6 idle stretches of 216 min, of which
		// all past the 1 h window would have been reclaimed.
		"nina": {whatif.KindIdlePolicy, "waste.idle.window: 1h, policy.rules.idle.action: stop", 3 * 6 * (216 - 60) / 60.0},
		// 6 runs of 3 h on a whole GPU; shared, each holds the larger of
		// 12 GiB / (0.9 × 80 GiB) and its 30 % SM: 0.3 of the GPU.
		"mia": {whatif.KindGPUMemory, "--gpu-memory 12GiB", 6 * 3 * (1 - 0.3)},
		// runs of 2 h under 24 h: 1.25 × 2 h; saves waits, not GPU-hours.
		"tom": {whatif.KindTimeLimit, "--time-limit 2h30m", 0},
		// a pointer only.
		"dan": {whatif.KindDataLoading, "", 0},
	}
	got := map[string][]whatif.Advice{}
	for _, a := range rep.Advice {
		got[a.User] = append(got[a.User], a)
	}
	for user, w := range wants {
		as := got[user]
		if len(as) != 1 {
			t.Errorf("%s: got %d pieces of advice %+v, want one %s", user, len(as), as, w.kind)
			continue
		}
		a := as[0]
		if a.Kind != w.kind || a.Flag != w.flag {
			t.Errorf("%s: got %s %q, want %s %q (evidence %v)", user, a.Kind, a.Flag, w.kind, w.flag, a.Evidence)
		}
		if !near(a.SavedGPUHours, w.saved, 0.01) {
			t.Errorf("%s: saved %v GPU-hours, want %v within 1 %%", user, a.SavedGPUHours, w.saved)
		}
		if !near(a.SavedCost.Amount, 2.5*w.saved, 0.01) || a.SavedCost.Currency != "EUR" {
			t.Errorf("%s: saved %+v, want %.2f EUR", user, a.SavedCost, 2.5*w.saved)
		}
		if len(a.Evidence) == 0 {
			t.Errorf("%s: no evidence", user)
		}
	}
	if as := got["hal"]; len(as) != 0 {
		t.Errorf("hal is healthy and got %+v", as)
	}
	// One user's advice only.
	if rep := whatif.Advise(hist, whatif.AdviseOptions{User: "mia"}); len(rep.Advice) != 1 || rep.Advice[0].User != "mia" {
		t.Errorf("advice for mia: got %+v", rep.Advice)
	}
	if rep := whatif.Advise(hist, whatif.AdviseOptions{Team: "vision"}); len(rep.Advice) != 2 {
		t.Errorf("advice for team vision: got %+v, want olga's and tom's", rep.Advice)
	}
}
