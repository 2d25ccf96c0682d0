package sampler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
)

// fakeGPUs is a hand-written GPU source: it returns whatever the test put
// in it.
type fakeGPUs struct {
	sample gpu.Sample
	err    error
	reads  int
}

func (f *fakeGPUs) Read(_ context.Context, now time.Time) (gpu.Sample, error) {
	f.reads++
	s := f.sample
	s.Time = now
	return s, f.err
}

type fakeInventory struct {
	list []container.Container
	err  error
}

func (f *fakeInventory) Containers(context.Context, time.Time) ([]container.Container, error) {
	return f.list, f.err
}

// mapResolver knows the PIDs in its map and fails for those in errs.
type mapResolver struct {
	owners map[uint32]container.Owner
	errs   map[uint32]bool
	pruned []uint32
	calls  int
}

func (m *mapResolver) Resolve(pid uint32) (container.Owner, bool, error) {
	m.calls++
	if m.errs[pid] {
		return container.Owner{}, false, errors.New("boom")
	}
	o, ok := m.owners[pid]
	return o, ok, nil
}

func (m *mapResolver) Prune(keep func(uint32) bool) {
	m.pruned = m.pruned[:0]
	for pid := range m.owners {
		if !keep(pid) {
			m.pruned = append(m.pruned, pid)
		}
	}
}

var t0 = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)

func device(procs ...uint32) gpu.Device {
	d := gpu.Device{Index: 0, UUID: "GPU-0", Model: "H100", MemoryTotal: 80 << 30, Util: 50, PowerWatts: 100}
	for _, p := range procs {
		d.Processes = append(d.Processes, gpu.Process{PID: p, MemoryUsed: 1 << 30, SMUtil: 10, GPUInstanceID: -1, ComputeInstanceID: -1})
	}
	return d
}

func TestStepResolvesThroughTheChain(t *testing.T) {
	alice := container.Owner{Kind: container.OwnerContainer, ID: "aaaa"}
	bob := container.Owner{Kind: container.OwnerHost, ID: "bob"}
	first := &mapResolver{owners: map[uint32]container.Owner{10: alice}, errs: map[uint32]bool{30: true}}
	second := &mapResolver{owners: map[uint32]container.Owner{20: bob, 30: bob, 99: bob}}
	d := device(10, 20, 30, 40)
	d.Processes = append(d.Processes, gpu.Process{PID: 10}) // the same PID twice is resolved once
	src := &fakeGPUs{sample: gpu.Sample{Devices: []gpu.Device{d}}}
	s := New(Config{Node: "n1", GPUs: src, Resolvers: []ProcessResolver{first, second}})

	tick := s.Step(context.Background(), t0)
	want := [][]container.Owner{{alice, bob, bob, {}, alice}}
	if diff := cmp.Diff(want, tick.Owners); diff != "" {
		t.Errorf("owners (-want +got):\n%s", diff)
	}
	if tick.Health.Unresolved != 1 || tick.Health.ResolveErrors != 1 {
		t.Errorf("unresolved %d, resolve errors %d; want 1 and 1", tick.Health.Unresolved, tick.Health.ResolveErrors)
	}
	if first.calls != 4 {
		t.Errorf("first resolver asked %d times, want 4 (once per distinct PID)", first.calls)
	}
	if tick.Node != "n1" || s.Latest() != tick {
		t.Errorf("tick not published")
	}
	// The first tick prunes the resolvers' caches to the PIDs now on a GPU.
	if diff := cmp.Diff([]uint32{99}, second.pruned); diff != "" {
		t.Errorf("pruned (-want +got):\n%s", diff)
	}
}

func TestStepKeepsGoingWhenSourcesFail(t *testing.T) {
	src := &fakeGPUs{sample: gpu.Sample{Devices: []gpu.Device{device()}}}
	ctr := container.Container{ID: "c1", Name: "job", Running: true, GPUs: container.GPURequest{IDs: []string{"0"}}}
	inv := &fakeInventory{list: []container.Container{ctr}}
	s := New(Config{GPUs: src, GPUName: "nvml", Inventories: []Named{{Name: "docker", Inventory: inv}}})
	s.Step(context.Background(), t0)
	good := s.Step(context.Background(), t0.Add(time.Second))
	if got := good.GPUs[0].Total.AllocatedSeconds; got != 1 {
		t.Fatalf("allocated seconds after 1 s = %g, want 1", got)
	}

	// The inventory fails but hands back what it knew: metering goes on.
	inv.err = errors.New("docker daemon unreachable")
	tick := s.Step(context.Background(), t0.Add(2*time.Second))
	if got := tick.GPUs[0].Total.AllocatedSeconds; got != 2 {
		t.Errorf("allocated seconds with the inventory down = %g, want 2", got)
	}
	wantHealth := []SourceHealth{{Name: "nvml", OK: true}, {Name: "docker", Err: "docker daemon unreachable", Errors: 1}}
	if diff := cmp.Diff(wantHealth, tick.Health.Sources, cmp.Comparer(func(a, b time.Duration) bool { return true })); diff != "" {
		t.Errorf("health (-want +got):\n%s", diff)
	}

	// The GPU source fails outright: the previous figures stay published
	// with the new health.
	src.err = errors.New("nvml: driver gone")
	src.sample = gpu.Sample{}
	failed := s.Step(context.Background(), t0.Add(3*time.Second))
	if failed.Tick != tick.Tick {
		t.Errorf("a failed read replaced the figures")
	}
	if h := failed.Health.Sources[0]; h.OK || h.Errors != 1 || h.Err != "nvml: driver gone" {
		t.Errorf("GPU source health = %+v, want a failure", h)
	}
	if failed.Health.Ticks != 4 {
		t.Errorf("ticks = %d, want 4", failed.Health.Ticks)
	}
}

// TestStepListsEachContainerOnce checks that a container listed twice,
// by one inventory or by two, is metered once, as the first list that
// names it describes it, also when a list changes between ticks.
func TestStepListsEachContainerOnce(t *testing.T) {
	ctr := func(id, name string) container.Container {
		return container.Container{ID: id, Name: name, Running: true, GPUs: container.GPURequest{IDs: []string{"0"}}}
	}
	first := &fakeInventory{list: []container.Container{ctr("c1", "a"), ctr("c2", "b")}}
	second := &fakeInventory{list: []container.Container{ctr("c2", "other"), ctr("c3", "c")}}
	src := &fakeGPUs{sample: gpu.Sample{Devices: []gpu.Device{device()}}}
	names := func(tick *Tick) []string {
		var out []string
		for _, c := range tick.Containers {
			out = append(out, c.ID+"="+c.Name)
		}
		return out
	}
	one := New(Config{GPUs: src, Inventories: []Named{{Name: "one", Inventory: first}}})
	two := New(Config{GPUs: src, Inventories: []Named{{Name: "one", Inventory: first}, {Name: "two", Inventory: second}}})
	steps := []struct {
		name         string
		list         []container.Container
		wantOne, two []string
	}{
		{"unique", first.list, []string{"c1=a", "c2=b"}, []string{"c1=a", "c2=b", "c3=c"}},
		{"again", first.list, []string{"c1=a", "c2=b"}, []string{"c1=a", "c2=b", "c3=c"}},
		{"twice in one list", []container.Container{ctr("c1", "a"), ctr("c2", "b"), ctr("c1", "later")}, []string{"c1=a", "c2=b"}, []string{"c1=a", "c2=b", "c3=c"}},
		{"unique again", []container.Container{ctr("c1", "a"), ctr("c2", "b"), ctr("c4", "d")}, []string{"c1=a", "c2=b", "c4=d"}, []string{"c1=a", "c2=b", "c3=c", "c4=d"}},
	}
	for i, st := range steps {
		first.list = st.list
		at := t0.Add(time.Duration(i) * time.Second)
		if diff := cmp.Diff(st.wantOne, names(one.Step(context.Background(), at))); diff != "" {
			t.Errorf("%s, one inventory (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.two, names(two.Step(context.Background(), at))); diff != "" {
			t.Errorf("%s, two inventories (-want +got):\n%s", st.name, diff)
		}
	}
}

func TestStepCountsGPUReadErrors(t *testing.T) {
	bad := device()
	bad.Index, bad.UUID, bad.Err = 1, "GPU-1", errors.New("gpu 1: GPU is lost")
	src := &fakeGPUs{sample: gpu.Sample{Devices: []gpu.Device{device(), bad}}}
	s := New(Config{GPUs: src})
	s.Step(context.Background(), t0)
	tick := s.Step(context.Background(), t0.Add(time.Second))
	if diff := cmp.Diff(map[string]uint64{"GPU-1": 2}, tick.Health.GPUReadErrors); diff != "" {
		t.Errorf("GPU read errors (-want +got):\n%s", diff)
	}
	if tick.GPUs[0].Total.Seconds != 1 {
		t.Errorf("the good GPU was metered %g s, want 1", tick.GPUs[0].Total.Seconds)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	src := &fakeGPUs{sample: gpu.Sample{Devices: []gpu.Device{device()}}}
	var ticks int
	s := New(Config{GPUs: src, Interval: 10 * time.Millisecond, OnTick: func(*Tick) { ticks++ }})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if ticks < 3 || s.Latest() == nil {
		t.Errorf("%d ticks in 200ms at 10ms, want several", ticks)
	}
}

// TestStartIsQuiet: an inventory still connecting at start is logged at
// debug, with no "recovered" once it answers; its first real failure is
// a warning.
func TestStartIsQuiet(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	src := &fakeGPUs{sample: gpu.Sample{Devices: []gpu.Device{device()}}}
	inv := &fakeInventory{err: fmt.Errorf("docker daemon unreachable since now: %w", container.ErrNotConnected)}
	s := New(Config{GPUs: src, Inventories: []Named{{Name: "docker", Inventory: inv}}, Logger: log})
	s.Step(context.Background(), t0)
	inv.err = nil
	s.Step(context.Background(), t0.Add(time.Second))
	if logs.Len() != 0 {
		t.Errorf("a start while the inventory connects logs:\n%s", &logs)
	}
	inv.err = errors.New("docker daemon unreachable")
	s.Step(context.Background(), t0.Add(2*time.Second))
	if !strings.Contains(logs.String(), "level=WARN msg=\"source failed\" source=docker") {
		t.Errorf("the first real failure is not a warning:\n%s", &logs)
	}
}
