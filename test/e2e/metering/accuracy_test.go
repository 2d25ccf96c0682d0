package metering

// Accuracy tests: each scenario in test/e2e/testdata/accuracy is
// simulated into a fresh ledger by the real binary, reported on as JSON,
// and compared with figures worked out by hand below.
//
// Every scenario's GPUs draw P = idle + (max − idle)·U/100, U the sum of
// the utilisations of the processes on the GPU (at most 100). Over each
// sampling interval the meter books a GPU's energy E = P·Δt as: the idle
// part idle·Δt to the containers that hold the GPU by allocation share;
// the active part E − idle·Δt to the processes by SM share (by memory
// share when no process computes); what has no owner to the idle pool.
// The H100s below idle at 70 W and peak at 700 W: P = 70 + 6.3·U.

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

const accGiB = 1 << 30

// accH converts seconds to hours and accKWh joules to kWh, so that
// expectations read in the units the arithmetic is done in.
func accH(seconds float64) float64  { return seconds / 3600 }
func accKWh(joules float64) float64 { return joules / 3.6e6 }

// accReport is the JSON report contract of docs/design.md, decoded as any other
// tool would decode it.
type accReport struct {
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	By       string    `json:"by"`
	Currency string    `json:"currency"`
	Rows     []accRow  `json:"rows"`
	Idle     struct {
		GPUHours  float64 `json:"gpu_hours"`
		EnergyKWh float64 `json:"energy_kwh"`
		Cost      float64 `json:"cost"`
		Shared    bool    `json:"shared"`
	} `json:"idle"`
	Totals accRow `json:"totals"`
	Host   struct {
		GPUs      int     `json:"gpus"`
		GPUHours  float64 `json:"gpu_hours"`
		EnergyKWh float64 `json:"energy_kwh"`
		Cost      float64 `json:"cost"`
	} `json:"host"`
}

type accRow struct {
	Key                string   `json:"key"`
	GPUHoursAllocated  float64  `json:"gpu_hours_allocated"`
	GPUHoursHeld       *float64 `json:"gpu_hours_held"`
	GPUHoursPresent    float64  `json:"gpu_hours_present"`
	GPUHoursUsed       float64  `json:"gpu_hours_used"`
	Efficiency         float64  `json:"efficiency"`
	EnergyKWh          float64  `json:"energy_kwh"`
	PeakGPUMemoryBytes uint64   `json:"peak_gpu_memory_bytes"`
	CPUCoreHours       float64  `json:"cpu_core_hours"`
	RAMGBHours         float64  `json:"ram_gb_hours"`
	Cost               float64  `json:"cost"`
	Containers         int      `json:"containers"`
	CostIdleShare      float64  `json:"cost_idle_share"`
}

// accWant is one row worked out by hand. GPU-hours, energy, CPU and RAM
// are checked to 0.1 %, the peak and the container count exactly.
type accWant struct {
	alloc, held, present, used float64 // GPU-hours
	kWh                        float64
	cpu, ram                   float64 // core-hours, GiB-hours
	peak                       uint64  // bytes
	containers                 int
}

// accWindow is one report over a scenario's ledger and what it must say.
type accWindow struct {
	from, to string
	// rows by grouping, then by key
	rows map[string]map[string]accWant
	// idle pool and host: GPU-hours and kWh
	idleHours, idleKWh float64
	hostHours, hostKWh float64
}

func TestAccuracy(t *testing.T) {
	const day = "2026-11-02T"
	tests := []struct {
		file    string
		gpus    int
		windows []accWindow
	}{{
		// One container holds the GPU alone from 1m to 7m at 80 %:
		// P = 70 + 6.3·80 = 574 W, all of it the container's (idle part
		// by allocation share 1, active part by SM share 80/80).
		file: "exclusive.yaml", gpus: 1,
		windows: []accWindow{{
			from: day + "00:00:00Z", to: day + "00:10:00Z",
			rows: map[string]map[string]accWant{
				"container": {"solo": {
					alloc: accH(360), held: accH(360), present: accH(360), used: accH(0.8 * 360), // 6 min, 80 % of it
					kWh: accKWh(574 * 360), // 206,640 J
					cpu: accH(2 * 360), ram: accH(4 * 360), peak: 40 * accGiB, containers: 1,
				}},
				"user": {"alice": {
					alloc: accH(360), held: accH(360), present: accH(360), used: accH(288), kWh: accKWh(206640),
					cpu: accH(720), ram: accH(1440), peak: 40 * accGiB, containers: 1,
				}},
			},
			// Nobody holds the GPU for 0–1m and 7–10m: 240 s at 70 W.
			idleHours: accH(240), idleKWh: accKWh(70 * 240), // 16,800 J
			hostHours: accH(600), hostKWh: accKWh(206640 + 16800), // 223,440 J
		}},
	}, {
		// a-train (60 %, 20 GiB) holds the GPU all 10 minutes, b-notebook
		// (20 %, 4 GiB) from 2m to 8m.
		//   0–2m, 8–10m (240 s): a alone, U = 60, P = 448 W, all a's:
		//     107,520 J.
		//   2–8m (360 s): U = 80, P = 574 W. Idle part 70·360 = 25,200 J,
		//     12,600 J each; active part 504·360 = 181,440 J, a 60/80 =
		//     136,080 J, b 20/80 = 45,360 J.
		// a: 107,520 + 12,600 + 136,080 = 256,200 J; b: 57,960 J.
		// Allocated: a 240 s + 360 s / 2 = 420 s; b 180 s. Held, the
		// whole time each had the GPU: a 600 s, b 360 s.
		file: "timeslice.yaml", gpus: 1,
		windows: []accWindow{{
			from: day + "00:00:00Z", to: day + "00:10:00Z",
			rows: map[string]map[string]accWant{
				"container": {
					"a-train":    {alloc: accH(420), held: accH(600), present: accH(600), used: accH(0.6 * 600), kWh: accKWh(256200), peak: 20 * accGiB, containers: 1},
					"b-notebook": {alloc: accH(180), held: accH(360), present: accH(360), used: accH(0.2 * 360), kWh: accKWh(57960), peak: 4 * accGiB, containers: 1},
				},
				"user": {
					"alice": {alloc: accH(420), held: accH(600), present: accH(600), used: accH(360), kWh: accKWh(256200), peak: 20 * accGiB, containers: 1},
					"bob":   {alloc: accH(180), held: accH(360), present: accH(360), used: accH(72), kWh: accKWh(57960), peak: 4 * accGiB, containers: 1},
				},
				"gpu": {"acc/0 NVIDIA H100 80GB HBM3": {
					alloc: accH(600), held: accH(600 + 360), present: accH(600 + 360), used: accH(360 + 72), kWh: accKWh(256200 + 57960),
					peak: 20 * accGiB, containers: 2,
				}},
			},
			idleHours: 0, idleKWh: 0,
			hostHours: accH(600), hostKWh: accKWh(448*240 + 574*360), // 314,160 J
		}},
	}, {
		// busy (90 %) and light (10 %) share the GPU all 10 minutes, so
		// U = 100 and P = 700 W: 420,000 J. Idle part 70·600 = 42,000 J,
		// 21,000 J each; active part 630·600 = 378,000 J, busy 90/100 =
		// 340,200 J, light 37,800 J. Each is allocated half the GPU (300
		// s) and holds all of it (600 s): busy used 540 s, 180 % of its
		// allocated time and 90 % of its held time; efficiency is 90 %.
		file: "timeslice-busy.yaml", gpus: 1,
		windows: []accWindow{{
			from: day + "00:00:00Z", to: day + "00:10:00Z",
			rows: map[string]map[string]accWant{
				"container": {
					"busy":  {alloc: accH(300), held: accH(600), present: accH(600), used: accH(540), kWh: accKWh(361200), peak: 10 * accGiB, containers: 1},
					"light": {alloc: accH(300), held: accH(600), present: accH(600), used: accH(60), kWh: accKWh(58800), peak: 10 * accGiB, containers: 1},
				},
				"gpu": {"acc/0 NVIDIA H100 80GB HBM3": {
					alloc: accH(600), held: accH(1200), present: accH(1200), used: accH(600), kWh: accKWh(420000),
					peak: 10 * accGiB, containers: 2,
				}},
			},
			idleHours: 0, idleKWh: 0,
			hostHours: accH(600), hostKWh: accKWh(420000),
		}},
	}, {
		// greedy holds GPUs 0 and 1 for 10 minutes and computes on 0 at
		// 90 %. GPU 0: P = 70 + 567 = 637 W, 382,200 J, all greedy's.
		// GPU 1 idles at 70 W, 42,000 J, which is the idle part and goes
		// to its holder by allocation share 1: no idle pool at all.
		file: "multigpu.yaml", gpus: 2,
		windows: []accWindow{{
			from: day + "00:00:00Z", to: day + "00:10:00Z",
			rows: map[string]map[string]accWant{
				"container": {"greedy": {
					alloc: accH(2 * 600), held: accH(2 * 600), present: accH(600), used: accH(0.9 * 600),
					kWh: accKWh(637*600 + 70*600), peak: 30 * accGiB, containers: 1, // 424,200 J
				}},
				"gpu": {
					"acc/0 NVIDIA H100 80GB HBM3": {alloc: accH(600), held: accH(600), present: accH(600), used: accH(540), kWh: accKWh(382200), peak: 30 * accGiB, containers: 1},
					"acc/1 NVIDIA H100 80GB HBM3": {alloc: accH(600), held: accH(600), kWh: accKWh(42000), containers: 1},
				},
			},
			idleHours: 0, idleKWh: 0,
			hostHours: accH(2 * 600), hostKWh: accKWh(424200),
		}},
	}, {
		// stuck (30 GiB) and waking (10 GiB) share the GPU for 10 minutes,
		// sampled every 2 s; both compute nothing until waking starts at
		// 40 % at 5m1s, between the samples at 5m0s and 5m2s.
		//   Idle part, all 600 s: 70·600 = 42,000 J, 21,000 J each.
		//   [5m0s, 5m2s): 70·1 + 322·1 = 392 J, of which 252 J above idle;
		//     the sample at 5m0s shows memory but no SM activity, so it
		//     splits by memory: stuck 30/40 = 189 J, waking 10/40 = 63 J.
		//   From the sample at 5m2s to 10m (298 s) waking computes at
		//     40 %: active 252·298 = 75,096 J, all waking's, and 0.4·298 =
		//     119.2 GPU-seconds used.
		// stuck: 21,000 + 189 = 21,189 J. waking: 21,000 + 63 + 75,096 =
		// 96,159 J. Host: 42,000 + 252·299 = 117,348 J.
		file: "stalled.yaml", gpus: 1,
		windows: []accWindow{{
			from: day + "00:00:00Z", to: day + "00:10:00Z",
			rows: map[string]map[string]accWant{
				"container": {
					"stuck":  {alloc: accH(300), held: accH(600), present: accH(600), used: 0, kWh: accKWh(21189), peak: 30 * accGiB, containers: 1},
					"waking": {alloc: accH(300), held: accH(600), present: accH(600), used: accH(119.2), kWh: accKWh(96159), peak: 10 * accGiB, containers: 1},
				},
				"user": {
					"erin":  {alloc: accH(300), held: accH(600), present: accH(600), kWh: accKWh(21189), peak: 30 * accGiB, containers: 1},
					"frank": {alloc: accH(300), held: accH(600), present: accH(600), used: accH(119.2), kWh: accKWh(96159), peak: 10 * accGiB, containers: 1},
				},
			},
			idleHours: 0, idleKWh: 0,
			hostHours: accH(600), hostKWh: accKWh(117348),
		}},
	}, {
		// dave's host process runs at 50 % from 2m to 6m on a GPU nobody
		// holds: P = 70 + 315 = 385 W. The active part, 315·240 =
		// 75,600 J, is dave's by SM share; every idle watt, 70·600 =
		// 42,000 J, and all 600 s go to the idle pool, since dave holds
		// no allocation.
		file: "host.yaml", gpus: 1,
		windows: []accWindow{{
			from: day + "00:00:00Z", to: day + "00:10:00Z",
			rows: map[string]map[string]accWant{
				"user":      {"dave": {alloc: 0, held: 0, present: accH(240), used: accH(120), kWh: accKWh(75600), peak: 2 * accGiB}},
				"container": {"dave (host)": {alloc: 0, held: 0, present: accH(240), used: accH(120), kWh: accKWh(75600), peak: 2 * accGiB}},
			},
			idleHours: accH(600), idleKWh: accKWh(42000),
			hostHours: accH(600), hostKWh: accKWh(75600 + 42000),
		}},
	}, {
		// blip runs 10 s at 100 % (700 W), 1 core and 1 GiB; the GPU
		// idles the other 110 s at 70 W.
		file: "short.yaml", gpus: 1,
		windows: []accWindow{{
			from: day + "00:00:00Z", to: day + "00:02:00Z",
			rows: map[string]map[string]accWant{
				"container": {"blip": {
					alloc: accH(10), held: accH(10), present: accH(10), used: accH(10), kWh: accKWh(700 * 10),
					cpu: accH(10), ram: accH(10), peak: 8 * accGiB, containers: 1,
				}},
			},
			idleHours: accH(110), idleKWh: accKWh(70 * 110),
			hostHours: accH(120), hostKWh: accKWh(7000 + 7700),
		}},
	}, {
		// midnight runs from 23:59:30 to 00:01:10 (100 s) at 75 %:
		// P = 70 + 472.5 = 542.5 W; 4 cores, 8 GiB. Per second of the job:
		// 1 s allocated, 0.75 s used, 542.5 J, 4 core-seconds, 8 GiB·s.
		// The GPU idles at 70 W the rest of 22:58–00:02.
		file: "midnight.yaml", gpus: 1,
		windows: []accWindow{
			// The whole scenario: the hour 23:00–00:00 from hour rows,
			// 22:58–23:00 and 00:00–00:02 from minute rows.
			midnight("2026-11-02T22:58:00Z", "2026-11-03T00:02:00Z", 100),
			// The hour before midnight, from hour rows alone: 30 s of the job.
			midnight("2026-11-02T23:00:00Z", "2026-11-03T00:00:00Z", 30),
			// The minute before midnight: the same 30 s.
			midnight("2026-11-02T23:59:00Z", "2026-11-03T00:00:00Z", 30),
			// After midnight: 60 s in 00:00, 10 s in 00:01.
			midnight("2026-11-03T00:00:00Z", "2026-11-03T00:02:00Z", 70),
			midnight("2026-11-03T00:00:00Z", "2026-11-03T00:01:00Z", 60),
			midnight("2026-11-03T00:01:00Z", "2026-11-03T00:02:00Z", 10),
		},
	}}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.file, ".yaml"), func(t *testing.T) {
			t.Parallel()
			db := accSimulate(t, tt.file, filepath.Join(t.TempDir(), "x.db"))
			for _, w := range tt.windows {
				for by, rows := range w.rows {
					rep := accReportOf(t, db, w.from, w.to, by)
					where := w.from + ".." + w.to + " by " + by
					accCheckRows(t, where, rep, rows)
					accClose(t, where+": idle GPU-hours", rep.Idle.GPUHours, w.idleHours)
					accClose(t, where+": idle kWh", rep.Idle.EnergyKWh, w.idleKWh)
					// The host's figures are the energy counters' and the
					// clock's, which the simulator keeps exact.
					accExact(t, where+": host GPU-hours", rep.Host.GPUHours, w.hostHours)
					accExact(t, where+": host kWh", rep.Host.EnergyKWh, w.hostKWh)
					accConserves(t, where, rep, tt.gpus)
				}
			}
		})
	}
}

// midnight is the midnight scenario's report over [from, to), in which
// the job ran for job seconds.
func midnight(from, to string, job float64) accWindow {
	f, _ := time.Parse(time.RFC3339, from)
	tt, _ := time.Parse(time.RFC3339, to)
	window := tt.Sub(f).Seconds()
	want := accWant{
		alloc: accH(job), held: accH(job), present: accH(job), used: accH(0.75 * job), kWh: accKWh(542.5 * job),
		cpu: accH(4 * job), ram: accH(8 * job), peak: 16 * accGiB, containers: 1,
	}
	return accWindow{
		from: from, to: to,
		rows: map[string]map[string]accWant{
			"container": {"midnight": want},
			"user":      {"hank": want},
		},
		idleHours: accH(window - job), idleKWh: accKWh(70 * (window - job)),
		hostHours: accH(window), hostKWh: accKWh(542.5*job + 70*(window-job)),
	}
}

// TestAccuracyCost prices the priced scenario through a config file.
//
// train holds the H100 (4.00 a GPU-hour by model) for 30 minutes at 100 %,
// 700 W: 1,260,000 J = 0.35 kWh; 2 cores, 16 GiB. eval holds the A100
// (1.50 by default) from 10m to 30m at 50 %, 50 + 350·0.5 = 225 W:
// 270,000 J = 0.075 kWh; 1 core, 4 GiB. Energy costs 0.20 a kWh at PUE
// 1.5, so 0.30 a metered kWh; a core-hour 0.05, a GiB-hour 0.01.
//
//	train: 0.5 h·4 + 0.35·0.30 + 1 core-h·0.05 + 8 GiB-h·0.01
//	     = 2 + 0.105 + 0.05 + 0.08                          = 2.235
//	eval:  (1/3)·1.5 + 0.075·0.30 + (1/3)·0.05 + (4/3)·0.01
//	     = 0.5 + 0.0225 + 0.0166… + 0.0133…                = 0.5525
//	idle:  H100 10 min, 70 W: (1/6)·4 + (42,000 J = 0.011666… kWh)·0.30
//	     + A100 20 min, 50 W: (1/3)·1.5 + (60,000 J = 0.016666… kWh)·0.30
//	     = 0.666… + 0.0035 + 0.5 + 0.005                   = 1.1751666…
//	host:  40 min of each GPU: (2/3)·4 + (2/3)·1.5          = 3.666…
//	     + (0.35 + 0.075 + 0.0283…) kWh·0.30                = 0.136
//	     + (4/3) core-h·0.05 + (28/3) GiB-h·0.01            = 0.0666… + 0.0933…
//	     = 3.9626666…, which is 2.235 + 0.5525 + 1.1751666…
func TestAccuracyCost(t *testing.T) {
	dir := t.TempDir()
	db := accSimulate(t, "priced.yaml", filepath.Join(dir, "x.db"))
	prices := `cost:
  currency: EUR
  gpu_hour:
    NVIDIA H100 80GB HBM3: 4
    default: 1.5
  cpu_core_hour: 0.05
  ram_gb_hour: 0.01
  kwh: 0.2
  pue: 1.5
`
	from, to := "2026-11-02T00:00:00Z", "2026-11-02T00:40:00Z"
	const train, eval, idle, host = 2.235, 0.5525, 0.6666666666666666 + 0.0035 + 0.5 + 0.005, 3.9626666666666667

	t.Run("idle pool not shared", func(t *testing.T) {
		cfg := accWrite(t, filepath.Join(dir, "none.yaml"), prices)
		rep := accReportOf(t, db, from, to, "user", "--config", cfg)
		if rep.Currency != "EUR" {
			t.Errorf("currency %q, want EUR", rep.Currency)
		}
		accCheckRows(t, "by user", rep, map[string]accWant{
			"alice": {alloc: accH(1800), held: accH(1800), present: accH(1800), used: accH(1800), kWh: 0.35, cpu: 1, ram: 8, peak: 70 * accGiB, containers: 1},
			"bob":   {alloc: accH(1200), held: accH(1200), present: accH(1200), used: accH(600), kWh: 0.075, cpu: accH(1200), ram: accH(4 * 1200), peak: 20 * accGiB, containers: 1},
		})
		accCost(t, rep, map[string]float64{"alice": train, "bob": eval})
		accClose(t, "idle cost", rep.Idle.Cost, idle)
		accClose(t, "host cost", rep.Host.Cost, host)
		accClose(t, "idle GPU-hours", rep.Idle.GPUHours, accH(600+1200))
		accClose(t, "idle kWh", rep.Idle.EnergyKWh, accKWh(42000+60000))
		accConserves(t, "by user", rep, 2)
		sum := rep.Idle.Cost
		for _, r := range rep.Rows {
			sum += r.Cost
		}
		accExact(t, "Σ rows' cost + idle cost vs host cost", sum, rep.Host.Cost)

		rep = accReportOf(t, db, from, to, "gpu", "--config", cfg)
		accCost(t, rep, map[string]float64{"acc/0 NVIDIA H100 80GB HBM3": train, "acc/1 NVIDIA A100-SXM4-80GB": eval})
		accConserves(t, "by gpu", rep, 2)
	})
	t.Run("idle pool shared by weight", func(t *testing.T) {
		// The pool goes to the rows in proportion to their allocated GPU
		// cost: alice 2.00, bob 0.50, so 4/5 and 1/5 of it.
		cfg := accWrite(t, filepath.Join(dir, "weighted.yaml"), prices+"  idle: weighted\n")
		rep := accReportOf(t, db, from, to, "user", "--config", cfg)
		if !rep.Idle.Shared {
			t.Errorf("idle pool not shared")
		}
		accCost(t, rep, map[string]float64{"alice": train + 0.8*idle, "bob": eval + 0.2*idle})
		var sum float64
		for _, r := range rep.Rows {
			sum += r.Cost
			want := 0.8 * idle
			if r.Key == "bob" {
				want = 0.2 * idle
			}
			accClose(t, r.Key+" idle share", r.CostIdleShare, want)
		}
		accExact(t, "Σ rows' cost vs host cost", sum, rep.Host.Cost)
		accClose(t, "host cost", rep.Host.Cost, host)
	})
}

// TestSimulateTwice checks that a second simulate into the same ledger is
// refused and leaves the ledger as it was.
func TestSimulateTwice(t *testing.T) {
	db := accSimulate(t, "exclusive.yaml", filepath.Join(t.TempDir(), "x.db"))
	from, to := "2026-11-02T00:00:00Z", "2026-11-02T00:10:00Z"
	before, stderr, code := harness.RunCLI(t, nil, "report", "--db", db, "--from", from, "--to", to, "--format", "json")
	if code != 0 {
		t.Fatalf("report exited %d: %s", code, stderr)
	}
	_, stderr, code = harness.RunCLI(t, nil, "simulate", "--scenario", harness.Testdata("accuracy/exclusive.yaml"), "--db", db)
	if code == 0 {
		t.Fatal("a second simulate into the same ledger succeeded")
	}
	for _, want := range []string{db, "already holds usage of node acc", "count it twice", "use another --db"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	after, _, _ := harness.RunCLI(t, nil, "report", "--db", db, "--from", from, "--to", to, "--format", "json")
	if after != before {
		t.Errorf("the refused simulate changed the ledger:\n%s", harness.DiffLines(before, after))
	}
}

// TestSimulateReproducible simulates one scenario into two ledgers and
// checks that every report format reads the same from both, byte for byte.
func TestSimulateReproducible(t *testing.T) {
	dir := t.TempDir()
	cfg := accWrite(t, filepath.Join(dir, "cost.yaml"), "cost:\n  gpu_hour:\n    default: 2.5\n  kwh: 0.3\n  cpu_core_hour: 0.04\n  idle: even\n")
	a := accSimulate(t, "priced.yaml", filepath.Join(dir, "a.db"))
	b := accSimulate(t, "priced.yaml", filepath.Join(dir, "b.db"))
	for _, format := range []string{"json", "csv", "table", "focus"} {
		for _, by := range []string{"user", "container", "gpu"} {
			args := []string{"report", "--config", cfg, "--from", "2026-11-02T00:00:00Z", "--to", "2026-11-02T00:40:00Z", "--by", by, "--format", format}
			outA, errA, codeA := harness.RunCLI(t, nil, append(args, "--db", a)...)
			outB, errB, codeB := harness.RunCLI(t, nil, append(args, "--db", b)...)
			if codeA != 0 || codeB != 0 {
				t.Fatalf("report --format %s exited %d and %d: %s%s", format, codeA, codeB, errA, errB)
			}
			if outA == "" || outA != outB {
				t.Errorf("--format %s --by %s differs between two ledgers of one scenario:\n%s", format, by, harness.DiffLines(outA, outB))
			}
		}
	}
}

func accSimulate(t *testing.T, scenario, db string) string {
	t.Helper()
	out, stderr, code := harness.RunCLI(t, nil, "simulate", "--scenario", harness.Testdata("accuracy/"+scenario), "--db", db)
	if code != 0 {
		t.Fatalf("simulate %s exited %d: %s%s", scenario, code, out, stderr)
	}
	return db
}

func accWrite(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func accReportOf(t *testing.T, db, from, to, by string, args ...string) accReport {
	t.Helper()
	args = append([]string{"report", "--db", db, "--from", from, "--to", to, "--by", by, "--format", "json"}, args...)
	out, stderr, code := harness.RunCLI(t, nil, args...)
	if code != 0 {
		t.Fatalf("%s exited %d: %s", strings.Join(args, " "), code, stderr)
	}
	var rep accReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if rep.By != by || rep.From.Format(time.RFC3339) != from || rep.To.Format(time.RFC3339) != to {
		t.Fatalf("report by %q over %s..%s, want by %q over %s..%s", rep.By, rep.From.Format(time.RFC3339), rep.To.Format(time.RFC3339), by, from, to)
	}
	return rep
}

func accCheckRows(t *testing.T, where string, rep accReport, want map[string]accWant) {
	t.Helper()
	got := map[string]accRow{}
	for _, r := range rep.Rows {
		got[r.Key] = r
	}
	for key, w := range want {
		r, ok := got[key]
		if !ok {
			t.Errorf("%s: no row %q; rows: %v", where, key, rowKeys(rep.Rows))
			continue
		}
		at := where + ": " + key
		accClose(t, at+" allocated GPU-hours", r.GPUHoursAllocated, w.alloc)
		accClose(t, at+" present GPU-hours", r.GPUHoursPresent, w.present)
		accClose(t, at+" used GPU-hours", r.GPUHoursUsed, w.used)
		accClose(t, at+" energy kWh", r.EnergyKWh, w.kWh)
		accClose(t, at+" CPU core-hours", r.CPUCoreHours, w.cpu)
		accClose(t, at+" RAM GiB-hours", r.RAMGBHours, w.ram)
		if r.PeakGPUMemoryBytes != w.peak {
			t.Errorf("%s peak GPU memory = %d, want %d", at, r.PeakGPUMemoryBytes, w.peak)
		}
		if r.Containers != w.containers {
			t.Errorf("%s containers = %d, want %d", at, r.Containers, w.containers)
		}
		if r.GPUHoursHeld == nil {
			t.Errorf("%s held GPU-hours = null, want %v", at, w.held)
		} else {
			accClose(t, at+" held GPU-hours", *r.GPUHoursHeld, w.held)
		}
		// Efficiency is used over held, 0 for rows that held nothing,
		// and never above 100 %.
		eff := 0.0
		if w.held > 0 {
			eff = w.used / w.held
		}
		accClose(t, at+" efficiency", r.Efficiency, eff)
		if r.Efficiency < 0 || r.Efficiency > 1 {
			t.Errorf("%s efficiency = %v, want within 0..1", at, r.Efficiency)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: rows %v, want %d", where, rowKeys(rep.Rows), len(want))
	}
}

func rowKeys(rows []accRow) []string {
	var keys []string
	for _, r := range rows {
		keys = append(keys, r.Key)
	}
	return keys
}

func accCost(t *testing.T, rep accReport, want map[string]float64) {
	t.Helper()
	for _, r := range rep.Rows {
		w, ok := want[r.Key]
		if !ok {
			t.Errorf("unexpected row %q", r.Key)
			continue
		}
		accClose(t, r.Key+" cost", r.Cost, w)
	}
}

// accClose checks a figure against its hand-worked value to 0.1 %.
func accClose(t *testing.T, what string, got, want float64) {
	t.Helper()
	if want == 0 {
		if math.Abs(got) > 1e-12 {
			t.Errorf("%s = %v, want 0", what, got)
		}
		return
	}
	if math.Abs(got-want) > 1e-3*math.Abs(want) {
		t.Errorf("%s = %v, want %v (off by %.3g %%)", what, got, want, 100*(got-want)/want)
	}
}

// accExact checks an identity that holds to float rounding.
func accExact(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(math.Abs(want), 1e-9) {
		t.Errorf("%s: %v, want %v (off by %.3g)", what, got, want, got-want)
	}
}

// accConserves checks that an unfiltered report adds up to the host: every
// joule booked to a row or to the idle pool, and every GPU-second of the
// window held by a row or idle.
func accConserves(t *testing.T, where string, rep accReport, gpus int) {
	t.Helper()
	var energy, alloc float64
	for _, r := range rep.Rows {
		energy += r.EnergyKWh
		alloc += r.GPUHoursAllocated
	}
	if rep.Host.GPUs != gpus {
		t.Errorf("%s: host has %d GPUs, want %d", where, rep.Host.GPUs, gpus)
	}
	window := float64(gpus) * rep.To.Sub(rep.From).Hours()
	accExact(t, where+": Σ rows' kWh + idle kWh vs host kWh", energy+rep.Idle.EnergyKWh, rep.Host.EnergyKWh)
	accExact(t, where+": Σ rows' allocated + idle GPU-hours vs host GPU-hours", alloc+rep.Idle.GPUHours, rep.Host.GPUHours)
	accExact(t, where+": host GPU-hours vs GPUs × window", rep.Host.GPUHours, window)
}
