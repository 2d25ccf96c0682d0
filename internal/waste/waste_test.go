package waste

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

var t0 = time.Date(2026, 11, 2, 18, 0, 0, 0, time.UTC)

const giB = 1 << 30

func min2t(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }

// phase is what a container does on its GPUs from a minute on.
type phase struct {
	at   int       // minute from the container's start
	util []float64 // SM % per GPU; shorter means 0 for the rest
	mem  float64   // GiB held on each GPU with util listed
}

// ctr is a container of a test ledger, at minute resolution.
type ctr struct {
	name     string
	gpus     []int
	from, to int // minutes from t0
	cpu      float64
	share    float64 // allocation share on each GPU; 0 means 1
	// unheldTo is the minute (from t0) up to which the ledger has no held
	// seconds for it, as rows written before gpumeter kept them.
	unheldTo int
	phases   []phase
}

// hostProc is a process outside containers on one GPU.
type hostProc struct {
	user     string
	gpu      int
	from, to int
	util     float64
}

var testGPUs = func() []ledger.GPU {
	var gs []ledger.GPU
	for i := range 8 {
		gs = append(gs, ledger.GPU{Node: "n1", UUID: fmt.Sprintf("GPU-%d", i), Index: i, Model: "H100"})
	}
	return gs
}()

// points writes the ledger's minute points for the containers and host
// processes, as the recorder would.
func points(ctrs []ctr, hosts []hostProc) ([]ledger.UsagePoint, []ledger.ContainerUsage) {
	var ps []ledger.UsagePoint
	var cs []ledger.ContainerUsage
	for _, c := range ctrs {
		meta := &ledger.Container{Node: "n1", ID: "id-" + c.name, Name: c.name, User: "u-" + c.name,
			StartedAt: min2t(c.from), FinishedAt: min2t(c.to), FirstSeen: min2t(c.from), LastSeen: min2t(c.to)}
		share := c.share
		if share == 0 {
			share = 1
		}
		for m := c.from; m < c.to; m++ {
			var ph phase
			for _, p := range c.phases {
				if m-c.from >= p.at {
					ph = p
				}
			}
			for i, g := range c.gpus {
				s := ledger.Sums{AllocatedSeconds: 60 * share, HeldSeconds: 60}
				if i < len(ph.util) {
					s.PresentSeconds = 60
					s.UsedSeconds = 60 * ph.util[i] / 100
					s.MemoryByteSeconds = 60 * ph.mem * giB
				}
				var unheld ledger.Unheld
				if m < c.unheldTo {
					s.HeldSeconds, unheld = 0, ledger.Unheld{Rows: 1, All: true, UsedSeconds: s.UsedSeconds}
				}
				ps = append(ps, ledger.UsagePoint{Start: min2t(m), Node: "n1", OwnerKind: ledger.KindContainer, OwnerID: meta.ID,
					GPU: testGPUs[g], Sums: s, Unheld: unheld, Container: meta})
			}
			cs = append(cs, ledger.ContainerUsage{Node: "n1", Start: min2t(m), ContainerID: meta.ID, CPUSeconds: 60 * c.cpu})
		}
	}
	for _, h := range hosts {
		for m := h.from; m < h.to; m++ {
			ps = append(ps, ledger.UsagePoint{Start: min2t(m), Node: "n1", OwnerKind: ledger.KindHost, OwnerID: h.user, GPU: testGPUs[h.gpu],
				Sums: ledger.Sums{PresentSeconds: 60, UsedSeconds: 60 * h.util / 100, MemoryByteSeconds: 60 * giB}})
		}
	}
	slices.SortStableFunc(ps, func(a, b ledger.UsagePoint) int { return a.Start.Compare(b.Start) })
	slices.SortStableFunc(cs, func(a, b ledger.ContainerUsage) int { return a.Start.Compare(b.Start) })
	return ps, cs
}

// want is one expected finding.
type want struct {
	rule   string
	who    string // container name or host user
	gpus   []int
	since  int     // minutes from t0
	until  int     // minutes from t0
	wasted float64 // GPU-hours
	active bool
}

func check(t *testing.T, got *Report, wants []want) {
	t.Helper()
	type key struct {
		rule, who, gpus string
	}
	keyOf := func(rule, who string, gpus []int) key {
		return key{rule, who, fmt.Sprint(gpus)}
	}
	seen := map[key]bool{}
	for _, w := range wants {
		k := keyOf(w.rule, w.who, w.gpus)
		seen[k] = true
		var f *Finding
		for i := range got.Findings {
			g := &got.Findings[i]
			if keyOf(g.Rule, cmpWho(g), indexes(g.GPUs)) == k {
				f = g
			}
		}
		if f == nil {
			t.Errorf("no %s finding for %s on GPUs %v; got:\n%s", w.rule, w.who, w.gpus, dump(got))
			continue
		}
		if !f.Since.Equal(min2t(w.since)) || !f.Until.Equal(min2t(w.until)) {
			t.Errorf("%s %s: since %s until %s, want %s until %s", w.rule, w.who, f.Since.Format(time.TimeOnly), f.Until.Format(time.TimeOnly),
				min2t(w.since).Format(time.TimeOnly), min2t(w.until).Format(time.TimeOnly))
		}
		if math.Abs(f.WastedGPUHours-w.wasted) > 1e-9 {
			t.Errorf("%s %s: wasted %v GPU-hours, want %v", w.rule, w.who, f.WastedGPUHours, w.wasted)
		}
		if f.Active != w.active {
			t.Errorf("%s %s: active %v, want %v", w.rule, w.who, f.Active, w.active)
		}
		if math.Abs(f.Cost-2*w.wasted) > 1e-9 {
			t.Errorf("%s %s: cost %v, want %v at 2 a GPU-hour", w.rule, w.who, f.Cost, 2*w.wasted)
		}
	}
	for _, f := range got.Findings {
		if !seen[keyOf(f.Rule, cmpWho(&f), indexes(f.GPUs))] {
			t.Errorf("unexpected finding %s %s on GPUs %v (%v GPU-hours, evidence %v)", f.Rule, cmpWho(&f), indexes(f.GPUs), f.WastedGPUHours, f.Evidence)
		}
	}
}

func cmpWho(f *Finding) string {
	if f.Container != "" {
		return f.Container
	}
	return f.Owner
}

func indexes(gs []GPURef) []int {
	var out []int
	for _, g := range gs {
		out = append(out, g.Index)
	}
	return out
}

func dump(r *Report) string {
	var b strings.Builder
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "  %s %s %v since %s until %s wasted %v %v\n", f.Rule, cmpWho(&f), indexes(f.GPUs), f.Since.Format(time.TimeOnly),
			f.Until.Format(time.TimeOnly), f.WastedGPUHours, f.Evidence)
	}
	return b.String()
}

var priced = cost.Model{GPUHour: map[string]float64{"default": 2}}

func TestRules(t *testing.T) {
	busy := func(n int) []float64 { return slices.Repeat([]float64{90}, n) }
	tests := []struct {
		name  string
		rules func(*config.WasteRules)
		ctrs  []ctr
		hosts []hostProc
		want  []want
	}{{
		// 3 h at 0 % SM and 0.02 cores, holding 2 GiB: idle, not
		// stalled (the CPU is not busy) nor low efficiency (explained).
		name: "idle",
		ctrs: []ctr{{name: "nb", gpus: []int{0}, from: 0, to: 180, cpu: 0.02, phases: []phase{{util: []float64{0}, mem: 2}}}},
		want: []want{{rule: config.RuleIdle, who: "nb", gpus: []int{0}, since: 0, until: 180, wasted: 3, active: true}},
	}, {
		// 2 h at 50 %, idle overnight for 10 h, 2 h at 50 % again. The
		// mornings's 4-hour windows are mostly the idle night, already
		// found: no low efficiency.
		name: "idle overnight",
		ctrs: []ctr{{name: "nb", gpus: []int{0}, from: 0, to: 840, cpu: 0.02, phases: []phase{
			{util: []float64{50}, mem: 8}, {at: 120, util: []float64{0}, mem: 8}, {at: 720, util: []float64{50}, mem: 8}}}},
		want: []want{{rule: config.RuleIdle, who: "nb", gpus: []int{0}, since: 120, until: 720, wasted: 10}},
	}, {
		name: "idle shorter than the window",
		ctrs: []ctr{{name: "nb", gpus: []int{0}, from: 0, to: 59, cpu: 0.02}},
	}, {
		// Idle 70 min, busy 10, idle 70: two runs, one finding.
		name: "idle twice",
		ctrs: []ctr{{name: "nb", gpus: []int{0}, from: 0, to: 150, phases: []phase{{util: []float64{0}}, {at: 70, util: []float64{50}}, {at: 80, util: []float64{0}}}}},
		want: []want{{rule: config.RuleIdle, who: "nb", gpus: []int{0}, since: 0, until: 150, wasted: 140.0 / 60, active: true}},
	}, {
		// Window 1h + grace 30m: an idle run of 80 minutes is not enough,
		// one of 100 is, and counts from its start.
		name:  "idle with grace",
		rules: func(r *config.WasteRules) { r.Idle.Grace = 30 * time.Minute },
		ctrs: []ctr{
			{name: "short", gpus: []int{0}, from: 0, to: 80},
			{name: "long", gpus: []int{1}, from: 0, to: 100},
		},
		want: []want{{rule: config.RuleIdle, who: "long", gpus: []int{1}, since: 0, until: 100, wasted: 100.0 / 60, active: true}},
	}, {
		// 2 GPUs at 90 % for 1 h, 45 min with 30 GiB held, 0 % SM and 2
		// cores, then 90 % again: stalled for 2 × 0.75 GPU-hours.
		name: "stalled",
		rules: func(r *config.WasteRules) {
			r.Stalled.Window = 30 * time.Minute
		},
		ctrs: []ctr{{name: "train", gpus: []int{2, 3}, from: 0, to: 165, cpu: 2, phases: []phase{
			{util: busy(2), mem: 30}, {at: 60, util: []float64{0, 0}, mem: 30}, {at: 105, util: busy(2), mem: 30}}}},
		want: []want{{rule: config.RuleStalled, who: "train", gpus: []int{2, 3}, since: 60, until: 105, wasted: 1.5}},
	}, {
		// Holds 4 GPUs for 3 h and computes on the first: from the
		// first window on, 3 unused GPUs × 3 h. Its efficiency (22.5 %)
		// is low, but over-allocation explains it.
		name: "over-allocated",
		ctrs: []ctr{{name: "greedy", gpus: []int{0, 1, 2, 3}, from: 0, to: 180, cpu: 1, phases: []phase{{util: []float64{90}, mem: 40}}}},
		want: []want{{rule: config.RuleOverAllocated, who: "greedy", gpus: []int{1, 2, 3}, since: 0, until: 180, wasted: 9, active: true}},
	}, {
		// Grace delays the report, not what it counts.
		name:  "over-allocated with grace",
		rules: func(r *config.WasteRules) { r.OverAllocated.Grace = 30 * time.Minute },
		ctrs:  []ctr{{name: "greedy", gpus: []int{0, 1}, from: 0, to: 120, cpu: 1, phases: []phase{{util: []float64{90}, mem: 40}}}},
		want:  []want{{rule: config.RuleOverAllocated, who: "greedy", gpus: []int{1}, since: 0, until: 120, wasted: 2, active: true}},
	}, {
		// Max age 2 h, runs 5 h at 80 % on 2 GPUs: 2 × 3 GPU-hours.
		name:  "too old",
		rules: func(r *config.WasteRules) { r.TooOld.MaxAge = 2 * time.Hour },
		ctrs:  []ctr{{name: "forever", gpus: []int{4, 5}, from: 0, to: 300, cpu: 1, phases: []phase{{util: []float64{80, 80}, mem: 10}}}},
		want:  []want{{rule: config.RuleTooOld, who: "forever", gpus: []int{4, 5}, since: 120, until: 300, wasted: 6, active: true}},
	}, {
		// 20 % for 6 h: the first 4-hour window is low (0.8 GPU-hours
		// wasted an hour), and so is every one after it.
		name: "low efficiency",
		ctrs: []ctr{{name: "slow", gpus: []int{6}, from: 0, to: 360, cpu: 1, phases: []phase{{util: []float64{20}, mem: 10}}}},
		want: []want{{rule: config.RuleLowEfficiency, who: "slow", gpus: []int{6}, since: 0, until: 360, wasted: 6 * 0.8, active: true}},
	}, {
		// Two containers time-slice GPU 5 for 6 h, each allocated half
		// of it and holding all of it. "light" uses 25 % of the GPU: 50 %
		// of its allocated half, but 25 % of the GPU time it held, which
		// is low. Wasted: allocated − used, 0.5 − 0.25 GPU-hours an hour.
		name: "low efficiency on a shared GPU",
		ctrs: []ctr{
			{name: "light", gpus: []int{5}, from: 0, to: 360, cpu: 1, share: 0.5, phases: []phase{{util: []float64{25}, mem: 10}}},
			{name: "heavy", gpus: []int{5}, from: 0, to: 360, cpu: 1, share: 0.5, phases: []phase{{util: []float64{70}, mem: 10}}},
		},
		want: []want{{rule: config.RuleLowEfficiency, who: "light", gpus: []int{5}, since: 0, until: 360, wasted: 6 * 0.25, active: true}},
	}, {
		// The ledger has no held seconds for any of it (written before
		// gpumeter kept them): efficiency cannot be told, nothing is
		// reported.
		name: "low efficiency with held seconds unknown",
		ctrs: []ctr{{name: "slow", gpus: []int{6}, from: 0, to: 360, cpu: 1, unheldTo: 360, phases: []phase{{util: []float64{20}, mem: 10}}}},
	}, {
		// Held seconds known from 3 h on: the first window that has
		// some (ending at 4 h) is judged on them, and reported from its
		// start, as in "low efficiency".
		name: "low efficiency with held seconds known for part",
		ctrs: []ctr{{name: "slow", gpus: []int{6}, from: 0, to: 360, cpu: 1, unheldTo: 180, phases: []phase{{util: []float64{20}, mem: 10}}}},
		want: []want{{rule: config.RuleLowEfficiency, who: "slow", gpus: []int{6}, since: 0, until: 360, wasted: 6 * 0.8, active: true}},
	}, {
		// An eighth of a GPU for 6 h is 0.75 GPU-hours: too little to
		// judge.
		name: "low efficiency below the minimum",
		ctrs: []ctr{{name: "tiny", gpus: []int{6}, from: 0, to: 360, cpu: 1, share: 0.125, phases: []phase{{util: []float64{1}}}}},
	}, {
		// A host process for 2 h on a GPU a busy container holds.
		name:  "outside",
		ctrs:  []ctr{{name: "ok", gpus: []int{7}, from: 0, to: 180, cpu: 1, phases: []phase{{util: []float64{60}, mem: 20}}}},
		hosts: []hostProc{{user: "dave", gpu: 7, from: 30, to: 150, util: 40}},
		want:  []want{{rule: config.RuleOutside, who: "dave", gpus: []int{7}, since: 30, until: 150, wasted: 2}},
	}, {
		name:  "outside with a window",
		rules: func(r *config.WasteRules) { r.Outside.Window = 30 * time.Minute },
		hosts: []hostProc{{user: "dave", gpu: 1, from: 0, to: 20}, {user: "erin", gpu: 2, from: 0, to: 40}},
		want:  []want{{rule: config.RuleOutside, who: "erin", gpus: []int{2}, since: 0, until: 40, wasted: 40.0 / 60, active: true}},
	}, {
		name: "rules off",
		rules: func(r *config.WasteRules) {
			r.Idle.Enabled, r.OverAllocated.Enabled, r.Outside.Enabled = false, false, false
		},
		ctrs: []ctr{
			{name: "nb", gpus: []int{0}, from: 0, to: 180},
			{name: "greedy", gpus: []int{1, 2}, from: 0, to: 180, cpu: 1, phases: []phase{{util: []float64{90}, mem: 40}}},
		},
		hosts: []hostProc{{user: "dave", gpu: 7, from: 0, to: 60}},
	}, {
		name: "busy",
		ctrs: []ctr{{name: "good", gpus: []int{0, 1}, from: 0, to: 600, cpu: 4, phases: []phase{{util: busy(2), mem: 70}}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := config.DefaultWasteRules()
			if tt.rules != nil {
				tt.rules(&rules)
			}
			if err := rules.Validate(); err != nil {
				t.Fatal(err)
			}
			ps, cs := points(tt.ctrs, tt.hosts)
			end := 0
			for _, c := range tt.ctrs {
				end = max(end, c.to)
			}
			for _, h := range tt.hosts {
				end = max(end, h.to)
			}
			got := evaluate(ps, cs, byMinute(t0, min2t(end)), Options{From: t0, To: min2t(end), Rules: rules, Cost: priced})
			check(t, got, tt.want)
		})
	}
}

// TestSinceInsideAMinute: a container that starts inside a minute is idle
// from its start, not the minute's.
func TestSinceInsideAMinute(t *testing.T) {
	start := t0.Add(30 * time.Second)
	meta := &ledger.Container{Node: "n1", ID: "c", Name: "nb", StartedAt: start}
	var ps []ledger.UsagePoint
	for m := range 90 {
		alloc := 60.0
		if m == 0 {
			alloc = 30
		}
		ps = append(ps, ledger.UsagePoint{Start: min2t(m), Node: "n1", OwnerKind: ledger.KindContainer, OwnerID: "c", GPU: testGPUs[0],
			Sums: ledger.Sums{AllocatedSeconds: alloc}, Container: meta})
	}
	got := evaluate(ps, nil, byMinute(t0, min2t(90)), Options{From: t0, To: min2t(90), Rules: config.DefaultWasteRules(), Cost: priced})
	if len(got.Findings) != 1 {
		t.Fatalf("got %d findings, want 1:\n%s", len(got.Findings), dump(got))
	}
	f := got.Findings[0]
	if !f.Since.Equal(start) || math.Abs(f.WastedGPUHours-89.5/60) > 1e-9 || f.Evidence[EvDuration] != 89.5*60 {
		t.Errorf("idle since %s, %v GPU-hours, %v s; want since %s, %v, %v", f.Since, f.WastedGPUHours, f.Evidence[EvDuration], start, 89.5/60, 89.5*60)
	}
}

// TestFindingID: the identity depends on rule, node, owner and GPU set
// only, not on the order of the GPUs.
func TestFindingID(t *testing.T) {
	a := findingID(config.RuleIdle, "n1", OwnerContainer, "c1", []GPURef{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}})
	b := findingID(config.RuleIdle, "n1", OwnerContainer, "c1", []GPURef{{Index: 1, UUID: "GPU-b"}, {Index: 0, UUID: "GPU-a"}})
	if a != b {
		t.Errorf("IDs differ by GPU order: %s, %s", a, b)
	}
	for _, other := range []string{
		findingID(config.RuleStalled, "n1", OwnerContainer, "c1", []GPURef{{UUID: "GPU-a"}, {UUID: "GPU-b"}}),
		findingID(config.RuleIdle, "n2", OwnerContainer, "c1", []GPURef{{UUID: "GPU-a"}, {UUID: "GPU-b"}}),
		findingID(config.RuleIdle, "n1", OwnerContainer, "c2", []GPURef{{UUID: "GPU-a"}, {UUID: "GPU-b"}}),
		findingID(config.RuleIdle, "n1", OwnerContainer, "c1", []GPURef{{UUID: "GPU-a"}}),
	} {
		if other == a {
			t.Errorf("two identities share ID %s", a)
		}
	}
	if !strings.HasPrefix(a, "idle-") {
		t.Errorf("ID %q does not start with its rule", a)
	}
}
