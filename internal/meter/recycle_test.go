package meter

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/container"
)

// TestRecycle steps two meters through the same samples, one of them
// handed back every tick once it has been copied: the copies must be the
// ticks of the meter that allocates afresh, though rows come and go (a
// recycled slice longer than the next tick's rows must leave nothing of
// itself behind), and the recycled meter must really fill old slices.
func TestRecycle(t *testing.T) {
	ab := []container.Container{running("a", "0"), running("b", "0", "1")}
	samples := []sample{
		{0, []dev{{util: 80, watts: 200, energyJ: 0, procs: []proc{{1, ownerA, 50, 1000}, {2, ownerB, 30, 2000}}}, {util: 10, watts: 120, energyJ: 0, procs: []proc{{2, ownerB, 10, 500}}}}, ab},
		{10, []dev{{util: 50, watts: 180, energyJ: 1800, procs: []proc{{1, ownerA, 50, 1000}}}, {util: 0, watts: 100, energyJ: 1200}}, ab[:1]},
		{20, []dev{{util: 60, watts: 190, energyJ: 3600, procs: []proc{{3, ownerC, 60, 3000}}}, {util: 20, watts: 130, energyJ: 2200, procs: []proc{{4, bob, 20, 100}}}}, []container.Container{running("c", "0")}},
		{30, []dev{{util: 0, watts: 100, energyJ: 5500}, {util: 0, watts: 100, energyJ: 3500}}, nil},
		{40, []dev{{util: 90, watts: 250, energyJ: 6500, procs: []proc{{1, ownerA, 45, 1000}, {2, ownerB, 45, 1000}}}, {util: 0, watts: 100, energyJ: 4500}}, ab},
		{50, []dev{{util: 0, watts: 100, energyJ: 9000}, {util: 0, watts: 100, energyJ: 5500}}, nil},
	}
	cfg := Config{IdleWatts: map[string]float64{"GPU-0": 100, "GPU-1": 100}, Retain: 5 * time.Second}
	fresh, recycled := New(cfg), New(cfg)
	reused := 0
	var handed []*Usage // the first element of each slice handed back
	for _, s := range samples {
		want := fresh.Step(s.input())
		tick := recycled.Step(s.input())
		if len(tick.Usage) > 0 && slices.Contains(handed, &tick.Usage[:1][0]) {
			reused++
		}
		got := *tick
		got.Usage = slices.Clone(tick.Usage)
		got.Containers = slices.Clone(tick.Containers)
		if diff := cmp.Diff(&got, want, approx); diff != "" {
			t.Errorf("tick at %v of the recycling meter (-got +want):\n%s", tick.Time.Sub(start), diff)
		}
		if cap(tick.Usage) > 0 {
			handed = append(handed, &tick.Usage[:1][0])
		}
		recycled.Recycle(tick)
		if tick.Usage != nil || tick.Containers != nil {
			t.Errorf("tick at %v keeps its rows after Recycle", tick.Time.Sub(start))
		}
	}
	if reused == 0 {
		t.Errorf("no tick reused a handed-back slice")
	}
}
