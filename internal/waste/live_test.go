package waste

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/ledger/postgres"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/record"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sampler/samplertest"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// patterns plays each rule's pattern once, at a 10 s interval:
//   - greedy holds GPUs 0 and 1 for 2 h and computes on 0;
//   - stuck computes on GPU 2 for 1 h, waits 45 min with 20 GiB held and
//     a busy CPU, then computes for 10 min more;
//   - nb idles on GPU 3 for 2 h;
//   - old computes on GPU 4 for 5 h, 3 h past a maximum age of 2 h;
//   - dave runs a process on GPU 4 for 1 h.
const patterns = `
version: 1
node: lab
start: 2026-11-02T00:00:00Z
duration: 5h
interval: 10s
gpus:
  - count: 5
    model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    idle_power: 70W
    max_power: 700W
containers:
  - name: greedy
    labels: {gpumeter.user: alice}
    gpus: [0, 1]
    end: 2h
    cpu: 2
    phases:
      - {at: 0s, util: 90, memory: 40GiB, gpus: [0]}
  - name: stuck
    labels: {gpumeter.user: bob}
    gpus: [2]
    end: 1h55m
    cpu: 3
    phases:
      - {at: 0s, util: 95, memory: 20GiB}
      - {at: 1h, util: 0, memory: 20GiB}
      - {at: 1h45m, util: 95, memory: 20GiB}
  - name: nb
    labels: {gpumeter.user: carol}
    gpus: [3]
    end: 2h
    cpu: 0.01
    phases:
      - {at: 0s, util: 0, memory: 2GiB}
  - name: old
    labels: {gpumeter.user: erin}
    gpus: [4]
    cpu: 1
    phases:
      - {at: 0s, util: 60, memory: 10GiB}
host_processes:
  - {user: dave, gpu: 4, start: 1h, end: 2h, util: 20, memory: 1GiB}
`

func patternRules() config.WasteRules {
	r := config.DefaultWasteRules()
	r.TooOld.MaxAge = 2 * time.Hour
	return r
}

// patternWants are the findings of patterns, worked out by hand.
var patternWants = []struct {
	rule, who string
	wasted    float64
}{
	{config.RuleOverAllocated, "greedy", 2}, // GPU 1 for 2 h
	{config.RuleStalled, "stuck", 0.75},
	{config.RuleIdle, "nb", 2},
	{config.RuleTooOld, "old", 3},
	{config.RuleOutside, "dave", 1},
}

// play runs the scenario through the sampler and meter, handing every
// tick to each sink.
func play(t testing.TB, text string, sinks ...func(*sampler.Tick)) *sim.Scenario {
	t.Helper()
	sc, err := sim.Parse("patterns.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	s := samplertest.Scenario(sc, sampler.Config{
		OnTick: func(tk *sampler.Tick) {
			for _, f := range sinks {
				f(tk)
			}
		},
	})
	for now := sc.Start; !now.After(sc.Start.Add(sc.Duration)); now = now.Add(sc.Interval) {
		s.Step(context.Background(), now)
	}
	return sc
}

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestLiveAndLedgerAgree plays the patterns once into the live evaluator
// and the ledger, SQLite and PostgreSQL: both find the same, with the
// wasted GPU-hours worked out by hand.
func TestLiveAndLedgerAgree(t *testing.T) {
	for _, tt := range []struct {
		name string
		open func(t *testing.T) (ledger.Store, error)
	}{
		{"sqlite", func(t *testing.T) (ledger.Store, error) {
			return sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
		}},
		{"postgres", func(t *testing.T) (ledger.Store, error) {
			return postgres.Open(context.Background(), pgtest.DSN(t))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store, err := tt.open(t)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			testLiveAndLedgerAgree(t, store)
		})
	}
}

func testLiveAndLedgerAgree(t *testing.T, store ledger.Store) {
	ctx := context.Background()
	rec := record.New(record.Config{Store: store, Node: "lab", MaxRows: 1 << 30})
	live := NewLive(LiveConfig{Rules: patternRules(), Cost: priced})
	if live.Bucket() != time.Minute {
		t.Errorf("bucket %s, want 1m for the default windows", live.Bucket())
	}
	sc := play(t, patterns, rec.Add, live.Add)
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fromLedger, err := Evaluate(ctx, store, Options{From: sc.Start, To: sc.Start.Add(sc.Duration), Rules: patternRules(), Cost: priced})
	if err != nil {
		t.Fatal(err)
	}
	fromLive := live.Report()

	for name, rep := range map[string]*Report{"ledger": fromLedger, "live": fromLive} {
		if len(rep.Findings) != len(patternWants) {
			t.Errorf("%s: %d findings, want %d:\n%s", name, len(rep.Findings), len(patternWants), dump(rep))
		}
		for _, w := range patternWants {
			var f *Finding
			for i := range rep.Findings {
				if rep.Findings[i].Rule == w.rule && cmpWho(&rep.Findings[i]) == w.who {
					f = &rep.Findings[i]
				}
			}
			if f == nil {
				t.Errorf("%s: no %s finding for %s:\n%s", name, w.rule, w.who, dump(rep))
				continue
			}
			tolerance := w.wasted * 1e-3
			if name == "live" && f.Active {
				// The bucket still open is not counted yet.
				tolerance += live.Bucket().Hours() * float64(len(f.GPUs))
			}
			if math.Abs(f.WastedGPUHours-w.wasted) > tolerance {
				t.Errorf("%s: %s %s wasted %v GPU-hours, want %v", name, w.rule, w.who, f.WastedGPUHours, w.wasted)
			}
		}
	}
	// The same identities, and the same times to the interval.
	for _, lf := range fromLive.Findings {
		var found bool
		for _, f := range fromLedger.Findings {
			if f.ID != lf.ID {
				continue
			}
			found = true
			if d := f.Since.Sub(lf.Since).Abs(); d > sc.Interval {
				t.Errorf("%s %s: since %s in the ledger, %s live", lf.Rule, lf.Container, f.Since, lf.Since)
			}
		}
		if !found {
			t.Errorf("live finding %s (%s %s) is not in the ledger's", lf.ID, lf.Rule, cmpWho(&lf))
		}
	}

	wantMetrics := `
# HELP gpumeter_waste_gpu_hours_total GPU-hours wasted by reported findings, by rule and owner.
# TYPE gpumeter_waste_gpu_hours_total counter
gpumeter_waste_gpu_hours_total{Hostname="lab",owner="alice",rule="over_allocated"} 2
gpumeter_waste_gpu_hours_total{Hostname="lab",owner="bob",rule="stalled"} 0.75
gpumeter_waste_gpu_hours_total{Hostname="lab",owner="carol",rule="idle"} 2
gpumeter_waste_gpu_hours_total{Hostname="lab",owner="dave",rule="outside"} 1
gpumeter_waste_gpu_hours_total{Hostname="lab",owner="erin",rule="too_old"} 2.98333333333
# HELP gpumeter_waste_findings Waste findings whose condition holds now, by rule and owner.
# TYPE gpumeter_waste_findings gauge
gpumeter_waste_findings{Hostname="lab",owner="erin",rule="too_old"} 1
`
	// The counters lag the findings by the bucket still open: the last
	// minute of "old" is not counted yet.
	if err := testutil.CollectAndCompare(live, strings.NewReader(wantMetrics)); err != nil {
		t.Error(err)
	}
	// GPU-hours are the unit of every report and finding, so the wasted
	// counter keeps them rather than Prometheus's base unit, seconds.
	problems, err := testutil.CollectAndLint(live)
	problems = slices.DeleteFunc(problems, func(p promlint.Problem) bool {
		return p.Metric == "gpumeter_waste_gpu_hours_total" && strings.Contains(p.Text, `"hours"`)
	})
	if err != nil || len(problems) > 0 {
		t.Errorf("metrics lint: %v %+v", err, problems)
	}
}

// TestLiveUnaccountedMemory: GPU memory that no process accounts for is
// found live, on its GPU.
func TestLiveUnaccountedMemory(t *testing.T) {
	rules := config.DefaultWasteRules()
	rules.Outside.Window = 2 * time.Minute
	live := NewLive(LiveConfig{Rules: rules, Cost: priced})
	m := meter.New(meter.Config{})
	start := t0
	for i := range 4 * 60 {
		now := start.Add(time.Duration(i) * time.Second)
		used := uint64(3 * giB)
		if i >= 3*60 {
			used = 512 << 20 // below the threshold from 3m on
		}
		d := gpu.Device{Index: 0, UUID: "GPU-0", Model: "H100", MemoryTotal: 80 * giB, MemoryUsed: used + giB,
			Processes: []gpu.Process{{PID: 7, MemoryUsed: giB, SMUtil: 10}}}
		mt := m.Step(meter.Input{Time: now, Sample: gpu.Sample{Time: now, Devices: []gpu.Device{d}},
			Owners: [][]container.Owner{{{Kind: container.OwnerContainer, ID: "c1"}}},
			Containers: []container.Container{{ID: "c1", Name: "job", User: "alice", Running: true, GPUs: container.GPURequest{IDs: []string{"0"}},
				CPUSeconds: float64(i)}}})
		live.Add(&sampler.Tick{Tick: mt, Node: "n1"})
	}
	rep := live.Report()
	if len(rep.Findings) != 1 {
		t.Fatalf("%d findings, want 1:\n%s", len(rep.Findings), dump(rep))
	}
	f := rep.Findings[0]
	if f.Rule != config.RuleOutside || f.OwnerKind != OwnerNone || len(f.GPUs) != 1 || f.GPUs[0].UUID != "GPU-0" {
		t.Errorf("finding %+v, want outside on GPU-0 with no owner", f)
	}
	if f.Evidence[EvUnaccounted] != 3*giB || f.WastedGPUHours != 0 || f.Active {
		t.Errorf("evidence %v, wasted %v, active %v; want 3 GiB unaccounted, 0 GPU-hours, not active", f.Evidence, f.WastedGPUHours, f.Active)
	}
	if !f.Since.Equal(start) || !f.Until.Equal(start.Add(3*time.Minute)) {
		t.Errorf("since %s until %s, want %s until 3m later", f.Since, f.Until, start)
	}
}

// TestLiveRepublishedTick: the sampler publishes its last tick again
// while the GPU source reads nothing; it adds nothing.
func TestLiveRepublishedTick(t *testing.T) {
	rules := config.DefaultWasteRules()
	rules.Idle.Window = time.Minute
	a := NewLive(LiveConfig{Rules: rules})
	b := NewLive(LiveConfig{Rules: rules})
	short := `
version: 1
duration: 20m
gpus: [{model: H100, memory: 80GiB, idle_power: 70W, max_power: 700W}]
containers: [{name: nb, gpus: [0], phases: [{at: 0s, util: 0, memory: 1GiB}]}]
`
	play(t, short, a.Add, func(tk *sampler.Tick) {
		b.Add(tk)
		b.Add(tk)
	})
	ra, rb := a.Report(), b.Report()
	if len(ra.Findings) == 0 || len(ra.Findings) != len(rb.Findings) {
		t.Fatalf("%d findings once, %d twice; want the same, and some", len(ra.Findings), len(rb.Findings))
	}
	for i := range ra.Findings {
		if ra.Findings[i].WastedGPUHours != rb.Findings[i].WastedGPUHours {
			t.Errorf("%s: %v GPU-hours once, %v twice", ra.Findings[i].ID, ra.Findings[i].WastedGPUHours, rb.Findings[i].WastedGPUHours)
		}
	}
}

// TestLiveConcurrent: the API and the metrics read while the sampler adds
// (run with -race).
func TestLiveConcurrent(t *testing.T) {
	rules := patternRules()
	rules.Idle.Window, rules.OverAllocated.Window = time.Minute, time.Minute
	live := NewLive(LiveConfig{Rules: rules, Cost: priced})
	done := make(chan struct{})
	read := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-done:
				read <- n
				return
			default:
			}
			n += len(live.Report().Findings)
			_ = testutil.CollectAndCount(live)
		}
	}()
	play(t, `
version: 1
duration: 20m
gpus: [{count: 3, model: H100, memory: 80GiB, idle_power: 70W, max_power: 700W}]
containers:
  - {name: nb, gpus: [0], phases: [{at: 0s, util: 0, memory: 1GiB}]}
  - {name: greedy, gpus: [1, 2], cpu: 1, phases: [{at: 0s, util: 90, memory: 9GiB, gpus: [1]}]}
host_processes: [{user: dave, gpu: 0, start: 0s, end: 20m, util: 20, memory: 1GiB}]
`, live.Add)
	close(done)
	<-read
	if len(live.Report().Findings) == 0 {
		t.Error("no findings")
	}
}
