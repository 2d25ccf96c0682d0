package queue

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// dgxGPUs returns eight GPUs in two NVLink islands, GPUs 0–3 and 4–7, each
// GPU linked to the three others of its island, and pairs of them (0–1,
// 2–3, …) under one PCIe switch. Each GPU names only its higher peers, so
// the links also test that one end's word is enough.
func dgxGPUs() []GPU {
	gs := hostGPUs(8)
	for i := range gs {
		for j := i + 1; j < i/4*4+4; j++ {
			gs[i].NVLink = append(gs[i].NVLink, fmt.Sprintf("GPU-%d", j))
		}
		gs[i].PCIeSwitch = fmt.Sprintf("sw%d", i/2)
	}
	return gs
}

// switchGPUs returns n GPUs without NVLink, pairs of them under one PCIe
// switch.
func switchGPUs(n int) []GPU {
	gs := hostGPUs(n)
	for i := range gs {
		gs[i].PCIeSwitch = fmt.Sprintf("sw%d", i/2)
	}
	return gs
}

// busy returns a running job holding the GPUs at idx.
func busy(idx ...int) []RunningJob {
	var uuids []string
	for _, i := range idx {
		uuids = append(uuids, fmt.Sprintf("GPU-%d", i))
	}
	return []RunningJob{running("j-9", "z", t0, time.Hour, uuids...)}
}

func TestTopologyPlacement(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       Placement
		gpus    []GPU
		running []RunningJob
		n       int
		want    string
	}{
		{"two GPUs on one island, not the two lowest free", Binpack, dgxGPUs(), busy(0, 1, 2), 2,
			"j-000001=GPU-4,GPU-5"},
		{"no topology: the two lowest free as before", Binpack, hostGPUs(8), busy(0, 1, 2), 2,
			"j-000001=GPU-3,GPU-4"},
		{"four GPUs get the free island", Binpack, dgxGPUs(), busy(1), 4,
			"j-000001=GPU-4,GPU-5,GPU-6,GPU-7"},
		{"four GPUs get the free island, spread", Spread, dgxGPUs(), busy(1), 4,
			"j-000001=GPU-4,GPU-5,GPU-6,GPU-7"},
		{"no topology: four GPUs as before", Binpack, hostGPUs(8), busy(1), 4,
			"j-000001=GPU-0,GPU-2,GPU-3,GPU-4"},
		{"binpack fills the island in use", Binpack, dgxGPUs(), busy(0, 1), 2,
			"j-000001=GPU-2,GPU-3"},
		{"spread takes the free island", Spread, dgxGPUs(), busy(0, 1), 2,
			"j-000001=GPU-4,GPU-5"},
		{"the whole box when nothing is busy", Binpack, dgxGPUs(), nil, 8,
			"j-000001=GPU-0,GPU-1,GPU-2,GPU-3,GPU-4,GPU-5,GPU-6,GPU-7"},
		{"no free island: the plain choice", Binpack, dgxGPUs(), busy(1, 5), 4,
			"j-000001=GPU-0,GPU-2,GPU-3,GPU-4"},
		{"three of an island", Binpack, dgxGPUs(), busy(4), 3,
			"j-000001=GPU-5,GPU-6,GPU-7"},
		{"one PCIe switch without NVLink", Binpack, switchGPUs(4), busy(0), 2,
			"j-000001=GPU-2,GPU-3"},
		{"no topology: across switches as before", Binpack, hostGPUs(4), busy(0), 2,
			"j-000001=GPU-1,GPU-2"},
		{"a one-GPU job fills the island in use", Binpack, dgxGPUs(), busy(3), 1,
			"j-000001=GPU-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{GPUs: tc.gpus, Running: tc.running, Queued: []QueuedJob{queued(1, "a", tc.n)},
				Config: Config{Placement: tc.p, MaxGPUsPerUser: 8}, Now: t0}
			p := Schedule(in)
			check(t, p, []string{tc.want}, nil)
		})
	}
}

// TestTopologyQueue: on a free DGX-like box, two-GPU jobs fill one
// island pair by pair before the other, so a four-GPU job behind them
// still gets a whole island.
func TestTopologyQueue(t *testing.T) {
	in := Input{GPUs: dgxGPUs(), Now: t0, Config: Config{MaxGPUsPerUser: 8},
		Queued: []QueuedJob{queued(1, "a", 2), queued(2, "b", 1), queued(3, "c", 1), queued(4, "d", 4)}}
	check(t, Schedule(in), []string{
		"j-000001=GPU-0,GPU-1",
		"j-000002=GPU-2",
		"j-000003=GPU-3",
		"j-000004=GPU-4,GPU-5,GPU-6,GPU-7",
	}, nil)
}

func TestLinkGPUs(t *testing.T) {
	gs := make([]gpuState, 4)
	for i := range gs {
		gs[i].gpu = GPU{UUID: fmt.Sprintf("GPU-%d", i), Index: i}
	}
	gs[0].gpu.NVLink = []string{"GPU-2", "GPU-1", "GPU-9", "GPU-0"} // GPU-9 is not here; itself does not count
	gs[2].gpu.NVLink = []string{"GPU-0"}
	linkGPUs(gs)
	want := [][]int{{1, 2}, {0}, {0}, nil}
	for i := range gs {
		if !slices.Equal(gs[i].nvlink, want[i]) {
			t.Errorf("GPU %d links to %v, want %v", i, gs[i].nvlink, want[i])
		}
	}
	if gs[3].hasTopology() || !gs[1].hasTopology() {
		t.Errorf("topology: GPU 3 %v, GPU 1 %v; want false, true", gs[3].hasTopology(), gs[1].hasTopology())
	}
}

// TestTopologyDeterministic: the GPUs' order in the input does not change
// the plan.
func TestTopologyDeterministic(t *testing.T) {
	in := benchInput(200, 10, 8)
	in.GPUs = dgxGPUs()
	in.Running = busy(2)
	want := Schedule(in)
	r := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		r.Shuffle(len(in.GPUs), func(i, j int) { in.GPUs[i], in.GPUs[j] = in.GPUs[j], in.GPUs[i] })
		if got := Schedule(in); !reflect.DeepEqual(got, want) {
			t.Fatalf("GPUs in another order gave another plan:\n got %v\nwant %v", starts(got), starts(want))
		}
	}
}

// BenchmarkSchedule10kNVLink is BenchmarkSchedule10k on a DGX-like box of
// two NVLink islands; the target is the same 10 ms.
func BenchmarkSchedule10kNVLink(b *testing.B) {
	in := benchInput(10000, 100, 8)
	in.GPUs = dgxGPUs()
	in.Running = []RunningJob{
		running("j-r1", "u1", t0, 4*time.Hour, "GPU-0", "GPU-1"),
		running("j-r2", "u2", t0, 8*time.Hour, "GPU-4", "GPU-5"),
	}
	b.ReportAllocs()
	for b.Loop() {
		Schedule(in)
	}
}

func TestGPUEqual(t *testing.T) {
	a := dgxGPUs()[0]
	if b := dgxGPUs()[0]; !a.Equal(b) {
		t.Errorf("%+v not equal to itself", a)
	}
	for name, change := range map[string]func(*GPU){
		"uuid":   func(g *GPU) { g.UUID = "GPU-x" },
		"index":  func(g *GPU) { g.Index = 9 },
		"memory": func(g *GPU) { g.MemoryTotal = 1 },
		"nvlink": func(g *GPU) { g.NVLink = g.NVLink[1:] },
		"switch": func(g *GPU) { g.PCIeSwitch = "" },
	} {
		b := dgxGPUs()[0]
		change(&b)
		if a.Equal(b) {
			t.Errorf("a GPU with another %s is equal", name)
		}
	}
}
