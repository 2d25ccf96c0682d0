package meter

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
)

// The scenarios below are written so that every figure can be checked by
// hand: energy counters are given in joules (the tests store them in mJ),
// power in watts, times in seconds from start.

var start = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)

func at(sec int) time.Time { return start.Add(time.Duration(sec) * time.Second) }

var (
	ownerA = container.Owner{Kind: container.OwnerContainer, ID: "a"}
	ownerB = container.Owner{Kind: container.OwnerContainer, ID: "b"}
	ownerC = container.Owner{Kind: container.OwnerContainer, ID: "c"}
	bob    = container.Owner{Kind: container.OwnerHost, ID: "bob"}
	nobody = container.Owner{}
)

// running is a running container holding the GPUs its request names.
func running(id string, gpus ...string) container.Container {
	return container.Container{ID: id, Name: id, Running: true, GPUs: container.GPURequest{IDs: gpus}}
}

// stopped is a container that has exited; it holds nothing.
func stopped(id string, gpus ...string) container.Container {
	c := running(id, gpus...)
	c.Running = false
	return c
}

// proc is a GPU process and the owner the resolver gave it.
type proc struct {
	pid   uint32
	owner container.Owner
	sm    float64
	mem   uint64
}

// dev is one device at one sample. Device i is GPU index i with UUID
// "GPU-i" unless noUUID is set.
type dev struct {
	util    float64
	watts   float64
	energyJ uint64 // counter, in joules
	procs   []proc
	missing []gpu.Field
	err     error
	noUUID  bool
	model   string
	mig     []gpu.MIGInstance
}

type sample struct {
	sec  int
	devs []dev
	ctrs []container.Container
}

func uuid(i int) string { return "GPU-" + strconv.Itoa(i) }

func (s sample) input() Input {
	in := Input{Time: at(s.sec), Sample: gpu.Sample{Time: at(s.sec)}, Containers: s.ctrs}
	for i, d := range s.devs {
		dv := gpu.Device{
			Index:             i,
			UUID:              uuid(i),
			Model:             d.model,
			Err:               d.err,
			Util:              d.util,
			PowerWatts:        d.watts,
			EnergyMilliJoules: d.energyJ * 1000,
			Missing:           d.missing,
			MIGEnabled:        len(d.mig) > 0,
			MIG:               d.mig,
		}
		if d.noUUID {
			dv.UUID = ""
		}
		var owners []container.Owner
		for _, p := range d.procs {
			dv.Processes = append(dv.Processes, gpu.Process{
				PID: p.pid, MemoryUsed: p.mem, SMUtil: p.sm,
				GPUInstanceID: -1, ComputeInstanceID: -1,
			})
			owners = append(owners, p.owner)
		}
		in.Sample.Devices = append(in.Sample.Devices, dv)
		in.Owners = append(in.Owners, owners)
	}
	return in
}

// run steps a fresh meter through the samples, checking every tick's
// conservation laws on the way, and returns the ticks.
func run(t *testing.T, cfg Config, samples []sample) []*Tick {
	t.Helper()
	m := New(cfg)
	var ticks []*Tick
	for _, s := range samples {
		tick := m.Step(s.input())
		checkConservation(t, tick)
		ticks = append(ticks, tick)
	}
	return ticks
}

func usageKey(u Usage) string { return fmt.Sprintf("%s/%s@%d", u.Owner.Kind, u.Owner.ID, u.GPU) }

func totals(tick *Tick) map[string]Sums {
	out := map[string]Sums{}
	for _, u := range tick.Usage {
		out[usageKey(u)] = u.Total
	}
	return out
}

func gpuTotals(tick *Tick) []GPUSums {
	var out []GPUSums
	for _, g := range tick.GPUs {
		out = append(out, g.Total)
	}
	return out
}

var approx = cmpopts.EquateApprox(1e-9, 1e-9)

// ignoreSeconds leaves out the interval a container delta covers where a
// test checks only what was booked; TestContainerInterval checks it.
var ignoreSeconds = cmpopts.IgnoreFields(ContainerSums{}, "Seconds")

// near reports whether a and b agree to 1e-9 relative (absolute near zero).
func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*max(1, math.Abs(a), math.Abs(b))
}

// checkConservation asserts, for every GPU of a tick, that the owners'
// energy plus the idle pool is the GPU's energy, that the owners'
// allocated seconds are the GPU's allocated seconds, that allocated plus
// idle is the metered time, and that the owners' used seconds plus the
// unattributed ones are the device's used seconds. It also asserts what
// held seconds are: each of the n holders holds the whole interval while
// its allocated share is 1/n of it, nobody else holds anything, and no
// holder uses more than it held (efficiency, used / held, is within 0..1).
func checkConservation(t *testing.T, tick *Tick) {
	t.Helper()
	type sum struct {
		energy, alloc, used float64
		holders             int
	}
	byGPU := map[int]sum{}
	for _, u := range tick.Usage {
		if u.Delta.EnergyJoules < 0 {
			t.Errorf("%s: %s: energy %v < 0", tick.Time.Format(time.TimeOnly), usageKey(u), u.Delta.EnergyJoules)
		}
		s := byGPU[u.GPU]
		s.energy += u.Delta.EnergyJoules
		s.alloc += u.Delta.AllocatedSeconds
		s.used += u.Delta.UsedSeconds
		if u.Delta.HeldSeconds > 0 {
			s.holders++
		}
		byGPU[u.GPU] = s
	}
	for _, u := range tick.Usage {
		d, when := u.Delta, tick.Time.Format(time.TimeOnly)
		var dt float64
		for _, g := range tick.GPUs {
			if g.Index == u.GPU {
				dt = g.Delta.Seconds
			}
		}
		switch {
		case u.Owner.Kind != container.OwnerContainer && d.HeldSeconds != 0:
			t.Errorf("%s: %s: held %v, want 0 for an owner that is not a container", when, usageKey(u), d.HeldSeconds)
		case (d.HeldSeconds > 0) != (d.AllocatedSeconds > 0):
			t.Errorf("%s: %s: held %v and allocated %v: one without the other", when, usageKey(u), d.HeldSeconds, d.AllocatedSeconds)
		case d.HeldSeconds > 0 && !near(d.HeldSeconds, dt):
			t.Errorf("%s: %s: held %v, want the whole interval %v", when, usageKey(u), d.HeldSeconds, dt)
		case d.HeldSeconds > 0 && !near(d.AllocatedSeconds*float64(byGPU[u.GPU].holders), d.HeldSeconds):
			t.Errorf("%s: %s: allocated %v × %d holders, want held %v", when, usageKey(u), d.AllocatedSeconds, byGPU[u.GPU].holders, d.HeldSeconds)
		case d.HeldSeconds > 0 && d.UsedSeconds > d.HeldSeconds*(1+1e-12):
			t.Errorf("%s: %s: used %v > held %v: efficiency above 1", when, usageKey(u), d.UsedSeconds, d.HeldSeconds)
		}
	}
	for _, g := range tick.GPUs {
		d, s := g.Delta, byGPU[g.Index]
		when := tick.Time.Format(time.TimeOnly)
		if got := s.energy + d.IdleEnergyJoules; !near(got, d.EnergyJoules) {
			t.Errorf("%s GPU %d: owners' energy %v + idle %v = %v, want ΔE %v", when, g.Index, s.energy, d.IdleEnergyJoules, got, d.EnergyJoules)
		}
		if !near(s.alloc, d.AllocatedSeconds) {
			t.Errorf("%s GPU %d: owners' allocated seconds %v, want %v", when, g.Index, s.alloc, d.AllocatedSeconds)
		}
		if got := d.AllocatedSeconds + d.IdleSeconds; !near(got, d.Seconds) {
			t.Errorf("%s GPU %d: allocated %v + idle %v = %v, want %v", when, g.Index, d.AllocatedSeconds, d.IdleSeconds, got, d.Seconds)
		}
		if got := s.used + d.UnattributedSeconds; !near(got, d.UsedSeconds) {
			t.Errorf("%s GPU %d: owners' used %v + unattributed %v = %v, want %v", when, g.Index, s.used, d.UnattributedSeconds, got, d.UsedSeconds)
		}
	}
}

func TestStep(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		samples []sample
		// Totals at the last tick.
		wantGPU   []GPUSums
		wantUsage map[string]Sums
	}{
		{
			// Idle power is the lowest power seen: 100 W.
			// [0,10): a holds, no process. ΔE = 1000 J; idle part
			//   min(1000, 100·10) = 1000 → a (share 1); active 0.
			// [10,20): a at SM 80 of util 80. ΔE = 5000−1000 = 4000 J;
			//   idle 100·10 = 1000 → a; active 3000·80/80 = 3000 → a.
			// a: allocated 10+10, present 10, used 10·0.8 = 8,
			//   memory 10·4000 = 40000, energy 1000+4000 = 5000.
			name: "exclusive GPU",
			samples: []sample{
				{0, []dev{{util: 0, watts: 100, energyJ: 0}}, []container.Container{running("a", "0")}},
				{10, []dev{{util: 80, watts: 400, energyJ: 1000, procs: []proc{{1, ownerA, 80, 4000}}}}, []container.Container{running("a", "0")}},
				{20, []dev{{util: 80, watts: 400, energyJ: 5000, procs: []proc{{1, ownerA, 80, 4000}}}}, []container.Container{running("a", "0")}},
			},
			wantGPU: []GPUSums{{Seconds: 20, AllocatedSeconds: 20, UsedSeconds: 8, EnergyJoules: 5000}},
			wantUsage: map[string]Sums{
				"container/a@0": {AllocatedSeconds: 20, HeldSeconds: 20, PresentSeconds: 10, UsedSeconds: 8, MemoryByteSeconds: 40000, EnergyJoules: 5000, PeakMemoryBytes: 4000},
			},
		},
		{
			// Each 1 s interval: ΔE = 300 J; idle min(300, 100·1) = 100,
			//   50 each (shares 1/2); active 200 split over
			//   max(util 100, Σsm 80) = 100: a 200·60/100 = 120,
			//   b 200·20/100 = 40, pool 200−160 = 40.
			//   a 50+120 = 170, b 50+40 = 90.
			// Two intervals: a 340, b 180, pool 80; allocated 2·½ = 1
			//   each, held 2 each (each had the GPU all the time);
			//   used a 2·0.6 = 1.2, b 2·0.2 = 0.4; unattributed
			//   2·(100−80)/100 = 0.4. a's efficiency is used / held =
			//   60 %, where used / allocated would be 120 %.
			name: "two containers time-slicing one GPU",
			cfg:  Config{IdleWatts: map[string]float64{"GPU-0": 100}},
			samples: func() []sample {
				ctrs := []container.Container{running("a", "0"), running("b", "0")}
				procs := []proc{{1, ownerA, 60, 3000}, {2, ownerB, 20, 1000}}
				return []sample{
					{0, []dev{{util: 100, watts: 300, energyJ: 0, procs: procs}}, ctrs},
					{1, []dev{{util: 100, watts: 300, energyJ: 300, procs: procs}}, ctrs},
					{2, []dev{{util: 100, watts: 300, energyJ: 600, procs: procs}}, ctrs},
				}
			}(),
			wantGPU: []GPUSums{{Seconds: 2, AllocatedSeconds: 2, UsedSeconds: 2, UnattributedSeconds: 0.4, EnergyJoules: 600, IdleEnergyJoules: 80}},
			wantUsage: map[string]Sums{
				"container/a@0": {AllocatedSeconds: 1, HeldSeconds: 2, PresentSeconds: 2, UsedSeconds: 1.2, MemoryByteSeconds: 6000, EnergyJoules: 340, PeakMemoryBytes: 3000},
				"container/b@0": {AllocatedSeconds: 1, HeldSeconds: 2, PresentSeconds: 2, UsedSeconds: 0.4, MemoryByteSeconds: 2000, EnergyJoules: 180, PeakMemoryBytes: 1000},
			},
		},
		{
			// Three holders, one busy: each is allocated ⅓ of the 2 s
			//   and holds all of it. a at SM 90: used 1.8, which is 270 %
			//   of its allocated ⅔ and 90 % of its held 2.
			// Idle 300 W = the power: ΔE is all idle, 100 J each per
			//   interval by share.
			name: "three containers time-slicing, one busy",
			cfg:  Config{IdleWatts: map[string]float64{"GPU-0": 300}},
			samples: func() []sample {
				ctrs := []container.Container{running("a", "0"), running("b", "0"), running("c", "0")}
				procs := []proc{{1, ownerA, 90, 1000}, {2, ownerB, 5, 1000}, {3, ownerC, 5, 1000}}
				return []sample{
					{0, []dev{{util: 100, watts: 300, energyJ: 0, procs: procs}}, ctrs},
					{1, []dev{{util: 100, watts: 300, energyJ: 300, procs: procs}}, ctrs},
					{2, []dev{{util: 100, watts: 300, energyJ: 600, procs: procs}}, ctrs},
				}
			}(),
			wantGPU: []GPUSums{{Seconds: 2, AllocatedSeconds: 2, UsedSeconds: 2, EnergyJoules: 600}},
			wantUsage: map[string]Sums{
				"container/a@0": {AllocatedSeconds: 2.0 / 3, HeldSeconds: 2, PresentSeconds: 2, UsedSeconds: 1.8, MemoryByteSeconds: 2000, EnergyJoules: 200, PeakMemoryBytes: 1000},
				"container/b@0": {AllocatedSeconds: 2.0 / 3, HeldSeconds: 2, PresentSeconds: 2, UsedSeconds: 0.1, MemoryByteSeconds: 2000, EnergyJoules: 200, PeakMemoryBytes: 1000},
				"container/c@0": {AllocatedSeconds: 2.0 / 3, HeldSeconds: 2, PresentSeconds: 2, UsedSeconds: 0.1, MemoryByteSeconds: 2000, EnergyJoules: 200, PeakMemoryBytes: 1000},
			},
		},
		{
			// a holds GPU 0 by index and GPU 1 by UUID (other case).
			// GPU 0: ΔE 2500 J; idle min(2500, 50·10) = 500 → a;
			//   active 2000·90/90 = 2000 → a. a@0 = 2500.
			// GPU 1: ΔE 500 J; idle min(500, 50·10) = 500 → a; active 0.
			name: "container on two GPUs computing on one",
			cfg:  Config{IdleWatts: map[string]float64{"GPU-0": 50, "GPU-1": 50}},
			samples: func() []sample {
				ctrs := []container.Container{running("a", "0", "gpu-1")}
				return []sample{
					{0, []dev{{util: 90, watts: 250, energyJ: 0, procs: []proc{{1, ownerA, 90, 5000}}}, {util: 0, watts: 50, energyJ: 0}}, ctrs},
					{10, []dev{{util: 90, watts: 250, energyJ: 2500, procs: []proc{{1, ownerA, 90, 5000}}}, {util: 0, watts: 50, energyJ: 500}}, ctrs},
				}
			}(),
			wantGPU: []GPUSums{
				{Seconds: 10, AllocatedSeconds: 10, UsedSeconds: 9, EnergyJoules: 2500},
				{Seconds: 10, AllocatedSeconds: 10, EnergyJoules: 500},
			},
			wantUsage: map[string]Sums{
				"container/a@0": {AllocatedSeconds: 10, HeldSeconds: 10, PresentSeconds: 10, UsedSeconds: 9, MemoryByteSeconds: 50000, EnergyJoules: 2500, PeakMemoryBytes: 5000},
				"container/a@1": {AllocatedSeconds: 10, HeldSeconds: 10, EnergyJoules: 500},
			},
		},
		{
			// Nobody holds the GPU; bob runs outside any container.
			// ΔE 2000 J; idle min(2000, 100·10) = 1000 → pool (no
			//   holder); active 1000·50/50 = 1000 → bob.
			// bob: present 10, used 10·0.5 = 5, memory 10·2000 = 20000.
			name: "host process",
			cfg:  Config{IdleWatts: map[string]float64{"GPU-0": 100}},
			samples: []sample{
				{0, []dev{{util: 50, watts: 200, energyJ: 0, procs: []proc{{4242, bob, 50, 2000}}}}, nil},
				{10, []dev{{util: 50, watts: 200, energyJ: 2000, procs: []proc{{4242, bob, 50, 2000}}}}, nil},
			},
			wantGPU: []GPUSums{{Seconds: 10, IdleSeconds: 10, UsedSeconds: 5, EnergyJoules: 2000, IdleEnergyJoules: 1000}},
			wantUsage: map[string]Sums{
				"host/bob@0": {PresentSeconds: 10, UsedSeconds: 5, MemoryByteSeconds: 20000, EnergyJoules: 1000, PeakMemoryBytes: 2000},
			},
		},
		{
			// Idle power = lowest seen = 60 W. Each 10 s interval:
			//   ΔE 600 J = idle min(600, 60·10) → a; active 0.
			name: "idle allocated GPU",
			samples: []sample{
				{0, []dev{{util: 0, watts: 60, energyJ: 0}}, []container.Container{running("a", "0")}},
				{10, []dev{{util: 0, watts: 60, energyJ: 600}}, []container.Container{running("a", "0")}},
				{20, []dev{{util: 0, watts: 60, energyJ: 1200}}, []container.Container{running("a", "0")}},
			},
			wantGPU:   []GPUSums{{Seconds: 20, AllocatedSeconds: 20, EnergyJoules: 1200}},
			wantUsage: map[string]Sums{"container/a@0": {AllocatedSeconds: 20, HeldSeconds: 20, EnergyJoules: 1200}},
		},
		{
			// Idle power = 60 W. ΔE 650 J; idle 60·10 = 600 → a;
			//   active 50 with no SM and no memory → pool.
			name: "held GPU without processes drawing above idle power",
			samples: []sample{
				{0, []dev{{util: 0, watts: 60, energyJ: 0}}, []container.Container{running("a", "0")}},
				{10, []dev{{util: 0, watts: 65, energyJ: 650}}, []container.Container{running("a", "0")}},
			},
			wantGPU:   []GPUSums{{Seconds: 10, AllocatedSeconds: 10, EnergyJoules: 650, IdleEnergyJoules: 50}},
			wantUsage: map[string]Sums{"container/a@0": {AllocatedSeconds: 10, HeldSeconds: 10, EnergyJoules: 600}},
		},
		{
			// Nobody holds or uses it: 20 s and 800 J in the pool.
			name: "unallocated GPU",
			samples: []sample{
				{0, []dev{{util: 0, watts: 40, energyJ: 0}}, nil},
				{10, []dev{{util: 0, watts: 40, energyJ: 400}}, nil},
				{20, []dev{{util: 0, watts: 40, energyJ: 800}}, nil},
			},
			wantGPU:   []GPUSums{{Seconds: 20, IdleSeconds: 20, EnergyJoules: 800, IdleEnergyJoules: 800}},
			wantUsage: map[string]Sums{},
		},
		{
			// Σsm = 60+30 (a) + 30 (bob) = 120 > util 80: scaled by
			//   80/120 = 2/3, a 90·2/3 = 60, bob 30·2/3 = 20.
			// ΔE 280 J; idle min(280, 80·1) = 80 → a (sole holder);
			//   active 200: a 200·60/80 = 150, bob 200·20/80 = 50.
			// a 230, bob 50, pool 0; used a 0.6, bob 0.2, device 0.8.
			name: "owners' SM above device utilisation is scaled down",
			cfg:  Config{IdleWatts: map[string]float64{"GPU-0": 80}},
			samples: func() []sample {
				procs := []proc{{1, ownerA, 60, 1000}, {2, ownerA, 30, 500}, {3, bob, 30, 700}}
				ctrs := []container.Container{running("a", "0")}
				return []sample{
					{0, []dev{{util: 80, watts: 280, energyJ: 0, procs: procs}}, ctrs},
					{1, []dev{{util: 80, watts: 280, energyJ: 280, procs: procs}}, ctrs},
				}
			}(),
			wantGPU: []GPUSums{{Seconds: 1, AllocatedSeconds: 1, UsedSeconds: 0.8, EnergyJoules: 280}},
			wantUsage: map[string]Sums{
				"container/a@0": {AllocatedSeconds: 1, HeldSeconds: 1, PresentSeconds: 1, UsedSeconds: 0.6, MemoryByteSeconds: 1500, EnergyJoules: 230, PeakMemoryBytes: 1500},
				"host/bob@0":    {PresentSeconds: 1, UsedSeconds: 0.2, MemoryByteSeconds: 700, EnergyJoules: 50, PeakMemoryBytes: 700},
			},
		},
		{
			// a at SM 50 of util 100, idle 100 W, 10 s intervals.
			// [0,10): ΔE 8000−5000 = 3000; idle 1000 → a; active
			//   2000·50/100 = 1000 → a, 1000 → pool.
			// [10,20): 8000 → 1000 went back: ΔE = 1000 (from zero),
			//   all idle (min(1000, 1000)) → a.
			// [20,30): ΔE 3000, as the first: a 2000, pool 1000.
			// a 2000+1000+2000 = 5000, pool 2000, ΔE 7000, 1 reset;
			//   used 30·0.5 = 15, unattributed 30·(100−50)/100 = 15.
			name: "energy counter reset",
			cfg:  Config{IdleWatts: map[string]float64{"GPU-0": 100}},
			samples: func() []sample {
				procs := []proc{{1, ownerA, 50, 1000}}
				ctrs := []container.Container{running("a", "0")}
				return []sample{
					{0, []dev{{util: 100, watts: 300, energyJ: 5000, procs: procs}}, ctrs},
					{10, []dev{{util: 100, watts: 300, energyJ: 8000, procs: procs}}, ctrs},
					{20, []dev{{util: 100, watts: 300, energyJ: 1000, procs: procs}}, ctrs},
					{30, []dev{{util: 100, watts: 300, energyJ: 4000, procs: procs}}, ctrs},
				}
			}(),
			wantGPU: []GPUSums{{Seconds: 30, AllocatedSeconds: 30, UsedSeconds: 30, UnattributedSeconds: 15, EnergyJoules: 7000, IdleEnergyJoules: 2000, EnergyResets: 1}},
			wantUsage: map[string]Sums{
				"container/a@0": {AllocatedSeconds: 30, HeldSeconds: 30, PresentSeconds: 30, UsedSeconds: 15, MemoryByteSeconds: 30000, EnergyJoules: 5000, PeakMemoryBytes: 1000},
			},
		},
		{
			// PID 777 is a's at 0 s and bob's at 10 s (a exited and the
			// PID was reused). Idle 100 W.
			// [0,10): a's state: holder, SM 40 of 40. ΔE 2000; idle
			//   1000 → a; active 1000·40/40 = 1000 → a.
			// [10,20): bob's state, no holder. ΔE 3000; idle 1000 →
			//   pool; active 2000·70/70 = 2000 → bob.
			name: "PID reused by another owner",
			cfg:  Config{IdleWatts: map[string]float64{"GPU-0": 100}},
			samples: []sample{
				{0, []dev{{util: 40, watts: 200, energyJ: 0, procs: []proc{{777, ownerA, 40, 1000}}}}, []container.Container{running("a", "0")}},
				{10, []dev{{util: 70, watts: 300, energyJ: 2000, procs: []proc{{777, bob, 70, 3000}}}}, []container.Container{stopped("a", "0")}},
				{20, []dev{{util: 0, watts: 100, energyJ: 5000}}, []container.Container{stopped("a", "0")}},
			},
			wantGPU: []GPUSums{{Seconds: 20, AllocatedSeconds: 10, IdleSeconds: 10, UsedSeconds: 11, EnergyJoules: 5000, IdleEnergyJoules: 1000}},
			wantUsage: map[string]Sums{
				"container/a@0": {AllocatedSeconds: 10, HeldSeconds: 10, PresentSeconds: 10, UsedSeconds: 4, MemoryByteSeconds: 10000, EnergyJoules: 2000, PeakMemoryBytes: 1000},
				"host/bob@0":    {PresentSeconds: 10, UsedSeconds: 7, MemoryByteSeconds: 30000, EnergyJoules: 2000, PeakMemoryBytes: 3000},
			},
		},
		{
			// GPU 1 cannot be read at 10 s; its readings then are junk
			// (a lower counter would look like a reset) and are ignored.
			// GPU 0, each interval: ΔE 2000; idle 1000 → a; active
			//   1000·50/50 → a. Three intervals: 6000.
			// GPU 1: [0,20) booked at 20 s with the state at 0 s:
			//   ΔE 8000; idle 100·20 = 2000 → b; active 6000·100/100
			//   → b. [20,30): ΔE 4000 → b. b: 12000, used 30.
			name: "device error in the middle",
			cfg:  Config{IdleWatts: map[string]float64{"GPU-0": 100, "GPU-1": 100}},
			samples: func() []sample {
				ctrs := []container.Container{running("a", "0"), running("b", "1")}
				g0 := func(e uint64) dev { return dev{util: 50, watts: 200, energyJ: e, procs: []proc{{1, ownerA, 50, 1000}}} }
				g1 := func(e uint64) dev {
					return dev{util: 100, watts: 400, energyJ: e, procs: []proc{{2, ownerB, 100, 2000}}}
				}
				return []sample{
					{0, []dev{g0(0), g1(0)}, ctrs},
					{10, []dev{g0(2000), {watts: 1, energyJ: 1, err: errors.New("gpu is lost")}}, ctrs},
					{20, []dev{g0(4000), g1(8000)}, ctrs},
					{30, []dev{g0(6000), g1(12000)}, ctrs},
				}
			}(),
			wantGPU: []GPUSums{
				{Seconds: 30, AllocatedSeconds: 30, UsedSeconds: 15, EnergyJoules: 6000},
				{Seconds: 30, AllocatedSeconds: 30, UsedSeconds: 30, EnergyJoules: 12000},
			},
			wantUsage: map[string]Sums{
				"container/a@0": {AllocatedSeconds: 30, HeldSeconds: 30, PresentSeconds: 30, UsedSeconds: 15, MemoryByteSeconds: 30000, EnergyJoules: 6000, PeakMemoryBytes: 1000},
				"container/b@1": {AllocatedSeconds: 30, HeldSeconds: 30, PresentSeconds: 30, UsedSeconds: 30, MemoryByteSeconds: 60000, EnergyJoules: 12000, PeakMemoryBytes: 2000},
			},
		},
		{
			// No energy counter: ΔE = power at the interval's start · Δt.
			// Idle = lowest power seen = 150 W.
			// [0,10): 150·10 = 1500 J, all idle (min(1500, 1500)) → a.
			// [10,20): 250·10 = 2500 J; idle 1500 → a; active
			//   1000·40/80 = 500 → a, 500 → pool.
			// a 1500+1500+500 = 3500; used 10·0.5 + 10·0.4 = 9;
			//   device used 5 + 8 = 13, unattributed 10·(80−40)/100 = 4.
			name: "GPU without an energy counter",
			samples: func() []sample {
				ctrs := []container.Container{running("a", "0")}
				noE := []gpu.Field{gpu.FieldEnergy}
				return []sample{
					{0, []dev{{util: 50, watts: 150, missing: noE, procs: []proc{{1, ownerA, 50, 1000}}}}, ctrs},
					{10, []dev{{util: 80, watts: 250, missing: noE, procs: []proc{{1, ownerA, 40, 1000}}}}, ctrs},
					{20, []dev{{util: 80, watts: 250, missing: noE, procs: []proc{{1, ownerA, 40, 1000}}}}, ctrs},
				}
			}(),
			wantGPU: []GPUSums{{Seconds: 20, AllocatedSeconds: 20, UsedSeconds: 13, UnattributedSeconds: 4, EnergyJoules: 4000, IdleEnergyJoules: 500}},
			wantUsage: map[string]Sums{
				"container/a@0": {AllocatedSeconds: 20, HeldSeconds: 20, PresentSeconds: 20, UsedSeconds: 9, MemoryByteSeconds: 20000, EnergyJoules: 3500, PeakMemoryBytes: 1000},
			},
		},
		{
			// No SM activity: the active part splits by memory.
			// ΔE 200; idle 100 → 50 each; active 100: a 100·3000/4000
			//   = 75, b 100·1000/4000 = 25.
			name: "stalled containers split active energy by memory",
			cfg:  Config{IdleWatts: map[string]float64{"GPU-0": 100}},
			samples: func() []sample {
				procs := []proc{{1, ownerA, 0, 3000}, {2, ownerB, 0, 1000}}
				ctrs := []container.Container{running("a", "0"), running("b", "0")}
				return []sample{
					{0, []dev{{util: 0, watts: 200, energyJ: 0, procs: procs}}, ctrs},
					{1, []dev{{util: 0, watts: 200, energyJ: 200, procs: procs}}, ctrs},
				}
			}(),
			wantGPU: []GPUSums{{Seconds: 1, AllocatedSeconds: 1, EnergyJoules: 200}},
			wantUsage: map[string]Sums{
				"container/a@0": {AllocatedSeconds: 0.5, HeldSeconds: 1, PresentSeconds: 1, MemoryByteSeconds: 3000, EnergyJoules: 125, PeakMemoryBytes: 3000},
				"container/b@0": {AllocatedSeconds: 0.5, HeldSeconds: 1, PresentSeconds: 1, MemoryByteSeconds: 1000, EnergyJoules: 75, PeakMemoryBytes: 1000},
			},
		},
		{
			// The resolver found no owner: the process is booked to
			// nobody (OwnerNone), a row of its own.
			// ΔE 200; idle 100 → pool; active 100·50/50 → nobody.
			name: "process without an owner",
			cfg:  Config{IdleWatts: map[string]float64{"GPU-0": 100}},
			samples: []sample{
				{0, []dev{{util: 50, watts: 200, energyJ: 0, procs: []proc{{9, nobody, 50, 1000}}}}, nil},
				{1, []dev{{util: 50, watts: 200, energyJ: 200, procs: []proc{{9, nobody, 50, 1000}}}}, nil},
			},
			wantGPU: []GPUSums{{Seconds: 1, IdleSeconds: 1, UsedSeconds: 0.5, EnergyJoules: 200, IdleEnergyJoules: 100}},
			wantUsage: map[string]Sums{
				"none/@0": {PresentSeconds: 1, UsedSeconds: 0.5, MemoryByteSeconds: 1000, EnergyJoules: 100, PeakMemoryBytes: 1000},
			},
		},
		{
			// Both GPUs are model X; GPU 1 also has its own figure,
			// which wins. bob at SM 50 of 50, ΔE 200 J over 1 s.
			// GPU 0: idle 100 (by model) → pool; active 100 → bob.
			// GPU 1: idle 50 (by UUID) → pool; active 150 → bob.
			name: "idle power configured by UUID or model",
			cfg:  Config{IdleWatts: map[string]float64{"X": 100, "GPU-1": 50}},
			samples: func() []sample {
				d := func(e uint64) dev {
					return dev{model: "X", util: 50, watts: 200, energyJ: e, procs: []proc{{1, bob, 50, 0}}}
				}
				return []sample{
					{0, []dev{d(0), d(0)}, nil},
					{1, []dev{d(200), d(200)}, nil},
				}
			}(),
			wantGPU: []GPUSums{
				{Seconds: 1, IdleSeconds: 1, UsedSeconds: 0.5, EnergyJoules: 200, IdleEnergyJoules: 100},
				{Seconds: 1, IdleSeconds: 1, UsedSeconds: 0.5, EnergyJoules: 200, IdleEnergyJoules: 50},
			},
			wantUsage: map[string]Sums{
				"host/bob@0": {PresentSeconds: 1, UsedSeconds: 0.5, EnergyJoules: 100},
				"host/bob@1": {PresentSeconds: 1, UsedSeconds: 0.5, EnergyJoules: 150},
			},
		},
		{
			// a asks for a MIG device of GPU 0 (UUIDs compare without
			// case), so it holds GPU 0. Idle = 50 W: ΔE 500 all → a.
			name: "MIG device holds its GPU",
			samples: func() []sample {
				mig := []gpu.MIGInstance{{GPUInstanceID: 1, UUID: "MIG-0A"}}
				ctrs := []container.Container{running("a", "mig-0a")}
				return []sample{
					{0, []dev{{util: 0, watts: 50, energyJ: 0, mig: mig}}, ctrs},
					{10, []dev{{util: 0, watts: 50, energyJ: 500, mig: mig}}, ctrs},
				}
			}(),
			wantGPU:   []GPUSums{{Seconds: 10, AllocatedSeconds: 10, EnergyJoules: 500}},
			wantUsage: map[string]Sums{"container/a@0": {AllocatedSeconds: 10, HeldSeconds: 10, EnergyJoules: 500}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ticks := run(t, tt.cfg, tt.samples)
			for _, tick := range ticks {
				checkConservation(t, tick)
			}
			last := ticks[len(ticks)-1]
			if diff := cmp.Diff(gpuTotals(last), tt.wantGPU, approx); diff != "" {
				t.Errorf("GPU totals (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(totals(last), tt.wantUsage, approx); diff != "" {
				t.Errorf("usage totals (-got +want):\n%s", diff)
			}
		})
	}
}

// TestStepBooksEachIntervalToItsOpeningSample checks, tick by tick, that
// the interval after a sample goes to that sample's owners: PID 777 is a's
// at 0 s and bob's at 10 s.
func TestStepBooksEachIntervalToItsOpeningSample(t *testing.T) {
	cfg := Config{IdleWatts: map[string]float64{"GPU-0": 100}}
	ticks := run(t, cfg, []sample{
		{0, []dev{{util: 40, watts: 200, energyJ: 0, procs: []proc{{777, ownerA, 40, 1000}}}}, []container.Container{running("a", "0")}},
		{10, []dev{{util: 70, watts: 300, energyJ: 2000, procs: []proc{{777, bob, 70, 3000}}}}, nil},
		{20, []dev{{util: 0, watts: 100, energyJ: 5000}}, nil},
	})
	deltas := func(tick *Tick) map[string]float64 {
		out := map[string]float64{}
		for _, u := range tick.Usage {
			out[usageKey(u)] = u.Delta.EnergyJoules
		}
		return out
	}
	want := []map[string]float64{
		// 0 s primes: a's row appears with nothing booked.
		{"container/a@0": 0},
		// [0,10) → a: 1000 idle + 1000 active. bob's row appears.
		{"container/a@0": 2000, "host/bob@0": 0},
		// [10,20) → bob: 2000 active; 1000 idle to the pool.
		{"container/a@0": 0, "host/bob@0": 2000},
	}
	for i, tick := range ticks {
		if diff := cmp.Diff(deltas(tick), want[i], approx); diff != "" {
			t.Errorf("tick at %ds: energy deltas (-got +want):\n%s", 10*i, diff)
		}
	}
}

// TestStepDeviceError checks the tick in which a device could not be read:
// it books nothing for that device, keeps its totals, and the others go on.
func TestStepDeviceError(t *testing.T) {
	cfg := Config{IdleWatts: map[string]float64{"GPU-0": 100, "GPU-1": 100}}
	ctrs := []container.Container{running("a", "0"), running("b", "1")}
	errLost := errors.New("gpu is lost")
	g0 := func(e uint64) dev { return dev{util: 50, watts: 200, energyJ: e, procs: []proc{{1, ownerA, 50, 1000}}} }
	ticks := run(t, cfg, []sample{
		{0, []dev{g0(0), {util: 100, watts: 400, energyJ: 0}}, ctrs},
		{10, []dev{g0(2000), {util: 100, watts: 400, energyJ: 4000}}, ctrs},
		{20, []dev{g0(4000), {err: errLost}}, ctrs},
	})
	got := ticks[2].GPUs
	if !errors.Is(got[1].Err, errLost) {
		t.Errorf("GPU 1 Err = %v, want %v", got[1].Err, errLost)
	}
	// GPU 0: [10,20) ΔE 2000; idle 1000 → a; active 1000·50/50 → a.
	// GPU 1: nothing booked; its total stays at [0,10)'s 4000 J.
	want := []GPUSums{
		{Seconds: 10, AllocatedSeconds: 10, UsedSeconds: 5, EnergyJoules: 2000},
		{},
	}
	if diff := cmp.Diff([]GPUSums{got[0].Delta, got[1].Delta}, want, approx); diff != "" {
		t.Errorf("deltas (-got +want):\n%s", diff)
	}
	if got, want := got[1].Total.EnergyJoules, 4000.0; got != want {
		t.Errorf("GPU 1 total energy = %v, want %v", got, want)
	}
}

// TestStepCurrent checks the values a tick reports for the sample itself.
func TestStepCurrent(t *testing.T) {
	cfg := Config{IdleWatts: map[string]float64{"GPU-0": 80}}
	// GPU 0: a holds it and runs SM 60+30; bob runs SM 30; util 80, so
	// owners are scaled by 80/120: a 60, bob 20.
	// GPU 1 has no UUID; b holds it by index; idle = lowest power 70 W.
	ticks := run(t, cfg, []sample{{
		sec: 0,
		devs: []dev{
			{util: 80, watts: 280, procs: []proc{{1, ownerA, 60, 1000}, {2, ownerA, 30, 500}, {3, bob, 30, 700}}},
			{util: 10, watts: 70, noUUID: true},
		},
		ctrs: []container.Container{running("a", "0"), running("b", "1")},
	}})
	tick := ticks[0]
	wantGPUs := []GPU{
		{Index: 0, UUID: "GPU-0", Holders: 1, AttributedUtil: 80, UnattributedUtil: 0, IdleWatts: 80},
		{Index: 1, UUID: "", Holders: 1, AttributedUtil: 0, UnattributedUtil: 10, IdleWatts: 70},
	}
	if diff := cmp.Diff(tick.GPUs, wantGPUs, approx); diff != "" {
		t.Errorf("GPUs (-got +want):\n%s", diff)
	}
	// Sorted by owner kind, owner ID, GPU.
	// Rows are numbered as they first appear: a's and bob's on GPU 0,
	// then b's on GPU 1.
	wantUsage := []Usage{
		{Row: 1, Owner: ownerA, GPU: 0, UUID: "GPU-0", Share: 1, SMUtil: 60, MemoryBytes: 1500, Processes: 2},
		{Row: 3, Owner: ownerB, GPU: 1, UUID: "", Share: 1},
		{Row: 2, Owner: bob, GPU: 0, UUID: "GPU-0", SMUtil: 20, MemoryBytes: 700, Processes: 1},
	}
	if diff := cmp.Diff(tick.Usage, wantUsage, approx); diff != "" {
		t.Errorf("usage (-got +want):\n%s", diff)
	}
}

func TestStepRetain(t *testing.T) {
	// a holds GPU 0 and runs on it at 0 s only. Idle 100 W, power 200 W:
	// [0,10) ΔE 2000; idle 1000 → a; active 1000·50/50 → a.
	first := sample{0, []dev{{util: 50, watts: 200, energyJ: 0, procs: []proc{{1, ownerA, 50, 1000}}}}, []container.Container{running("a", "0")}}
	after := func(sec int) sample {
		return sample{sec, []dev{{util: 0, watts: 100, energyJ: 2000 + uint64(sec-10)*100}}, nil}
	}
	cfg := func(retain time.Duration) Config {
		return Config{IdleWatts: map[string]float64{"GPU-0": 100}, Retain: retain}
	}
	booked := Sums{AllocatedSeconds: 10, HeldSeconds: 10, PresentSeconds: 10, UsedSeconds: 5, MemoryByteSeconds: 10000, EnergyJoules: 2000, PeakMemoryBytes: 1000}
	tests := []struct {
		name    string
		cfg     Config
		samples []sample
		// a's row at each tick: nil when the row is gone.
		want []*Usage
	}{
		{
			// Last active at 0 s: kept while now−0 ≤ 25 s.
			name:    "kept after the owner leaves, dropped after Retain",
			cfg:     cfg(25 * time.Second),
			samples: []sample{first, after(10), after(20), after(30)},
			want: []*Usage{
				{Owner: ownerA, UUID: "GPU-0", Share: 1, SMUtil: 50, MemoryBytes: 1000, Processes: 1},
				{Owner: ownerA, UUID: "GPU-0", Delta: booked, Total: booked},
				{Owner: ownerA, UUID: "GPU-0", Total: booked},
				nil,
			},
		},
		{
			// The interval [0,10) is longer than Retain; its booking
			// must still reach the tick that closes it.
			name:    "interval longer than Retain",
			cfg:     cfg(5 * time.Second),
			samples: []sample{first, after(10), after(20)},
			want: []*Usage{
				{Owner: ownerA, UUID: "GPU-0", Share: 1, SMUtil: 50, MemoryBytes: 1000, Processes: 1},
				{Owner: ownerA, UUID: "GPU-0", Delta: booked, Total: booked},
				nil,
			},
		},
		{
			// Retain 0 is DefaultRetain (300 s): kept at 300 s, gone at
			// 301 s.
			name:    "zero means DefaultRetain",
			cfg:     cfg(0),
			samples: []sample{first, after(10), after(int(DefaultRetain / time.Second)), after(int(DefaultRetain/time.Second) + 1)},
			want: []*Usage{
				{Owner: ownerA, UUID: "GPU-0", Share: 1, SMUtil: 50, MemoryBytes: 1000, Processes: 1},
				{Owner: ownerA, UUID: "GPU-0", Delta: booked, Total: booked},
				{Owner: ownerA, UUID: "GPU-0", Total: booked},
				nil,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ticks := run(t, tt.cfg, tt.samples)
			for i, tick := range ticks {
				var got *Usage
				for _, u := range tick.Usage {
					if u.Owner == ownerA {
						got = &u
					}
				}
				if diff := cmp.Diff(got, tt.want[i], approx, cmpopts.IgnoreFields(Usage{}, "Row")); diff != "" {
					t.Errorf("tick at %v: a's row (-got +want):\n%s", tick.Time.Sub(start), diff)
				}
			}
		})
	}
}

func TestStepContainers(t *testing.T) {
	withStats := func(c container.Container, cpu float64, ram uint64) container.Container {
		c.CPUSeconds, c.MemoryBytes = cpu, ram
		return c
	}
	statsErr := func(c container.Container) container.Container {
		c.StatsErr = "read cgroup: no such file or directory"
		return c
	}
	a, b, c, d, e := running("a"), running("b"), running("c"), running("d"), running("e")
	type sums = map[string]ContainerSums
	steps := []struct {
		sec  int
		ctrs []container.Container
		want sums // Delta
	}{
		// First sight primes.
		{0, []container.Container{withStats(a, 100, 1000), withStats(b, 10, 1000), withStats(d, 20, 400)},
			sums{"a": {}, "b": {}, "d": {}}},
		// a: CPU 105−100 = 5, RAM 1000·10 = 10000.
		// b: stats unreadable: nothing booked, the last reading stands.
		// d: stopped, stats gone: CPU from zero 0, RAM 400·10 = 4000.
		// e: first seen without stats: nothing to prime with.
		{10, []container.Container{withStats(a, 105, 2000), statsErr(b), statsErr(stopped("d")), statsErr(e)},
			sums{"a": {CPUSeconds: 5, RAMByteSeconds: 10000}, "b": {}, "d": {CPUSeconds: 0, RAMByteSeconds: 4000}, "e": {}}},
		// a: counter went back (new cgroup): counts from zero, 2;
		//   RAM 2000·10 = 20000.
		// b: closes [0,20): CPU 12−10 = 2, RAM 1000·20 = 20000.
		// c: primes.
		// d: started again: CPU from zero 3, RAM 0 (it was stopped).
		// e: primes.
		{20, []container.Container{withStats(a, 2, 3000), withStats(b, 12, 500), withStats(c, 50, 100), withStats(d, 3, 400), withStats(e, 40, 100)},
			sums{"a": {CPUSeconds: 2, RAMByteSeconds: 20000}, "b": {CPUSeconds: 2, RAMByteSeconds: 20000}, "c": {}, "d": {CPUSeconds: 3}, "e": {}}},
		// a stopped: CPU 0 (from zero: 0), RAM 3000·10 = 30000.
		// b: CPU 1, RAM 500·10 = 5000. c: CPU 1, RAM 100·10 = 1000.
		// e: CPU 41−40 = 1, RAM 100·10 = 1000.
		{30, []container.Container{withStats(stopped("a"), 0, 0), withStats(b, 13, 500), withStats(c, 51, 100), withStats(e, 41, 100)},
			sums{"a": {CPUSeconds: 0, RAMByteSeconds: 30000}, "b": {CPUSeconds: 1, RAMByteSeconds: 5000}, "c": {CPUSeconds: 1, RAMByteSeconds: 1000}, "e": {CPUSeconds: 1, RAMByteSeconds: 1000}}},
		// a stays stopped: nothing.
		{40, []container.Container{withStats(stopped("a"), 0, 0)},
			sums{"a": {}}},
	}
	wantTotal := map[string]ContainerSums{
		"a": {CPUSeconds: 5 + 2 + 0, RAMByteSeconds: 10000 + 20000 + 30000},
	}
	m := New(Config{})
	var tick *Tick
	for _, s := range steps {
		tick = m.Step(Input{Time: at(s.sec), Containers: s.ctrs})
		got := map[string]ContainerSums{}
		var order []string
		for _, c := range tick.Containers {
			got[c.ID] = c.Delta
			order = append(order, c.Name)
		}
		if !slices.IsSorted(order) {
			t.Errorf("at %ds: containers in order %q, want sorted by name", s.sec, order)
		}
		if diff := cmp.Diff(got, s.want, approx, ignoreSeconds); diff != "" {
			t.Errorf("at %ds: container deltas (-got +want):\n%s", s.sec, diff)
		}
	}
	got := map[string]ContainerSums{}
	for _, c := range tick.Containers {
		got[c.ID] = c.Total
	}
	if diff := cmp.Diff(got, wantTotal, approx, ignoreSeconds); diff != "" {
		t.Errorf("container totals (-got +want):\n%s", diff)
	}
}

// TestStepConservation drives the meter with a long pseudo-random run over
// four GPUs (holders that come and go, processes of containers, host users
// and nobody, utilisation below and above the owners' sum, missing fields,
// counter resets, unreadable devices, uneven intervals) and checks at every
// tick that nothing is created or lost: energy against a counter model kept
// by the test, owners against the GPU, and totals against the deltas.
func TestStepConservation(t *testing.T) {
	const (
		nGPU    = 4
		nSample = 200
	)
	rng := rand.New(rand.NewPCG(1, 2))
	owners := []container.Owner{nobody, bob, {Kind: container.OwnerHost, ID: "alice"}}
	var ids []string
	for i := range 8 {
		id := fmt.Sprintf("c%d", i)
		ids = append(ids, id)
		owners = append(owners, container.Owner{Kind: container.OwnerContainer, ID: id})
	}
	m := New(Config{
		IdleWatts: map[string]float64{"GPU-0": 60, "GPU-1": 90},
		Retain:    5 * time.Second,
	})

	// The test's own view of each GPU's counter and the energy it implies.
	type last struct {
		ok       bool
		t        time.Time
		energyMJ uint64
		hasE     bool
		power    float64
	}
	var (
		prev     [nGPU]last
		counter  [nGPU]uint64
		wantE    [nGPU]float64 // Σ ΔE per GPU from the model
		deltaSum [nGPU]GPUSums // Σ of the ticks' deltas
		now      = start
	)
	for step := range nSample {
		now = now.Add(time.Duration(1+rng.IntN(10)) * time.Second)
		var ctrs []container.Container
		for _, id := range ids {
			c := container.Container{ID: id, Name: id, Running: rng.Float64() < 0.7}
			switch {
			case rng.Float64() < 0.05:
				c.GPUs.All = true
			default:
				for g := range nGPU {
					if rng.Float64() < 0.3 {
						if rng.IntN(2) == 0 {
							c.GPUs.IDs = append(c.GPUs.IDs, strconv.Itoa(g))
						} else {
							c.GPUs.IDs = append(c.GPUs.IDs, fmt.Sprintf("gpu-%d", g))
						}
					}
				}
			}
			ctrs = append(ctrs, c)
		}
		in := Input{Time: now, Sample: gpu.Sample{Time: now}, Containers: ctrs}
		for g := range nGPU {
			d := gpu.Device{Index: g, UUID: uuid(g), Util: rng.Float64() * 100, PowerWatts: 50 + rng.Float64()*650}
			dt := now.Sub(prev[g].t).Seconds()
			if !prev[g].ok {
				dt = 1
			}
			switch r := rng.Float64(); {
			case r < 0.03:
				counter[g] = uint64(rng.IntN(1_000_000)) // driver reload
			default:
				counter[g] += uint64(d.PowerWatts * dt * 1000 * (0.5 + rng.Float64()))
			}
			d.EnergyMilliJoules = counter[g]
			if rng.Float64() < 0.05 {
				d.Missing = append(d.Missing, gpu.FieldEnergy)
			}
			if rng.Float64() < 0.1 {
				d.Missing = append(d.Missing, gpu.FieldUtil)
			}
			var own []container.Owner
			for range rng.IntN(5) {
				sm := 0.0
				if rng.Float64() < 0.7 {
					sm = rng.Float64() * 100
				}
				d.Processes = append(d.Processes, gpu.Process{PID: uint32(rng.IntN(100)), MemoryUsed: uint64(rng.IntN(1 << 34)), SMUtil: sm})
				own = append(own, owners[rng.IntN(len(owners))])
			}
			if len(own) > 0 && rng.Float64() < 0.1 {
				own = own[:len(own)-1] // a missing entry counts as nobody
			}
			if rng.Float64() < 0.05 {
				d.Err = errors.New("unknown error")
			}
			in.Sample.Devices = append(in.Sample.Devices, d)
			in.Owners = append(in.Owners, own)

			if d.Err != nil {
				continue
			}
			cur := last{ok: true, t: now, energyMJ: d.EnergyMilliJoules, hasE: d.Has(gpu.FieldEnergy), power: d.PowerWatts}
			if p := prev[g]; p.ok {
				switch {
				case p.hasE && cur.hasE && cur.energyMJ >= p.energyMJ:
					wantE[g] += float64(cur.energyMJ-p.energyMJ) / 1000
				case p.hasE && cur.hasE:
					wantE[g] += float64(cur.energyMJ) / 1000
				default:
					wantE[g] += p.power * now.Sub(p.t).Seconds()
				}
			}
			prev[g] = cur
		}

		tick := m.Step(in)
		checkConservation(t, tick)
		for g := range nGPU {
			deltaSum[g].Add(tick.GPUs[g].Delta)
			if got := tick.GPUs[g].Total.EnergyJoules; !near(got, wantE[g]) {
				t.Errorf("step %d GPU %d: total energy %v, want %v from the counters", step, g, got, wantE[g])
			}
			if diff := cmp.Diff(tick.GPUs[g].Total, deltaSum[g], approx); diff != "" {
				t.Errorf("step %d GPU %d: total is not the sum of deltas (-got +want):\n%s", step, g, diff)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	// The run must have met what it is meant to exercise.
	var all GPUSums
	for g := range nGPU {
		all.Add(deltaSum[g])
	}
	if all.EnergyResets == 0 || all.AllocatedSeconds == 0 || all.IdleSeconds == 0 || all.UnattributedSeconds == 0 || all.IdleEnergyJoules == 0 {
		t.Errorf("the run missed a case: %+v", all)
	}
	t.Logf("%d samples over %d GPUs: %+v", nSample, nGPU, all)
}

// TestStepTickUnchanged checks that a tick stays as Step returned it while
// the meter goes on: a meter that stops at that tick returns the same one.
func TestStepTickUnchanged(t *testing.T) {
	ctrs := []container.Container{running("a", "0"), running("b", "0", "1")}
	samples := []sample{
		{0, []dev{{util: 70, watts: 300, energyJ: 0, procs: []proc{{1, ownerA, 60, 3000}, {2, ownerB, 20, 1000}}}, {watts: 50}}, ctrs},
		{1, []dev{{util: 90, watts: 400, energyJ: 300, procs: []proc{{1, bob, 90, 500}}}, {util: 10, watts: 70, energyJ: 50, procs: []proc{{3, ownerB, 10, 10}}}}, ctrs[1:]},
		{2, []dev{{util: 0, watts: 100, energyJ: 700}, {util: 100, watts: 90, energyJ: 120, procs: []proc{{4, ownerA, 100, 10}}}}, nil},
		{3, []dev{{util: 50, watts: 200, energyJ: 800, procs: []proc{{5, ownerB, 50, 99}}}, {err: errors.New("gpu is lost")}}, ctrs},
	}
	for k := range samples {
		m := New(Config{})
		var held *Tick
		for i, s := range samples {
			tick := m.Step(s.input())
			if i == k {
				held = tick
			}
		}
		want := run(t, Config{}, samples[:k+1])[k]
		if diff := cmp.Diff(held, want, cmpopts.EquateErrors()); diff != "" {
			t.Errorf("tick %d changed after later steps (-got +want):\n%s", k, diff)
		}
	}
}

// TestContainerInterval checks that a container delta says how long an
// interval it covers, so that sinks can place it in time.
func TestContainerInterval(t *testing.T) {
	c := container.Container{ID: "a", Name: "a", Running: true, CPUSeconds: 1, MemoryBytes: 10}
	m := New(Config{})
	first := m.Step(Input{Time: at(0), Containers: []container.Container{c}})
	c.CPUSeconds = 4
	second := m.Step(Input{Time: at(15), Containers: []container.Container{c}})
	if got := first.Containers[0].Delta.Seconds; got != 0 {
		t.Errorf("first sight covers %g s, want 0", got)
	}
	want := ContainerSums{CPUSeconds: 3, RAMByteSeconds: 150, Seconds: 15}
	if diff := cmp.Diff(second.Containers[0].Delta, want); diff != "" {
		t.Errorf("delta (-got +want):\n%s", diff)
	}
}

// TestRowNumbers checks that a row keeps its number while it lives and
// gets a new one when it comes back after Retain dropped it.
func TestRowNumbers(t *testing.T) {
	dev := gpu.Device{Index: 0, UUID: "GPU-0", Processes: []gpu.Process{{PID: 1, MemoryUsed: 1}}}
	bobOwns := [][]container.Owner{{bob}}
	m := New(Config{Retain: 5 * time.Second})
	rowOf := func(sec int, procs bool) uint64 {
		in := Input{Time: at(sec), Sample: gpu.Sample{Devices: []gpu.Device{dev}}, Owners: bobOwns}
		if !procs {
			in.Sample.Devices[0].Processes, in.Owners = nil, nil
		}
		for _, u := range m.Step(in).Usage {
			if u.Owner == bob {
				return u.Row
			}
		}
		return 0
	}
	first := rowOf(0, true)
	if first == 0 || rowOf(1, true) != first || rowOf(4, false) != first {
		t.Fatalf("bob's row changed number while it lived")
	}
	if got := rowOf(20, false); got != 0 {
		t.Fatalf("bob's row still listed after Retain: %d", got)
	}
	if again := rowOf(21, true); again == first || again == 0 {
		t.Errorf("bob's row came back as %d, want a new number (not %d)", again, first)
	}
}

// TestDuplicateUUID checks that a source reporting two devices under one
// UUID gets the second treated as unreadable instead of crashing the meter.
func TestDuplicateUUID(t *testing.T) {
	a := gpu.Device{Index: 0, UUID: "GPU-X", Util: 50, Processes: []gpu.Process{{PID: 1, SMUtil: 50}, {PID: 2, SMUtil: 10}}}
	b := gpu.Device{Index: 1, UUID: "GPU-X", Util: 10, Processes: []gpu.Process{{PID: 3, SMUtil: 10}}}
	owners := [][]container.Owner{{bob, bob}, {bob}}
	m := New(Config{})
	for sec := range 3 {
		tick := m.Step(Input{Time: at(sec), Sample: gpu.Sample{Devices: []gpu.Device{a, b}}, Owners: owners})
		if tick.GPUs[0].Err != nil || tick.GPUs[1].Err == nil {
			t.Fatalf("errors %v and %v; want only the second GPU marked", tick.GPUs[0].Err, tick.GPUs[1].Err)
		}
		if sec == 2 && tick.GPUs[0].Total.Seconds != 2 {
			t.Errorf("the first GPU was metered %g s, want 2", tick.GPUs[0].Total.Seconds)
		}
	}
}
