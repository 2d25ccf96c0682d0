package sim

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

var (
	_ sampler.GPUSource       = (*Source)(nil)
	_ sampler.Inventory       = (*Source)(nil)
	_ sampler.ProcessResolver = (*Source)(nil)
)

// small is a scenario whose state and energy are worked out by hand below.
//
// GPU 0 (idle 100W, max 300W, so W = 100 + 2·util):
//
//	[0s,2s)  nothing                    util 0    100W   E(2s)  =  200 J
//	[2s,4s)  a 50 % 4GiB                util 50   200W   E(4s)  =  600 J
//	[4s,8s)  a 50 % 4GiB + b 70 % 8GiB  util 100  300W   E(8s)  = 1800 J   (memory 12GiB capped at 10GiB)
//	[8s,10s) b 70 % 8GiB                util 70   240W   E(10s) = 2280 J
//
// GPU 1:
//
//	[0s,1s)  nothing                    util 0    100W   E(1s)  =  100 J
//	[1s,2s)  bob 30 % 1GiB              util 30   160W   E(2s)  =  260 J
//	[2s,3s)  a 50 % 4GiB + bob          util 80   260W   E(3s)  =  520 J
//	[3s,5s)  a 50 % 4GiB                util 50   200W   E(5s)  =  920 J
//	[5s,8s)  a 80 % 6GiB (a's phase 1)  util 80   260W   E(8s)  = 1700 J
//	[8s,10s) nothing                    util 0    100W   E(10s) = 1900 J
const small = `version: 1
node: t
start: 2026-03-01T00:00:00Z
duration: 10s
gpus:
  - count: 2
    model: Test GPU
    memory: 10GiB
    idle_power: 100W
    max_power: 300W
containers:
  - name: a
    image: example/a:1
    labels: {gpumeter.user: alice, gpumeter.team: nlp, gpumeter.project: p1, who: al}
    gpus: [0, 1]
    start: 2s
    end: 8s
    cpu: 2
    ram: 1GiB
    phases:
      - at: 0s
        util: 50
        memory: 4GiB
      - at: 3s
        gpus: [1]
        util: 80
        memory: 6GiB
  - name: b
    image: example/b:2
    labels: {gpumeter.user: bea}
    gpus: [0]
    start: 4s
    phases:
      - at: 0s
        util: 70
        memory: 8GiB
host_processes:
  - user: bob
    gpu: 1
    start: 1s
    end: 3s
    util: 30
    memory: 1GiB
`

const (
	pidA   = syntheticPID
	pidB   = syntheticPID + 1
	pidBob = syntheticPID + 2
)

func parseSmall(t testing.TB) *Scenario {
	t.Helper()
	s, err := Parse("small.yaml", []byte(small))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func proc(pid uint32, util float64, mem uint64) gpu.Process {
	return gpu.Process{PID: pid, Type: gpu.Compute, MemoryUsed: mem, SMUtil: util, GPUInstanceID: -1, ComputeInstanceID: -1}
}

// state is the part of a Device that the scenario decides.
type state struct {
	Util      float64
	Used      uint64
	Power     float64
	EnergyMJ  uint64
	Processes []gpu.Process
}

func states(sample gpu.Sample) []state {
	var out []state
	for _, d := range sample.Devices {
		out = append(out, state{d.Util, d.MemoryUsed, d.PowerWatts, d.EnergyMilliJoules, d.Processes})
	}
	return out
}

func TestReadSmall(t *testing.T) {
	s := parseSmall(t)
	src := NewSource(s, false)
	tests := []struct {
		at   time.Duration
		want []state
	}{
		{-time.Second, []state{
			{Power: 100}, {Power: 100},
		}},
		{0, []state{
			{Power: 100}, {Power: 100},
		}},
		{1500 * time.Millisecond, []state{
			{Power: 100, EnergyMJ: 150_000},
			{Util: 30, Used: 1 * gib, Power: 160, EnergyMJ: 180_000, Processes: []gpu.Process{proc(pidBob, 30, 1*gib)}},
		}},
		{2 * time.Second, []state{
			{Util: 50, Used: 4 * gib, Power: 200, EnergyMJ: 200_000, Processes: []gpu.Process{proc(pidA, 50, 4*gib)}},
			{Util: 80, Used: 5 * gib, Power: 260, EnergyMJ: 260_000, Processes: []gpu.Process{proc(pidA, 50, 4*gib), proc(pidBob, 30, 1*gib)}},
		}},
		{2500 * time.Millisecond, []state{
			{Util: 50, Used: 4 * gib, Power: 200, EnergyMJ: 300_000, Processes: []gpu.Process{proc(pidA, 50, 4*gib)}},
			{Util: 80, Used: 5 * gib, Power: 260, EnergyMJ: 390_000, Processes: []gpu.Process{proc(pidA, 50, 4*gib), proc(pidBob, 30, 1*gib)}},
		}},
		{6 * time.Second, []state{
			{Util: 100, Used: 10 * gib, Power: 300, EnergyMJ: 1_200_000, Processes: []gpu.Process{proc(pidA, 50, 4*gib), proc(pidB, 70, 8*gib)}},
			{Util: 80, Used: 6 * gib, Power: 260, EnergyMJ: 1_180_000, Processes: []gpu.Process{proc(pidA, 80, 6*gib)}},
		}},
		{7250 * time.Millisecond, []state{
			{Util: 100, Used: 10 * gib, Power: 300, EnergyMJ: 1_575_000, Processes: []gpu.Process{proc(pidA, 50, 4*gib), proc(pidB, 70, 8*gib)}},
			{Util: 80, Used: 6 * gib, Power: 260, EnergyMJ: 1_505_000, Processes: []gpu.Process{proc(pidA, 80, 6*gib)}},
		}},
		{9 * time.Second, []state{
			{Util: 70, Used: 8 * gib, Power: 240, EnergyMJ: 2_040_000, Processes: []gpu.Process{proc(pidB, 70, 8*gib)}},
			{Power: 100, EnergyMJ: 1_800_000},
		}},
		{10 * time.Second, []state{
			{Power: 100, EnergyMJ: 2_280_000},
			{Power: 100, EnergyMJ: 1_900_000},
		}},
		{12 * time.Second, []state{ // past the end the GPUs idle on
			{Power: 100, EnergyMJ: 2_480_000},
			{Power: 100, EnergyMJ: 2_100_000},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.at.String(), func(t *testing.T) {
			now := s.Start.Add(tt.at)
			sample, err := src.Read(context.Background(), now)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if diff := cmp.Diff(states(sample), tt.want); diff != "" {
				t.Errorf("Read(+%v) mismatch (-got +want):\n%s", tt.at, diff)
			}
			if !sample.Time.Equal(now) || sample.DriverVersion != "sim" {
				t.Errorf("Read(+%v) Time, DriverVersion = %v, %q; want %v, \"sim\"", tt.at, sample.Time, sample.DriverVersion, now)
			}
		})
	}
}

func TestReadDevice(t *testing.T) {
	s := parseSmall(t)
	sample, err := NewSource(s, false).Read(context.Background(), s.Start.Add(6*time.Second))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	d := sample.Devices[1]
	d.Processes = nil
	want := gpu.Device{
		Index:             1,
		UUID:              GPUUUID("t", 1),
		Model:             "Test GPU",
		MemoryTotal:       10 * gib,
		MemoryUsed:        6 * gib,
		MemoryFree:        4 * gib,
		Util:              80,
		MemCopyUtil:       32,
		PowerWatts:        260,
		EnergyMilliJoules: 1_180_000,
		TempC:             70,
		MemTempC:          66,
		SMClockMHz:        smClockMHz,
		MemClockMHz:       memClockMHz,
	}
	if diff := cmp.Diff(d, want); diff != "" {
		t.Errorf("Devices[1] mismatch (-got +want):\n%s", diff)
	}
	for _, f := range []gpu.Field{gpu.FieldUtil, gpu.FieldEnergy, gpu.FieldProcessUtil, gpu.FieldMemTemp} {
		if !d.Has(f) {
			t.Errorf("Devices[1].Has(%s) = false, want true", f)
		}
	}
}

// The caller owns what Read returns: changing one sample changes no other.
func TestReadReturnsFreshSlices(t *testing.T) {
	s := parseSmall(t)
	src := NewSource(s, false)
	now := s.Start.Add(6 * time.Second)
	first, _ := src.Read(context.Background(), now)
	first.Devices[0].Processes[0].SMUtil = 1
	first.Devices[0].Processes = append(first.Devices[0].Processes, proc(1, 1, 1))
	second, _ := src.Read(context.Background(), now)
	if got := second.Devices[0].Processes[0].SMUtil; got != 50 {
		t.Errorf("SMUtil after the caller changed an earlier sample = %v, want 50", got)
	}
	if got := second.Devices[1].Processes[0].PID; got != pidA {
		t.Errorf("GPU 1 PID after the caller appended to GPU 0 = %d, want %d", got, pidA)
	}
}

func TestReadLoop(t *testing.T) {
	s := parseSmall(t)
	src := NewSource(s, true)
	origin := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	read := func(at time.Duration) []state {
		t.Helper()
		sample, err := src.Read(context.Background(), origin.Add(at))
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		return states(sample)
	}
	// The first read fixes the origin, wherever the scenario says it starts.
	if got := read(0); got[0].EnergyMJ != 0 || got[1].EnergyMJ != 0 {
		t.Fatalf("energy at the origin = %d, %d; want 0, 0", got[0].EnergyMJ, got[1].EnergyMJ)
	}
	// Exact after whole loops, and between boundaries of a later loop.
	for _, tt := range []struct {
		at     time.Duration
		want   [2]uint64
		procs0 int
	}{
		{30 * time.Second, [2]uint64{3 * 2_280_000, 3 * 1_900_000}, 0},
		{32500 * time.Millisecond, [2]uint64{3*2_280_000 + 300_000, 3*1_900_000 + 390_000}, 1},
		{1000*10*time.Second + 6*time.Second, [2]uint64{1000*2_280_000 + 1_200_000, 1000*1_900_000 + 1_180_000}, 2},
	} {
		got := read(tt.at)
		if got[0].EnergyMJ != tt.want[0] || got[1].EnergyMJ != tt.want[1] || len(got[0].Processes) != tt.procs0 {
			t.Errorf("at origin+%v: energy %d, %d and %d processes on GPU 0; want %d, %d and %d",
				tt.at, got[0].EnergyMJ, got[1].EnergyMJ, len(got[0].Processes), tt.want[0], tt.want[1], tt.procs0)
		}
	}
	// Monotonic at steps that fall on no boundary, across several loops.
	var last [2]uint64
	for at := time.Duration(0); at < 55*time.Second; at += 730 * time.Millisecond {
		got := read(at)
		for i := range got {
			if got[i].EnergyMJ < last[i] {
				t.Fatalf("GPU %d energy went from %d to %d at origin+%v", i, last[i], got[i].EnergyMJ, at)
			}
			last[i] = got[i].EnergyMJ
		}
	}
	// A wall clock stepped back reads as the origin, not as negative energy.
	if got := read(-time.Hour); got[0].EnergyMJ != 0 {
		t.Errorf("energy before the origin = %d, want 0", got[0].EnergyMJ)
	}
}

func TestContainers(t *testing.T) {
	s := parseSmall(t)
	a := container.Container{
		ID:          ContainerID("t", "a"),
		Name:        "a",
		Image:       "example/a:1",
		Labels:      map[string]string{"gpumeter.user": "alice", "gpumeter.team": "nlp", "gpumeter.project": "p1", "who": "al"},
		User:        "alice",
		Team:        "nlp",
		Project:     "p1",
		Running:     true,
		PID:         pidA,
		StartedAt:   s.Start.Add(2 * time.Second),
		GPUs:        container.GPURequest{IDs: []string{"0", "1"}},
		CPUSeconds:  2 * 3.5,
		MemoryBytes: gib,
	}
	b := container.Container{
		ID:        ContainerID("t", "b"),
		Name:      "b",
		Image:     "example/b:2",
		Labels:    map[string]string{"gpumeter.user": "bea"},
		User:      "bea",
		Running:   true,
		PID:       pidB,
		StartedAt: s.Start.Add(4 * time.Second),
		GPUs:      container.GPURequest{IDs: []string{"0"}},
	}
	aStopped := a
	aStopped.Running, aStopped.PID, aStopped.MemoryBytes = false, 0, 0
	aStopped.FinishedAt, aStopped.CPUSeconds = s.Start.Add(8*time.Second), 2*6
	bStopped := b
	bStopped.Running, bStopped.PID = false, 0
	bStopped.FinishedAt = s.Start.Add(10 * time.Second)
	tests := []struct {
		at   time.Duration
		want []container.Container
	}{
		{-time.Second, nil},
		{time.Second, nil},
		{5500 * time.Millisecond, []container.Container{a, b}},
		// a ended at 8s: listed as stopped, as Docker does, with its
		// final CPU counter 2 · 6 s; b ends with the scenario at 10s.
		{8 * time.Second, []container.Container{aStopped, b}},
		{10 * time.Second, []container.Container{aStopped, bStopped}},
		{8*time.Second + KeepStopped - time.Millisecond, []container.Container{aStopped, bStopped}},
		{10*time.Second + KeepStopped, nil},
	}
	src := NewSource(s, false)
	for _, tt := range tests {
		got, err := src.Containers(context.Background(), s.Start.Add(tt.at))
		if err != nil {
			t.Fatalf("Containers: %v", err)
		}
		if diff := cmp.Diff(got, tt.want, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Containers(+%v) mismatch (-got +want):\n%s", tt.at, diff)
		}
	}

	// In a loop, a container starts anew each time round.
	loop := NewSource(s, true)
	origin := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := loop.Containers(context.Background(), origin); err != nil {
		t.Fatal(err)
	}
	got, err := loop.Containers(context.Background(), origin.Add(25500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	wantA := a
	wantA.StartedAt = origin.Add(22 * time.Second)
	wantB := b
	wantB.StartedAt = origin.Add(24 * time.Second)
	if diff := cmp.Diff(got, []container.Container{wantA, wantB}); diff != "" {
		t.Errorf("looped Containers mismatch (-got +want):\n%s", diff)
	}
}

func TestOwnerLabels(t *testing.T) {
	s := parseSmall(t)
	src := NewSource(s, false, WithOwnerLabels("who", "", "gpumeter.team"))
	got, err := src.Containers(context.Background(), s.Start.Add(3*time.Second))
	if err != nil || len(got) != 1 {
		t.Fatalf("Containers = %v, %v; want container a", got, err)
	}
	if got[0].User != "al" || got[0].Team != "" || got[0].Project != "nlp" {
		t.Errorf("User, Team, Project = %q, %q, %q; want \"al\", \"\", \"nlp\"", got[0].User, got[0].Team, got[0].Project)
	}
}

func TestResolve(t *testing.T) {
	src := NewSource(parseSmall(t), false)
	tests := []struct {
		pid    uint32
		want   container.Owner
		wantOK bool
	}{
		{pidA, container.Owner{Kind: container.OwnerContainer, ID: ContainerID("t", "a")}, true},
		{pidB, container.Owner{Kind: container.OwnerContainer, ID: ContainerID("t", "b")}, true},
		{pidBob, container.Owner{Kind: container.OwnerHost, ID: "bob"}, true},
		{pidBob + 1, container.Owner{}, false},
		{syntheticPID - 1, container.Owner{}, false},
		{1, container.Owner{}, false},
		{^uint32(0), container.Owner{}, false},
	}
	for _, tt := range tests {
		got, ok, err := src.Resolve(tt.pid)
		if err != nil || ok != tt.wantOK || got != tt.want {
			t.Errorf("Resolve(%d) = %v, %v, %v; want %v, %v, nil", tt.pid, got, ok, err, tt.want, tt.wantOK)
		}
	}
}

// A container with pid: is played by a real process: its GPU process shows
// that PID, the real inventory describes it and the sim resolver does not
// claim it.
func TestRealPID(t *testing.T) {
	const in = head + `containers:
  - name: real
    gpus: [0, 1]
    pid: 4242
    phases:
      - at: 0s
        util: 40
        memory: 1GiB
  - name: fake
    gpus: [1]
    phases:
      - at: 0s
        util: 10
        memory: 2GiB
`
	s, err := Parse("t.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	src := NewSource(s, false)
	now := s.Start.Add(time.Minute)
	sample, err := src.Read(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]gpu.Process{
		{proc(4242, 40, gib)},
		{proc(4242, 40, gib), proc(syntheticPID+1, 10, 2*gib)},
	}
	for i, d := range sample.Devices {
		if diff := cmp.Diff(d.Processes, want[i]); diff != "" {
			t.Errorf("GPU %d processes mismatch (-got +want):\n%s", i, diff)
		}
	}
	cs, err := src.Containers(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Name != "fake" {
		t.Errorf("Containers = %+v, want only fake", cs)
	}
	for _, pid := range []uint32{4242, syntheticPID} {
		if o, ok, err := src.Resolve(pid); ok || err != nil {
			t.Errorf("Resolve(%d) = %v, %v, %v; want not ok", pid, o, ok, err)
		}
	}
	if o, ok, _ := src.Resolve(syntheticPID + 1); !ok || o.ID != ContainerID("sim", "fake") {
		t.Errorf("Resolve(%d) = %v, %v; want fake", syntheticPID+1, o, ok)
	}
}

func TestReadCanceled(t *testing.T) {
	src := NewSource(parseSmall(t), false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := src.Read(ctx, time.Now()); err == nil {
		t.Error("Read with a canceled context = nil error, want one")
	}
	if _, err := src.Containers(ctx, time.Now()); err == nil {
		t.Error("Containers with a canceled context = nil error, want one")
	}
}

// The source does not see changes made to the scenario after NewSource.
func TestSourceKeepsNoReference(t *testing.T) {
	s := parseSmall(t)
	src := NewSource(s, false)
	s.Containers[0].Labels["gpumeter.user"] = "mallory"
	s.Containers[0].GPUs[0] = 1
	s.Containers[0].Phases[0].Util = 1
	got, _ := src.Containers(context.Background(), s.Start.Add(3*time.Second))
	sample, _ := src.Read(context.Background(), s.Start.Add(3*time.Second))
	if got[0].User != "alice" || got[0].GPUs.IDs[0] != "0" || sample.Devices[0].Util != 50 {
		t.Errorf("after changing the scenario: user %q, gpus %v, util %v; want alice, [0 1], 50", got[0].User, got[0].GPUs.IDs, sample.Devices[0].Util)
	}
}

func TestDemo(t *testing.T) {
	s := Demo()
	if s.Node != "demo" || s.Duration != time.Hour || len(s.GPUs) != 4 {
		t.Fatalf("Demo node, duration, GPUs = %q, %v, %d; want demo, 1h, 4", s.Node, s.Duration, len(s.GPUs))
	}
	src := NewSource(s, false)
	type view struct {
		sample gpu.Sample
		byPID  map[uint32]container.Container
		owners map[uint32]container.Owner
	}
	look := func(at time.Duration) view {
		t.Helper()
		now := s.Start.Add(at)
		sample, err := src.Read(context.Background(), now)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := src.Containers(context.Background(), now)
		if err != nil {
			t.Fatal(err)
		}
		v := view{sample: sample, byPID: map[uint32]container.Container{}, owners: map[uint32]container.Owner{}}
		for _, c := range cs {
			if c.Running {
				v.byPID[uint32(c.PID)] = c
			}
		}
		for _, d := range sample.Devices {
			for _, p := range d.Processes {
				o, ok, err := src.Resolve(p.PID)
				if !ok || err != nil {
					t.Fatalf("at %v: Resolve(%d) = %v, %v, %v", at, p.PID, o, ok, err)
				}
				v.owners[p.PID] = o
			}
		}
		return v
	}
	name := func(v view, p gpu.Process) string { return v.byPID[p.PID].Name }

	t.Run("time-slicing", func(t *testing.T) {
		v := look(20 * time.Minute)
		ps := v.sample.Devices[0].Processes
		if len(ps) != 2 {
			t.Fatalf("GPU 0 at 20m has %d processes, want 2", len(ps))
		}
		a, b := v.byPID[ps[0].PID], v.byPID[ps[1].PID]
		if a.User == b.User || a.Team == b.Team || a.User == "" || b.Team == "" {
			t.Errorf("GPU 0 shared by %s (%s/%s) and %s (%s/%s); want different users and teams", a.Name, a.User, a.Team, b.Name, b.User, b.Team)
		}
		if ps[0].SMUtil+ps[1].SMUtil <= 100 || v.sample.Devices[0].Util != 100 {
			t.Errorf("GPU 0 at 20m: processes %v%% + %v%%, device %v%%; want a sum above 100 capped at 100", ps[0].SMUtil, ps[1].SMUtil, v.sample.Devices[0].Util)
		}
	})
	t.Run("computes on one of two GPUs", func(t *testing.T) {
		v := look(10 * time.Minute)
		var holder container.Container
		for _, c := range v.byPID {
			if slices.Equal(c.GPUs.IDs, []string{"1", "2"}) {
				holder = c
			}
		}
		if holder.Name == "" {
			t.Fatal("no container holds GPUs 1 and 2")
		}
		on := func(i int) bool {
			return slices.ContainsFunc(v.sample.Devices[i].Processes, func(p gpu.Process) bool { return p.PID == uint32(holder.PID) })
		}
		if !on(1) || on(2) {
			t.Errorf("%s has a process on GPU 1: %v, on GPU 2: %v; want only GPU 1", holder.Name, on(1), on(2))
		}
	})
	t.Run("idle", func(t *testing.T) {
		v := look(30 * time.Minute)
		busy := map[uint32]bool{}
		for _, d := range v.sample.Devices {
			for _, p := range d.Processes {
				busy[p.PID] = true
			}
		}
		found := false
		for pid, c := range v.byPID {
			if !busy[pid] && !c.GPUs.Empty() {
				found = true
			}
		}
		if !found {
			t.Error("no container holds a GPU without a process on it")
		}
	})
	t.Run("stalled", func(t *testing.T) {
		before, after := look(2*time.Minute), look(5*time.Minute)
		found := false
		for _, d := range after.sample.Devices {
			for _, p := range d.Processes {
				if p.SMUtil != 0 || p.MemoryUsed == 0 {
					continue
				}
				for _, q := range before.sample.Devices[d.Index].Processes {
					if q.PID == p.PID && q.SMUtil > 50 {
						found = true
					}
				}
			}
		}
		if !found {
			t.Error("no process holds memory at 0 % after a busy start")
		}
	})
	t.Run("host process", func(t *testing.T) {
		v := look(time.Minute)
		found := false
		for _, o := range v.owners {
			if o == (container.Owner{Kind: container.OwnerHost, ID: "bob"}) {
				found = true
			}
		}
		if !found {
			t.Error("no GPU process of bob's outside containers at 1m")
		}
	})
	t.Run("short job", func(t *testing.T) {
		names := func(at time.Duration) []string {
			var out []string
			for _, c := range look(at).byPID {
				out = append(out, c.Name)
			}
			return out
		}
		early, during, late := names(time.Minute), names(5*time.Minute), names(10*time.Minute)
		for _, n := range during {
			if !slices.Contains(early, n) && !slices.Contains(late, n) {
				return
			}
		}
		t.Errorf("no container runs at 5m that runs neither at 1m (%v) nor at 10m (%v)", early, late)
	})
	t.Run("every process has an owner with labels", func(t *testing.T) {
		v := look(42 * time.Minute)
		for _, d := range v.sample.Devices {
			for _, p := range d.Processes {
				o := v.owners[p.PID]
				if o.Kind == container.OwnerContainer && v.byPID[p.PID].User == "" {
					t.Errorf("GPU %d process %d (%s) has no user label", d.Index, p.PID, name(v, p))
				}
			}
		}
	})
}

// checkPlays reads s at a spread of instants in both modes and checks what
// must hold for any valid scenario.
func checkPlays(t *testing.T, s *Scenario) {
	t.Helper()
	for _, loop := range []bool{false, true} {
		src := NewSource(s, loop)
		base := s.Start
		if loop {
			base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		}
		var last []uint64
		for k := range 23 {
			at := time.Duration(k-1) * (s.Duration / 7)
			now := base.Add(at)
			sample, err := src.Read(context.Background(), now)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if len(sample.Devices) != len(s.GPUs) {
				t.Fatalf("Read gave %d devices, want %d", len(sample.Devices), len(s.GPUs))
			}
			for i, d := range sample.Devices {
				if d.Util < 0 || d.Util > 100 || d.MemoryUsed > d.MemoryTotal || d.MemoryUsed+d.MemoryFree != d.MemoryTotal {
					t.Errorf("loop %v, +%v: GPU %d util %v, used %d, free %d of %d", loop, at, i, d.Util, d.MemoryUsed, d.MemoryFree, d.MemoryTotal)
				}
				if d.PowerWatts < s.GPUs[i].IdlePower || d.PowerWatts > s.GPUs[i].MaxPower {
					t.Errorf("loop %v, +%v: GPU %d power %vW outside %v..%v", loop, at, i, d.PowerWatts, s.GPUs[i].IdlePower, s.GPUs[i].MaxPower)
				}
				var util float64
				var mem uint64
				for _, p := range d.Processes {
					util += p.SMUtil
					mem = addCapped(mem, p.MemoryUsed, d.MemoryTotal)
				}
				if min(util, 100) != d.Util || mem != d.MemoryUsed {
					t.Errorf("loop %v, +%v: GPU %d util %v, used %d; its processes give %v, %d", loop, at, i, d.Util, d.MemoryUsed, min(util, 100), mem)
				}
				if last != nil && d.EnergyMilliJoules < last[i] {
					t.Errorf("loop %v, +%v: GPU %d energy went from %d to %d", loop, at, i, last[i], d.EnergyMilliJoules)
				}
			}
			last = last[:0]
			for _, d := range sample.Devices {
				last = append(last, d.EnergyMilliJoules)
			}
			cs, err := src.Containers(context.Background(), now)
			if err != nil {
				t.Fatalf("Containers: %v", err)
			}
			for _, c := range cs {
				if !c.Running {
					if c.PID != 0 || c.MemoryBytes != 0 || c.FinishedAt.IsZero() {
						t.Errorf("stopped container %s: pid %d, memory %d, finished %v; want 0, 0 and a time", c.Name, c.PID, c.MemoryBytes, c.FinishedAt)
					}
					continue
				}
				if o, ok, _ := src.Resolve(uint32(c.PID)); !ok || o.ID != c.ID {
					t.Errorf("Resolve(%d) = %v, %v; want container %s", c.PID, o, ok, c.ID)
				}
			}
		}
	}
}

// benchScenario has 8 GPUs and 64 containers on 4 GPUs each: 256 GPU
// processes at every instant, with phases that change every few minutes.
func benchScenario(tb testing.TB) *Scenario {
	s := &Scenario{
		Name:     "bench",
		Node:     "bench",
		Start:    defaultStart,
		Duration: time.Hour,
		Interval: time.Second,
	}
	for i := range 8 {
		s.GPUs = append(s.GPUs, GPU{Index: i, UUID: GPUUUID("bench", i), Model: "NVIDIA H100 80GB HBM3", Memory: 80 * gib, IdlePower: 70, MaxPower: 700})
	}
	for i := range 64 {
		c := Container{
			Name:   fmt.Sprintf("job-%02d", i),
			Image:  "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
			Labels: map[string]string{"gpumeter.user": fmt.Sprintf("user%d", i%9)},
			GPUs:   []int{i % 8, (i + 1) % 8, (i + 2) % 8, (i + 3) % 8},
			End:    time.Hour,
			CPU:    1,
			RAM:    gib,
		}
		c.ID = ContainerID(s.Node, c.Name)
		for k := range 12 {
			c.Phases = append(c.Phases, Phase{At: time.Duration(k)*5*time.Minute + time.Duration(i)*time.Second, Util: float64((i + k) % 5), Memory: gib})
		}
		c.Phases[0].At = 0
		s.Containers = append(s.Containers, c)
	}
	if err := s.Validate(); err != nil {
		tb.Fatal(err)
	}
	return s
}

func BenchmarkRead(b *testing.B) {
	s := benchScenario(b)
	src := NewSource(s, false)
	ctx := context.Background()
	sample, _ := src.Read(ctx, s.Start.Add(30*time.Minute))
	n := 0
	for _, d := range sample.Devices {
		n += len(d.Processes)
	}
	if n != 256 {
		b.Fatalf("benchmark scenario has %d processes, want 256", n)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		now := s.Start.Add(time.Duration(i%3600) * time.Second)
		if _, err := src.Read(ctx, now); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkContainers(b *testing.B) {
	s := benchScenario(b)
	src := NewSource(s, false)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := src.Containers(ctx, s.Start.Add(time.Duration(i%3600)*time.Second)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkNewSource(b *testing.B) {
	s := benchScenario(b)
	b.ReportAllocs()
	for b.Loop() {
		NewSource(s, false)
	}
}

// The sampler may read and list from different goroutines; the loop origin
// is fixed once.
func TestConcurrentUse(t *testing.T) {
	s := parseSmall(t)
	src := NewSource(s, true)
	origin := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 100 {
				now := origin.Add(time.Duration(g*100+i) * time.Second)
				if _, err := src.Read(context.Background(), now); err != nil {
					t.Error(err)
				}
				if _, err := src.Containers(context.Background(), now); err != nil {
					t.Error(err)
				}
				src.Resolve(pidA)
			}
		}()
	}
	for range 4 {
		<-done
	}
}

// TestReadTopology: the GPUs of an nvlink group report each other as
// NVLink peers, in fresh slices; a GPU in no group reports no topology.
func TestReadTopology(t *testing.T) {
	s, err := Parse("t.yaml", []byte(`version: 1
node: t
duration: 1h
gpus:
  - count: 4
    memory: 80GiB
    idle_power: 70W
    max_power: 700W
nvlink: [[0, 2, 3]]
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	src := NewSource(s, false)
	first, _ := src.Read(context.Background(), s.Start)
	want := [][]string{
		{GPUUUID("t", 2), GPUUUID("t", 3)},
		nil,
		{GPUUUID("t", 0), GPUUUID("t", 3)},
		{GPUUUID("t", 0), GPUUUID("t", 2)},
	}
	for i, d := range first.Devices {
		if !slices.Equal(d.Topology.NVLink, want[i]) || d.Topology.PCIeSwitch != "" {
			t.Errorf("GPU %d topology = %+v, want NVLink %v", i, d.Topology, want[i])
		}
	}
	first.Devices[0].Topology.NVLink[0] = "changed"
	second, _ := src.Read(context.Background(), s.Start)
	if got := second.Devices[0].Topology.NVLink; !slices.Equal(got, want[0]) {
		t.Errorf("NVLink after the caller changed an earlier sample = %v, want %v", got, want[0])
	}
}
