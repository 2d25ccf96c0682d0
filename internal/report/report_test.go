package report

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

const (
	a100 = "NVIDIA A100-SXM4-80GB"
	h100 = "NVIDIA H100 80GB HBM3"
	gib  = 1 << 30
)

var (
	from = time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	to   = from.Add(2 * time.Hour)
)

// fixture is two hours of one node with two GPUs:
//
//	GPU 0 (A100) held all 2 h by "train" (alice), used 1 h, 0.5 kWh.
//	GPU 1 (H100) held 1 h by "notebook" (bob), present 0.5 h, used 0.1 h,
//	  0.1 kWh; carol's host process present 0.5 h, used 0.25 h, 0.05 kWh;
//	  0.05 GPU-hours of use nobody accounts for, 0.01 kWh; idle 1 h with
//	  0.09 kWh booked to nobody. GPU 1 drew 0.1+0.05+0.01+0.09 = 0.25 kWh.
//	train used 8 CPU core-hours and 16 GiB for 2 h (32 GiB-hours);
//	notebook 1 core-hour and 8 GiB for 1 h (8 GiB-hours).
func fixture() ([]ledger.UsageTotal, []ledger.GPUTotal) {
	g0 := ledger.GPU{Node: "gpu1", UUID: "GPU-00000000-aaaa", Index: 0, Model: a100, MemoryTotal: 80 * gib}
	g1 := ledger.GPU{Node: "gpu1", UUID: "GPU-11111111-bbbb", Index: 1, Model: h100, MemoryTotal: 80 * gib}
	train := &ledger.Container{
		Node: "gpu1", ID: strings.Repeat("1a", 32), Name: "/train", Image: "pytorch/pytorch:2.4",
		Labels: map[string]string{"gpumeter.user": "alice", "env": "prod"},
		User:   "alice", Team: "vision", Project: "detector",
	}
	notebook := &ledger.Container{
		Node: "gpu1", ID: strings.Repeat("2b", 32), Name: "notebook", Image: "jupyter/scipy",
		User: "bob", Team: "vision",
	}
	usage := []ledger.UsageTotal{
		{
			Node: "gpu1", OwnerKind: ledger.KindContainer, OwnerID: train.ID, GPU: g0, Container: train,
			Sums: ledger.Sums{AllocatedSeconds: 7200, HeldSeconds: 7200, PresentSeconds: 7200, UsedSeconds: 3600,
				EnergyJoules: 1.8e6, PeakMemoryBytes: 40 * gib, PeakUtil: 95},
			CPUSeconds: 8 * 3600, RAMByteSeconds: 16 * gib * 7200,
		},
		{
			Node: "gpu1", OwnerKind: ledger.KindContainer, OwnerID: notebook.ID, GPU: g1, Container: notebook,
			Sums: ledger.Sums{AllocatedSeconds: 3600, HeldSeconds: 3600, PresentSeconds: 1800, UsedSeconds: 360,
				EnergyJoules: 0.36e6, PeakMemoryBytes: 10 * gib, PeakUtil: 40},
			CPUSeconds: 3600, RAMByteSeconds: 8 * gib * 3600,
		},
		{
			Node: "gpu1", OwnerKind: ledger.KindHost, OwnerID: "carol", GPU: g1,
			Sums: ledger.Sums{PresentSeconds: 1800, UsedSeconds: 900, EnergyJoules: 0.18e6,
				PeakMemoryBytes: 2 * gib, PeakUtil: 60},
		},
		{
			Node: "gpu1", OwnerKind: ledger.KindNone, GPU: g1,
			Sums: ledger.Sums{UsedSeconds: 180, EnergyJoules: 0.036e6, PeakUtil: 10},
		},
	}
	gpus := []ledger.GPUTotal{
		{GPU: g0, GPUSums: ledger.GPUSums{Seconds: 7200, AllocatedSeconds: 7200, UsedSeconds: 3600,
			EnergyJoules: 1.8e6, PeakUtil: 95}},
		{GPU: g1, GPUSums: ledger.GPUSums{Seconds: 7200, AllocatedSeconds: 3600, IdleSeconds: 3600,
			UsedSeconds: 1440, UnattributedSeconds: 180, EnergyJoules: 0.9e6, IdleEnergyJoules: 0.324e6, PeakUtil: 60}},
	}
	return usage, gpus
}

// prices: A100 2/GPU-h, everything else 3/GPU-h, CPU 0.05/core-h, RAM
// 0.01/GiB-h, energy 0.30/kWh at PUE 1.5, so a metered kWh costs 0.45.
func prices() cost.Model {
	return cost.Model{
		GPUHour:     map[string]float64{a100: 2, cost.DefaultPrice: 3},
		CPUCoreHour: 0.05, RAMGBHour: 0.01, KWh: 0.30, PUE: 1.5,
	}
}

// hours is a known GPU-hours figure.
func hours(h float64) *float64 { return &h }

var approx = cmp.Options{cmpopts.EquateApprox(0, 1e-9), cmpopts.IgnoreUnexported(Report{})}

func build(t *testing.T, by string, m cost.Model, filter func(*ledger.UsageTotal) bool) *Report {
	t.Helper()
	usage, gpus := fixture()
	r, err := Build(usage, gpus, Options{By: by, From: from, To: to, Cost: m, Filter: filter})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The rows by user of the fixture at the prices above, basis allocated:
//
//	alice  gpu 2 h × 2 = 4; cpu 8 × 0.05 = 0.4; ram 32 × 0.01 = 0.32;
//	       energy 0.5 × 0.45 = 0.225;                      cost 4.945
//	bob    gpu 1 h × 3 = 3; cpu 0.05; ram 0.08; energy 0.045; cost 3.175
//	carol  no allocation; energy 0.05 × 0.45 = 0.0225
//	(unattributed)        energy 0.01 × 0.45 = 0.0045
//	idle   gpu 1 h × 3 = 3; energy 0.09 × 0.45 = 0.0405;   cost 3.0405
//	host   gpu 2 h × 2 + 2 h × 3 = 10; energy 0.75 × 0.45 = 0.3375;
//	       cpu 0.45; ram 0.40;                             cost 11.1875
//	       = 4.945 + 3.175 + 0.0225 + 0.0045 + 3.0405
func TestBuildByUser(t *testing.T) {
	got := build(t, ByUser, prices(), nil)
	want := &Report{
		From: from, To: to, By: ByUser, Currency: "USD", Basis: cost.BasisAllocated, IdlePolicy: cost.IdleNone,
		Rows: []Row{
			{Key: "alice", GPUHoursAllocated: 2, GPUHoursHeld: hours(2), GPUHoursPresent: 2, GPUHoursUsed: 1, Efficiency: 0.5,
				EnergyKWh: 0.5, PeakGPUMemoryBytes: 40 * gib, PeakUtilizationPercent: 95, CPUCoreHours: 8, RAMGBHours: 32,
				CostGPU: 4, CostCPU: 0.4, CostRAM: 0.32, CostEnergy: 0.225, Cost: 4.945, Containers: 1},
			{Key: "bob", GPUHoursAllocated: 1, GPUHoursHeld: hours(1), GPUHoursPresent: 0.5, GPUHoursUsed: 0.1, Efficiency: 0.1,
				EnergyKWh: 0.1, PeakGPUMemoryBytes: 10 * gib, PeakUtilizationPercent: 40, CPUCoreHours: 1, RAMGBHours: 8,
				CostGPU: 3, CostCPU: 0.05, CostRAM: 0.08, CostEnergy: 0.045, Cost: 3.175, Containers: 1},
			// carol held no GPU: her use is not measured against anything.
			{Key: "carol", GPUHoursHeld: hours(0), GPUHoursPresent: 0.5, GPUHoursUsed: 0.25,
				EnergyKWh: 0.05, PeakGPUMemoryBytes: 2 * gib, PeakUtilizationPercent: 60,
				CostEnergy: 0.0225, Cost: 0.0225},
			{Key: KeyUnattributed, GPUHoursHeld: hours(0), GPUHoursUsed: 0.05, EnergyKWh: 0.01, PeakUtilizationPercent: 10,
				CostEnergy: 0.0045, Cost: 0.0045},
		},
		// efficiency over what was held: (1 + 0.1) / (2 + 1)
		Totals: Row{Key: "(total)", GPUHoursAllocated: 3, GPUHoursHeld: hours(3), GPUHoursPresent: 3, GPUHoursUsed: 1.4, Efficiency: 1.1 / 3,
			EnergyKWh: 0.66, PeakGPUMemoryBytes: 40 * gib, PeakUtilizationPercent: 95, CPUCoreHours: 9, RAMGBHours: 40,
			CostGPU: 7, CostCPU: 0.45, CostRAM: 0.4, CostEnergy: 0.297, Cost: 8.147, Containers: 2},
		Idle: Idle{GPUHours: 1, EnergyKWh: 0.09, Cost: 3.0405},
		Host: Host{GPUs: 2, GPUHours: 4, EnergyKWh: 0.75, Cost: 11.1875},
	}
	if diff := cmp.Diff(got, want, approx); diff != "" {
		t.Errorf("report (-got +want):\n%s", diff)
	}
}

func TestBuildCost(t *testing.T) {
	with := func(f func(*cost.Model)) cost.Model {
		m := prices()
		f(&m)
		return m
	}
	type charge struct {
		Key        string
		Cost, Idle float64
	}
	tests := []struct {
		name     string
		by       string
		model    cost.Model
		want     []charge
		idle     Idle
		unbilled Unbilled
		host     float64
	}{
		{
			name: "present",
			by:   ByUser, model: with(func(m *cost.Model) { m.Basis = cost.BasisPresent }),
			// alice 2 h × 2 + 0.945; bob 0.5 h × 3 + 0.175; carol 0.5 h × 3 + 0.0225.
			// Unbilled: alice 0, bob +0.5 h (1.5), carol −0.5 h (−1.5): 0.
			want:     []charge{{"alice", 4.945, 0}, {"bob", 1.675, 0}, {"carol", 1.5225, 0}, {KeyUnattributed, 0.0045, 0}},
			idle:     Idle{GPUHours: 1, EnergyKWh: 0.09, Cost: 3.0405},
			unbilled: Unbilled{GPUHours: 0, Cost: 0},
			host:     11.1875,
		},
		{
			name: "used",
			by:   ByUser, model: with(func(m *cost.Model) { m.Basis = cost.BasisUsed }),
			// alice 1 h × 2 + 0.945; bob 0.1 h × 3 + 0.175; carol 0.25 h × 3 +
			// 0.0225; unattributed 0.05 h × 3 + 0.0045. Unbilled: 3 − 1.4 =
			// 1.6 h costing 7 − 3.2 = 3.8. 4.347 + 3.0405 + 3.8 = 11.1875.
			want:     []charge{{"alice", 2.945, 0}, {"carol", 0.7725, 0}, {"bob", 0.475, 0}, {KeyUnattributed, 0.1545, 0}},
			idle:     Idle{GPUHours: 1, EnergyKWh: 0.09, Cost: 3.0405},
			unbilled: Unbilled{GPUHours: 1.6, Cost: 3.8},
			host:     11.1875,
		},
		{
			name: "weighted idle",
			by:   ByUser, model: with(func(m *cost.Model) { m.Idle = cost.IdleWeighted }),
			// allocated GPU cost: alice 4, bob 3. alice 3.0405 × 4/7, bob × 3/7.
			want: []charge{
				{"alice", 4.945 + 3.0405*4/7, 3.0405 * 4 / 7},
				{"bob", 3.175 + 3.0405*3/7, 3.0405 * 3 / 7},
				{"carol", 0.0225, 0}, {KeyUnattributed, 0.0045, 0}},
			idle: Idle{GPUHours: 1, EnergyKWh: 0.09, Cost: 3.0405, Shared: true},
			host: 11.1875,
		},
		{
			name: "even idle by user",
			by:   ByUser, model: with(func(m *cost.Model) { m.Idle = cost.IdleEven }),
			// alice, bob and carol used a GPU; unattributed use takes no share:
			// 3.0405 / 3 = 1.0135 each.
			want: []charge{{"alice", 5.9585, 1.0135}, {"bob", 4.1885, 1.0135}, {"carol", 1.036, 1.0135}, {KeyUnattributed, 0.0045, 0}},
			idle: Idle{GPUHours: 1, EnergyKWh: 0.09, Cost: 3.0405, Shared: true},
			host: 11.1875,
		},
		{
			name: "even idle by team",
			by:   ByTeam, model: with(func(m *cost.Model) { m.Idle = cost.IdleEven }),
			// vision (alice, bob) and (none) (carol): 1.52025 each.
			want: []charge{{"vision", 8.12 + 1.52025, 1.52025}, {KeyNone, 0.0225 + 1.52025, 1.52025}, {KeyUnattributed, 0.0045, 0}},
			idle: Idle{GPUHours: 1, EnergyKWh: 0.09, Cost: 3.0405, Shared: true},
			host: 11.1875,
		},
		{
			name: "weights",
			by:   ByUser, model: with(func(m *cost.Model) { m.Weights = map[string]float64{cost.WeightGPU: 2, cost.WeightEnergy: 0} }),
			// GPU costs double, energy is free. alice 8 + 0.4 + 0.32; bob 6 +
			// 0.05 + 0.08; idle 1 h × 3 × 2 = 6; host 20 + 0.45 + 0.4.
			want: []charge{{"alice", 8.72, 0}, {"bob", 6.13, 0}, {KeyUnattributed, 0, 0}, {"carol", 0, 0}},
			idle: Idle{GPUHours: 1, EnergyKWh: 0.09, Cost: 6},
			host: 20.85,
		},
		{
			name: "no default price",
			by:   ByUser, model: with(func(m *cost.Model) { delete(m.GPUHour, cost.DefaultPrice) }),
			// The H100 costs nothing: bob 0.175, idle 0.0405, host 4 + 0.3375 + 0.85.
			want: []charge{{"alice", 4.945, 0}, {"bob", 0.175, 0}, {"carol", 0.0225, 0}, {KeyUnattributed, 0.0045, 0}},
			idle: Idle{GPUHours: 1, EnergyKWh: 0.09, Cost: 0.0405},
			host: 5.1875,
		},
		{
			name: "weighted falls back to even",
			by:   ByUser, model: with(func(m *cost.Model) { m.GPUHour = nil; m.Idle = cost.IdleWeighted }),
			// No allocated GPU cost to weigh by: the pool's 0.0405 of energy
			// goes 0.0135 each to alice, bob and carol.
			want: []charge{{"alice", 0.945 + 0.0135, 0.0135}, {"bob", 0.175 + 0.0135, 0.0135}, {"carol", 0.0225 + 0.0135, 0.0135}, {KeyUnattributed, 0.0045, 0}},
			idle: Idle{GPUHours: 1, EnergyKWh: 0.09, Cost: 0.0405, Shared: true},
			host: 1.1875,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := build(t, tt.by, tt.model, nil)
			var got []charge
			for _, row := range r.Rows {
				got = append(got, charge{row.Key, row.Cost, row.CostIdleShare})
			}
			if diff := cmp.Diff(got, tt.want, approx); diff != "" {
				t.Errorf("rows (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(r.Idle, tt.idle, approx); diff != "" {
				t.Errorf("idle (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(r.Unbilled, tt.unbilled, approx); diff != "" {
				t.Errorf("unbilled (-got +want):\n%s", diff)
			}
			if !approxEqual(r.Host.Cost, tt.host) {
				t.Errorf("host cost %v, want %v", r.Host.Cost, tt.host)
			}
			checkInvariants(t, r, 1e-12)
		})
	}
}

func TestBuildBy(t *testing.T) {
	type key struct {
		Key        string
		Cost       float64
		Containers int
	}
	tests := []struct {
		by   string
		want []key
	}{
		{ByUser, []key{{"alice", 4.945, 1}, {"bob", 3.175, 1}, {"carol", 0.0225, 0}, {KeyUnattributed, 0.0045, 0}}},
		{ByTeam, []key{{"vision", 8.12, 2}, {KeyNone, 0.0225, 0}, {KeyUnattributed, 0.0045, 0}}},
		{ByProject, []key{{"detector", 4.945, 1}, {KeyNone, 3.1975, 1}, {KeyUnattributed, 0.0045, 0}}},
		{ByContainer, []key{{"train", 4.945, 1}, {"notebook", 3.175, 1}, {"carol (host)", 0.0225, 0}, {KeyUnattributed, 0.0045, 0}}},
		{ByImage, []key{{"pytorch/pytorch:2.4", 4.945, 1}, {"jupyter/scipy", 3.175, 1}, {KeyHost, 0.0225, 0}, {KeyUnattributed, 0.0045, 0}}},
		{ByGPU, []key{{"gpu1/0 " + a100, 4.945, 1}, {"gpu1/1 " + h100, 3.202, 1}}},
		{ByNode, []key{{"gpu1", 8.147, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.by, func(t *testing.T) {
			r := build(t, tt.by, prices(), nil)
			var got []key
			for _, row := range r.Rows {
				got = append(got, key{row.Key, row.Cost, row.Containers})
			}
			if diff := cmp.Diff(got, tt.want, approx); diff != "" {
				t.Errorf("rows (-got +want):\n%s", diff)
			}
			if r.Totals.Containers != 2 {
				t.Errorf("totals count %d containers, want 2", r.Totals.Containers)
			}
			checkInvariants(t, r, 1e-12)
		})
	}
}

func TestBuildUnknownBy(t *testing.T) {
	usage, gpus := fixture()
	_, err := Build(usage, gpus, Options{By: "owner"})
	if err == nil || !strings.Contains(err.Error(), `"owner"`) ||
		!strings.Contains(err.Error(), "user, team, project, container, image, gpu, node") {
		t.Errorf("Build by owner: error %v, want one naming it and listing the groupings", err)
	}
}

func TestBuildErrors(t *testing.T) {
	usage, gpus := fixture()
	if _, err := Build(usage, gpus, Options{By: ByUser, Cost: cost.Model{PUE: 0.5}}); err == nil {
		t.Error("Build with PUE 0.5: no error")
	}
	if _, err := Build(usage, gpus, Options{By: ByUser, From: to, To: from}); err == nil {
		t.Error("Build with To before From: no error")
	}
}

func TestBuildFilter(t *testing.T) {
	alice := func(u *ledger.UsageTotal) bool { return u.Container != nil && u.Container.User == "alice" }
	tests := []struct {
		name  string
		by    string
		model cost.Model
		want  []Row
	}{
		{
			name: "by user, weighted",
			by:   ByUser, model: cost.Model{GPUHour: map[string]float64{a100: 2, cost.DefaultPrice: 3}, Idle: cost.IdleWeighted},
			// The same row as unfiltered: 4 + 3 × 4/7.
			want: []Row{{Key: "alice", GPUHoursAllocated: 2, GPUHoursHeld: hours(2), GPUHoursPresent: 2, GPUHoursUsed: 1, Efficiency: 0.5,
				EnergyKWh: 0.5, PeakGPUMemoryBytes: 40 * gib, PeakUtilizationPercent: 95, CPUCoreHours: 8, RAMGBHours: 32,
				CostGPU: 4, CostIdleShare: 3.0 * 4 / 7, Cost: 4 + 3.0*4/7, Containers: 1}},
		},
		{
			name: "by team, even",
			by:   ByTeam, model: cost.Model{GPUHour: map[string]float64{a100: 2, cost.DefaultPrice: 3}, Idle: cost.IdleEven},
			// vision's share, 3 / 2, split by allocated GPU cost: alice 4/7 of it.
			want: []Row{{Key: "vision", GPUHoursAllocated: 2, GPUHoursHeld: hours(2), GPUHoursPresent: 2, GPUHoursUsed: 1, Efficiency: 0.5,
				EnergyKWh: 0.5, PeakGPUMemoryBytes: 40 * gib, PeakUtilizationPercent: 95, CPUCoreHours: 8, RAMGBHours: 32,
				CostGPU: 4, CostIdleShare: 1.5 * 4 / 7, Cost: 4 + 1.5*4/7, Containers: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := build(t, tt.by, tt.model, alice)
			if diff := cmp.Diff(r.Rows, tt.want, approx); diff != "" {
				t.Errorf("rows (-got +want):\n%s", diff)
			}
			if !r.Filtered {
				t.Error("Filtered not set")
			}
			if !approxEqual(r.Idle.Cost, 3) || !approxEqual(r.Host.Cost, 10) {
				t.Errorf("idle cost %v, host cost %v; want the host's 3 and 10", r.Idle.Cost, r.Host.Cost)
			}
		})
	}
}

// TestDeterministic builds the same report twice and wants the same bytes
// in every format.
func TestDeterministic(t *testing.T) {
	usage, gpus := randomLedger(7, 200)
	m := randomModel()
	m.Idle = cost.IdleEven
	for _, by := range Groupings() {
		var out [2]bytes.Buffer
		for i := range out {
			r, err := Build(usage, gpus, Options{By: by, From: from, To: from.Add(24 * time.Hour), Cost: m})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range []func(*bytes.Buffer) error{
				func(b *bytes.Buffer) error { return r.WriteTable(b) },
				func(b *bytes.Buffer) error { return r.WriteCSV(b) },
				func(b *bytes.Buffer) error { return r.WriteJSON(b) },
				func(b *bytes.Buffer) error { return r.WriteFOCUS(b) },
			} {
				if err := w(&out[i]); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
			t.Errorf("by %s: two builds of the same input differ", by)
		}
	}
}

func approxEqual(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*max(1, math.Abs(a), math.Abs(b))
}

func TestRound(t *testing.T) {
	tests := []struct{ in, want float64 }{
		{0.1 + 0.2, 0.3},
		{1.4000000000000001, 1.4},
		{0.22499999999999998, 0.225},
		{2.0 / 3, 0.666666666667},
		{-1.5999999999999999, -1.6},
		{123456789012345, 123456789012000},
		{1e-15 / 3, 3.33333333333e-16},
		{math.Copysign(0, -1), 0},
		{1000, 1000},
	}
	for _, tt := range tests {
		if got := round(tt.in); got != tt.want || math.Signbit(got) != math.Signbit(tt.want) {
			t.Errorf("round(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestBuildEmpty(t *testing.T) {
	r, err := Build(nil, nil, Options{By: ByUser, From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"rows": []`) {
		t.Errorf("empty report's JSON has no empty rows array:\n%s", b.String())
	}
	for _, w := range []func(*bytes.Buffer) error{
		func(b *bytes.Buffer) error { return r.WriteTable(b) },
		func(b *bytes.Buffer) error { return r.WriteCSV(b) },
		func(b *bytes.Buffer) error { return r.WriteFOCUS(b) },
	} {
		if err := w(&b); err != nil {
			t.Error(err)
		}
	}
}
