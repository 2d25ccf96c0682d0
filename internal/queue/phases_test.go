package queue

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestFilterGPUs(t *testing.T) {
	gpus := hostGPUs(5)
	slices.Reverse(gpus)
	in := Input{
		GPUs:    gpus,
		Running: []RunningJob{running("j-1", "alice", t0, time.Hour, "GPU-0", "GPU-7")},
		Outside: Outside{
			Containers: []OutsideContainer{{Name: "nb", User: "bob", GPUs: []string{"GPU-1"}}, {Name: "nb2", GPUs: []string{"GPU-1"}}},
			MemoryUsed: map[string]uint64{"GPU-2": 4*gib + 1, "GPU-3": 4 * gib},
		},
	}
	gs := filterGPUs(in)
	var free []int
	for i, g := range gs {
		if g.gpu.Index != i {
			t.Fatalf("position %d has GPU %d, want the GPUs by index", i, g.gpu.Index)
		}
		if g.free() {
			free = append(free, i)
		}
	}
	if !slices.Equal(free, []int{3, 4}) {
		t.Errorf("free GPUs = %v, want [3 4]", free)
	}
	if gs[0].job == nil || gs[0].job.ID != "j-1" || gs[0].outsideOnly() {
		t.Errorf("GPU 0: job %v, outside only %v; want held by j-1", gs[0].job, gs[0].outsideOnly())
	}
	if gs[1].container == nil || gs[1].container.Name != "nb" || !gs[1].outsideOnly() {
		t.Errorf("GPU 1: container %v; want nb, the first that holds it", gs[1].container)
	}
	if !gs[2].overMemory || !gs[2].outsideOnly() || gs[3].overMemory {
		t.Errorf("over memory: GPU 2 %v, GPU 3 %v; want true, false", gs[2].overMemory, gs[3].overMemory)
	}
}

// statesOf builds gpuStates from a picture: '.' free, 'x' busy.
func statesOf(pic string) []gpuState {
	gs := make([]gpuState, len(pic))
	for i, c := range pic {
		gs[i].gpu = GPU{UUID: "GPU-" + string(rune('0'+i)), Index: i}
		gs[i].bound = c == 'x'
	}
	return gs
}

func TestScoreGPU(t *testing.T) {
	for _, tc := range []struct {
		pic         string
		i           int
		bin, spread int
	}{
		{"....", 0, 0, 0},
		{"x...", 1, 1, -1},
		{"x.x.", 1, 2, -2},
		{"...x", 3, 0, 0}, // the GPU itself does not count
		{".x", 0, 1, -1},
	} {
		if got := scoreGPU(Binpack, statesOf(tc.pic), tc.i); got != tc.bin {
			t.Errorf("binpack score of %d in %s = %d, want %d", tc.i, tc.pic, got, tc.bin)
		}
		if got := scoreGPU(Spread, statesOf(tc.pic), tc.i); got != tc.spread {
			t.Errorf("spread score of %d in %s = %d, want %d", tc.i, tc.pic, got, tc.spread)
		}
	}
}

func TestPickGPUs(t *testing.T) {
	for _, tc := range []struct {
		pic  string
		p    Placement
		n    int
		want []int
	}{
		{"........", Binpack, 3, []int{0, 1, 2}},
		{"........", Spread, 3, []int{0, 2, 4}},
		{"x.......", Spread, 1, []int{2}},
		{"...x....", Binpack, 2, []int{1, 2}},
		{"x.x.x...", Binpack, 2, []int{1, 3}},
		{"xx.x", Binpack, 2, nil},
		{"xxxx", Spread, 1, nil},
	} {
		gs := statesOf(tc.pic)
		got := pickGPUs(placer{policy: tc.p}, gs, tc.n)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s pick %d of %s = %v, want %v", tc.p, tc.n, tc.pic, got, tc.want)
		}
		if !reflect.DeepEqual(gs, statesOf(tc.pic)) {
			t.Errorf("%s pick %d of %s changed the GPUs", tc.p, tc.n, tc.pic)
		}
	}
}

func TestBind(t *testing.T) {
	gs := statesOf("....")
	s := bind(gs, []int{1, 3}, "j-7")
	if s.JobID != "j-7" || !slices.Equal(s.GPUs, []string{"GPU-1", "GPU-3"}) {
		t.Errorf("bind = %+v", s)
	}
	if gs[0].bound || !gs[1].bound || gs[2].bound || !gs[3].bound || gs[1].free() {
		t.Errorf("bind did not mark exactly GPUs 1 and 3: %+v", gs)
	}
}

func TestWaitTextPastLimit(t *testing.T) {
	gs := statesOf(".x")
	gs[1].bound = false
	r := []RunningJob{running("j-2", "bob", t0, time.Hour, "GPU-1"), running("j-1", "ann", t0, time.Hour, "GPU-1")}
	gs[1].job = &r[0]
	reason, text := waitText(2, gs, r, t0.Add(2*time.Hour), 0.05)
	if want := "waiting for 2 free GPUs; 1 is free; j-1 (ann) is past its time limit and being stopped"; reason != ReasonResources || text != want {
		t.Errorf("waitText = %s %q, want resources %q", reason, text, want)
	}
}

func TestTexts(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Millisecond:                          "1 s",
		10 * time.Second:                          "10 s",
		59*time.Second + time.Nanosecond:          "1 min", // 60 s, a minute
		time.Minute:                               "1 min",
		time.Minute + time.Second:                 "1 min 1 s",
		4*time.Minute + 5*time.Second:             "4 min 5 s", // not 5 min
		10*time.Minute + 29*time.Second:           "10 min",
		10*time.Minute + 30*time.Second:           "11 min",
		38 * time.Minute:                          "38 min",
		60 * time.Minute:                          "1 h",
		2*time.Hour + 4*time.Minute + time.Second: "2 h 4 min",
	} {
		if got := durationText(d); got != want {
			t.Errorf("durationText(%v) = %q, want %q", d, got, want)
		}
	}
	for b, want := range map[uint64]string{1: "1 MiB", 300 << 20: "300 MiB", 3*gib + gib/2: "3.5 GiB"} {
		if got := bytesText(b); got != want {
			t.Errorf("bytesText(%d) = %q, want %q", b, got, want)
		}
	}
	for f, want := range map[float64]string{0.05: "5%", 0.07: "7%", 0.005: "0.5%", 0.1234: "12.34%"} {
		if got := percentText(f); got != want {
			t.Errorf("percentText(%v) = %q, want %q", f, got, want)
		}
	}
}
