package agent

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// TestSimulate plays a scenario into SQLite: the ledger holds what the
// meter booked, and a second run into the same ledger is refused before
// it writes anything.
func TestSimulate(t *testing.T) {
	sc, err := sim.Parse("t.yaml", []byte(`version: 1
node: n1
duration: 2h
interval: 10s
gpus:
  - count: 2
    memory: 80GiB
    idle_power: 60W
    max_power: 400W
containers:
  - name: a
    gpus: [0]
    end: 90m
    phases:
      - {at: 0s, util: 50, memory: 10GiB}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "l.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	got, err := Simulate(ctx, sc, store, "l.db")
	if err != nil {
		t.Fatal(err)
	}
	if want := int(sc.Duration/sc.Interval) + 1; got.Ticks != want {
		t.Errorf("Simulate took %d ticks, want %d", got.Ticks, want)
	}
	if want := 2 * sc.Duration.Seconds(); got.GPU.Seconds != want {
		t.Errorf("Simulate metered %v GPU-seconds, want %v", got.GPU.Seconds, want)
	}
	if want := 90 * time.Minute.Seconds(); got.GPU.AllocatedSeconds != want {
		t.Errorf("Simulate allocated %v GPU-seconds, want %v", got.GPU.AllocatedSeconds, want)
	}
	inLedger := gpuTotals(t, store, sc.Node)
	// The ledger keeps seconds to the microsecond and energy to the
	// millijoule in each row.
	if math.Abs(inLedger.Seconds-got.GPU.Seconds) > 1e-3 || math.Abs(inLedger.EnergyJoules-got.GPU.EnergyJoules) > 1 {
		t.Errorf("the ledger holds %v GPU-seconds and %v J, the simulation booked %v and %v", inLedger.Seconds, inLedger.EnergyJoules, got.GPU.Seconds, got.GPU.EnergyJoules)
	}

	if _, err := Simulate(ctx, sc, store, "l.db"); err == nil || !strings.Contains(err.Error(), "l.db already holds usage of node n1") {
		t.Errorf("a second Simulate = %v, want it refused", err)
	}
	if after := gpuTotals(t, store, sc.Node); after != inLedger {
		t.Errorf("the refused Simulate changed the ledger: %+v, was %+v", after, inLedger)
	}
}

// gpuTotals sums what store holds of every GPU of node.
func gpuTotals(t *testing.T, store ledger.Store, node string) ledger.GPUSums {
	t.Helper()
	gpus, err := store.GPUs(context.Background(), ledger.Filter{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	var sum ledger.GPUSums
	for _, g := range gpus {
		sum.Add(g.GPUSums)
	}
	return sum
}

func TestCanSimulate(t *testing.T) {
	sc := &sim.Scenario{Name: "t.yaml", Containers: []sim.Container{{Name: "a"}, {Name: "real", PID: 42}}}
	err := CanSimulate(sc)
	if want := "t.yaml: container real has pid: 42; a virtual clock cannot follow a real process"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("CanSimulate = %v, want %q", err, want)
	}
	if _, err := Simulate(context.Background(), sc, nil, "none"); err == nil {
		t.Error("Simulate played a scenario with a pid: entry")
	}
	sc.Containers = sc.Containers[:1]
	if err := CanSimulate(sc); err != nil {
		t.Errorf("CanSimulate without pid: entries = %v", err)
	}
}
