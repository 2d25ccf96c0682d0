package record_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/record"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sampler/samplertest"
	"github.com/gpumeter/gpumeter/internal/sim"
)

const (
	node  = "n1"
	gpuID = "GPU-0"
	model = "Test GPU"
	ctrID = "c1"
	gib   = 1 << 30
	// idleW and wattsPerUtil give the rig's GPU power: 100 W idle plus
	// 3 W per percent of utilisation, so 50 % draws 250 W.
	idleW        = 100
	wattsPerUtil = 3
)

var t0 = time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func openStore(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// flakyStore fails the next fail writes, then passes writes on to a real
// store.
type flakyStore struct {
	ledger.Store
	mu      sync.Mutex
	fail    int
	failed  int
	written int
	retains int
	// during runs inside each failing write, as a tick arriving while the
	// write is under way would.
	during func()
}

var errDiskFull = errors.New("disk full")

func (s *flakyStore) Write(ctx context.Context, b ledger.Batch) error {
	s.mu.Lock()
	if s.fail > 0 {
		s.fail--
		s.failed++
		during := s.during
		s.mu.Unlock()
		if during != nil {
			during()
		}
		return errDiskFull
	}
	s.written++
	s.mu.Unlock()
	return s.Store.Write(ctx, b)
}

func (s *flakyStore) Retain(ctx context.Context, node string, now time.Time, minutes, hours time.Duration) error {
	s.mu.Lock()
	s.retains++
	s.mu.Unlock()
	return s.Store.Retain(ctx, node, now, minutes, hours)
}

func (s *flakyStore) failNext(n int) {
	s.mu.Lock()
	s.fail = n
	s.mu.Unlock()
}

func (s *flakyStore) counts() (written, failed, retains int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written, s.failed, s.retains
}

// rig drives a real meter with hand-made samples of one GPU held by one
// container, so that every delta the recorder sums is known.
type rig struct {
	m      *meter.Meter
	last   time.Time
	power  float64 // W since last
	energy uint64  // the GPU's counter, mJ
	// ctrs is the inventory; ctrs[0] is c1, which holds the GPU and owns
	// its process.
	ctrs []container.Container
}

func newRig() *rig {
	return &rig{
		m: meter.New(meter.Config{IdleWatts: map[string]float64{model: idleW}}),
		ctrs: []container.Container{{
			ID: ctrID, Name: "train", Image: "train:1", Running: true,
			Labels: map[string]string{"gpumeter.user": "alice", "gpumeter.team": "nlp"},
			User:   "alice", Team: "nlp", Project: "llm",
			StartedAt: t0.Add(-time.Hour), GPUs: container.GPURequest{IDs: []string{"0"}},
		}},
	}
}

// step samples at now with c1's process at util percent and mem bytes; the
// GPU draws idleW + wattsPerUtil·util from now until the next sample.
func (r *rig) step(now time.Time, util float64, mem uint64) *sampler.Tick {
	if !r.last.IsZero() {
		r.energy += uint64(math.Round(r.power * now.Sub(r.last).Seconds() * 1000))
	}
	r.last, r.power = now, idleW+wattsPerUtil*util
	d := gpu.Device{
		Index: 0, UUID: gpuID, Model: model, MemoryTotal: 80 * gib, MemoryUsed: mem, MemoryFree: 80*gib - mem,
		Util: util, PowerWatts: r.power, EnergyMilliJoules: r.energy,
	}
	owners := [][]container.Owner{nil}
	if util > 0 || mem > 0 {
		d.Processes = []gpu.Process{{PID: 100, Type: gpu.Compute, MemoryUsed: mem, SMUtil: util, GPUInstanceID: -1, ComputeInstanceID: -1}}
		owners[0] = []container.Owner{{Kind: container.OwnerContainer, ID: ctrID}}
	}
	mt := r.m.Step(meter.Input{Time: now, Sample: gpu.Sample{Time: now, Devices: []gpu.Device{d}}, Owners: owners, Containers: r.ctrs})
	return &sampler.Tick{Tick: mt, Node: node, Owners: owners}
}

// minute is what the ledger holds for c1 and the GPU in one window.
type minute struct {
	Usage ledger.Sums
	GPU   ledger.GPUSums
	CPU   float64
	RAM   float64
}

func read(t *testing.T, s ledger.Store, from, to time.Time) minute {
	t.Helper()
	ctx := context.Background()
	f := ledger.Filter{From: from, To: to, Node: node}
	usage, err := s.Usage(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := s.GPUs(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	var m minute
	for _, u := range usage {
		if u.OwnerKind != ledger.KindContainer || u.OwnerID != ctrID {
			t.Fatalf("usage of %s %q, want only %s", u.OwnerKind, u.OwnerID, ctrID)
		}
		m.Usage = u.Sums
		m.CPU += u.CPUSeconds
		m.RAM += u.RAMByteSeconds
	}
	for _, g := range gpus {
		m.GPU = g.GPUSums
	}
	return m
}

func flush(t *testing.T, rec *record.Recorder) {
	t.Helper()
	if err := rec.Flush(context.Background()); err != nil {
		t.Fatalf("Flush() = %v", err)
	}
}

// TestAddSplitsByMinute books one interval at 50 % (250 W; 1 GiB held;
// 4 CPU-seconds per second; 2 GiB of RAM) and checks that each minute it
// touches gets its pro-rata part, and that the parts add up exactly.
func TestAddSplitsByMinute(t *testing.T) {
	tests := []struct {
		name     string
		from, to float64 // sample instants, seconds after 10:00:00
		// parts gives the share of the interval in the minutes from
		// 10:00 on.
		parts []float64
	}{
		{"inside a minute", 10, 11, []float64{1}},
		{"ending on the minute", 59, 60, []float64{1, 0}},
		{"starting on the minute", 60, 61, []float64{0, 1}},
		{"unaligned, across a minute", 59.5, 60.5, []float64{0.5, 0.5}},
		{"a missed sample, across three minutes", 30, 150, []float64{0.25, 0.5, 0.25}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := openStore(t)
			rec := record.New(record.Config{Store: store, Node: node})
			r := newRig()
			r.ctrs[0].CPUSeconds, r.ctrs[0].MemoryBytes = 100, 2*gib
			rec.Add(r.step(at(tt.from), 50, gib))
			dt := tt.to - tt.from
			r.ctrs[0].CPUSeconds += 4 * dt
			tick := r.step(at(tt.to), 50, gib)
			rec.Add(tick)
			flush(t, rec)

			// Over the interval: 250 W · dt, all of it c1's (the idle
			// 100 W by its allocation share of 1, the 150 W above by its
			// SM share of 1); 0.5·dt GPU-seconds used.
			whole := minute{
				Usage: ledger.Sums{AllocatedSeconds: dt, HeldSeconds: dt, PresentSeconds: dt, UsedSeconds: dt / 2, MemoryByteSeconds: gib * dt, EnergyJoules: 250 * dt},
				GPU:   ledger.GPUSums{Seconds: dt, AllocatedSeconds: dt, UsedSeconds: dt / 2, EnergyJoules: 250 * dt},
				CPU:   4 * dt,
				RAM:   2 * gib * dt,
			}
			if d := tick.GPUs[0].Delta; d.Seconds != dt || d.EnergyJoules != 250*dt {
				t.Fatalf("meter booked %v s and %v J, want %v s and %v J", d.Seconds, d.EnergyJoules, dt, 250*dt)
			}
			for i, f := range tt.parts {
				from := t0.Add(time.Duration(i) * time.Minute)
				got := read(t, store, from, from.Add(time.Minute))
				want := scale(whole, f)
				if f > 0 {
					want.Usage.PeakMemoryBytes, want.Usage.PeakUtil, want.GPU.PeakUtil = gib, 50, 50
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("minute %s (-want +got):\n%s", from.Format("15:04"), diff)
				}
			}
			// The whole window adds the parts back up to the tick's deltas.
			got := read(t, store, t0, t0.Add(time.Hour))
			want := whole
			want.Usage.PeakMemoryBytes, want.Usage.PeakUtil, want.GPU.PeakUtil = gib, 50, 50
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("whole window (-want +got):\n%s", diff)
			}
		})
	}
}

func scale(m minute, f float64) minute {
	u, g := &m.Usage, &m.GPU
	for _, v := range []*float64{&u.AllocatedSeconds, &u.HeldSeconds, &u.PresentSeconds, &u.UsedSeconds, &u.MemoryByteSeconds, &u.EnergyJoules,
		&g.Seconds, &g.AllocatedSeconds, &g.UsedSeconds, &g.EnergyJoules, &m.CPU, &m.RAM} {
		*v *= f
	}
	return m
}

// TestAddPeaks checks that a minute's peaks are the maxima of the states
// booked in it, and only of those: the sample that closes the minute's
// last interval opens the next minute's first.
func TestAddPeaks(t *testing.T) {
	store := openStore(t)
	rec := record.New(record.Config{Store: store, Node: node})
	r := newRig()
	for _, s := range []struct {
		at   float64
		util float64
		mem  uint64
	}{
		{0, 20, 1 * gib},
		{20, 70, 3 * gib},
		{40, 40, 2 * gib},
		{60, 100, 8 * gib}, // opens 10:01
		{80, 10, 1 * gib},
		{90, 0, 0},
	} {
		rec.Add(r.step(at(s.at), s.util, s.mem))
	}
	flush(t, rec)
	for _, tt := range []struct {
		from          float64
		mem           uint64
		util, gpuUtil float64
	}{
		{0, 3 * gib, 70, 70},
		{60, 8 * gib, 100, 100},
	} {
		got := read(t, store, at(tt.from), at(tt.from+60))
		if got.Usage.PeakMemoryBytes != tt.mem || got.Usage.PeakUtil != tt.util || got.GPU.PeakUtil != tt.gpuUtil {
			t.Errorf("minute from %s: peak memory %d, peak util %v, GPU peak util %v; want %d, %v, %v",
				at(tt.from).Format("15:04"), got.Usage.PeakMemoryBytes, got.Usage.PeakUtil, got.GPU.PeakUtil, tt.mem, tt.util, tt.gpuUtil)
		}
	}
}

// TestAddContainerInterval checks that CPU and RAM are booked over the
// container's own interval, which is longer than the GPU's when a
// container's stats could not be read at a sample.
func TestAddContainerInterval(t *testing.T) {
	store := openStore(t)
	rec := record.New(record.Config{Store: store, Node: node})
	r := newRig()
	c := &r.ctrs[0]
	c.CPUSeconds, c.MemoryBytes = 10, gib
	rec.Add(r.step(at(59), 50, gib))
	c.StatsErr = "read cpu.stat: no such file"
	rec.Add(r.step(at(60), 50, gib))
	c.StatsErr, c.CPUSeconds = "", 14
	rec.Add(r.step(at(61), 50, gib))
	flush(t, rec)

	// [10:00:59, 10:01:01): 4 CPU-seconds and 1 GiB for 2 s, half in each
	// minute, although the GPU's last interval lies in 10:01 alone.
	for _, from := range []time.Time{at(0), at(60)} {
		got := read(t, store, from, from.Add(time.Minute))
		if got.CPU != 2 || got.RAM != gib {
			t.Errorf("minute %s: %v CPU-seconds, %v RAM byte-seconds; want 2 and %v", from.Format("15:04"), got.CPU, got.RAM, float64(gib))
		}
		if got.GPU.Seconds != 1 {
			t.Errorf("minute %s: GPU metered %v s, want 1", from.Format("15:04"), got.GPU.Seconds)
		}
	}
}

// TestMetadata checks what the ledger learns of GPUs and containers, and
// that a container's exit is recorded once it stops.
func TestMetadata(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	rec := record.New(record.Config{Store: store, Node: node})
	r := newRig()
	r.ctrs = append(r.ctrs, container.Container{
		ID: "c2", Name: "eval", Image: "eval:2", Running: true, Labels: map[string]string{"gpumeter.user": "bob"},
		User: "bob", StartedAt: t0.Add(-time.Minute), CPUSeconds: 5, MemoryBytes: gib,
	})
	rec.Add(r.step(at(0), 50, gib))
	rec.Add(r.step(at(1), 50, gib))
	flush(t, rec)
	r.ctrs[1].Running, r.ctrs[1].FinishedAt, r.ctrs[1].ExitCode, r.ctrs[1].CPUSeconds = false, at(1), 137, 6
	rec.Add(r.step(at(2), 50, gib))
	flush(t, rec)

	gpus, err := store.GPUs(ctx, ledger.Filter{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 1 {
		t.Fatalf("%d GPUs in the ledger, want 1", len(gpus))
	}
	if want := (ledger.GPU{Node: node, UUID: gpuID, Index: 0, Model: model, MemoryTotal: 80 * gib}); gpus[0].GPU != want {
		t.Errorf("GPU = %+v, want %+v", gpus[0].GPU, want)
	}

	usage, err := store.Usage(ctx, ledger.Filter{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ledger.Container{}
	for _, u := range usage {
		if u.Container != nil {
			got[u.OwnerID] = *u.Container
		}
	}
	exit := 137
	want := map[string]ledger.Container{
		ctrID: {
			Node: node, ID: ctrID, Name: "train", Image: "train:1", User: "alice", Team: "nlp", Project: "llm", GPURequest: "0",
			Labels:    map[string]string{"gpumeter.user": "alice", "gpumeter.team": "nlp"},
			StartedAt: t0.Add(-time.Hour), FirstSeen: at(0), LastSeen: at(2),
		},
		"c2": {
			Node: node, ID: "c2", Name: "eval", Image: "eval:2", User: "bob",
			Labels:    map[string]string{"gpumeter.user": "bob"},
			StartedAt: t0.Add(-time.Minute), FinishedAt: at(1), ExitCode: &exit, FirstSeen: at(0), LastSeen: at(2),
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
}

// TestFlushFailureKeepsRows plays a scenario through the sampler at an
// interval that does not divide a minute, while the ledger refuses some
// writes, and checks that the ledger ends with exactly the meter's own
// totals: no row lost, none written twice.
func TestFlushFailureKeepsRows(t *testing.T) {
	ctx := context.Background()
	sc, err := sim.Parse("flaky.yaml", []byte(`version: 1
node: n1
start: 2026-11-02T10:00:00Z
duration: 4m
gpus:
  - count: 2
    model: Test GPU
    memory: 80GiB
    idle_power: 70W
    max_power: 700W
containers:
  - name: a
    gpus: [0]
    cpu: 1.5
    ram: 3GiB
    phases:
      - {at: 0s, util: 60, memory: 20GiB}
      - {at: 100s, util: 30, memory: 10GiB}
  - name: b
    gpus: [0, 1]
    start: 50s
    phases:
      - {at: 0s, util: 25, memory: 4GiB}
host_processes:
  - {user: dave, gpu: 1, start: 20s, end: 4m, util: 40, memory: 2GiB}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := samplertest.Scenario(sc, sampler.Config{Node: node})
	store := &flakyStore{Store: openStore(t), fail: 3}
	rec := record.New(record.Config{Store: store, Node: node})
	// Samples 700 ms apart, the first 250 ms after the start, so that
	// intervals straddle minute boundaries at every fraction.
	first := sc.Start.Add(250 * time.Millisecond)
	var i int
	for now := first; now.Before(sc.Start.Add(sc.Duration)); now = now.Add(700 * time.Millisecond) {
		rec.Add(s.Step(ctx, now))
		if i++; i%40 == 0 {
			_ = rec.Flush(ctx) // the first three fail
		}
	}
	if st := rec.Status(); st.FlushErrors != 3 || st.LastError != "" || st.Flushes == 0 {
		t.Errorf("before the last flush: %d flushes, %d errors, last error %q; want some, 3, none", st.Flushes, st.FlushErrors, st.LastError)
	}
	flush(t, rec)
	if st := rec.Status(); st.PendingRows != 0 || st.DroppedRows != 0 {
		t.Errorf("after the last flush: %d rows pending, %d dropped; want 0 and 0", st.PendingRows, st.DroppedRows)
	}

	last := s.Latest()
	gpus, err := store.GPUs(ctx, ledger.Filter{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != len(last.GPUs) {
		t.Fatalf("%d GPUs in the ledger, want %d", len(gpus), len(last.GPUs))
	}
	for i, g := range last.GPUs {
		m, l := g.Total, gpus[i].GPUSums
		if m.Seconds == 0 || m.EnergyJoules == 0 {
			t.Fatalf("GPU %d: the meter booked nothing", i)
		}
		// The ledger keeps seconds to the microsecond and energy to the
		// millijoule in each row: a few rows' rounding at most.
		checkClose(t, "GPU "+g.UUID+" seconds", l.Seconds, m.Seconds, 1e-4)
		checkClose(t, "GPU "+g.UUID+" allocated", l.AllocatedSeconds, m.AllocatedSeconds, 1e-4)
		checkClose(t, "GPU "+g.UUID+" idle", l.IdleSeconds, m.IdleSeconds, 1e-4)
		checkClose(t, "GPU "+g.UUID+" used", l.UsedSeconds, m.UsedSeconds, 1e-4)
		checkClose(t, "GPU "+g.UUID+" unattributed", l.UnattributedSeconds, m.UnattributedSeconds, 1e-4)
		checkClose(t, "GPU "+g.UUID+" energy", l.EnergyJoules, m.EnergyJoules, 0.1)
		checkClose(t, "GPU "+g.UUID+" idle energy", l.IdleEnergyJoules, m.IdleEnergyJoules, 0.1)
	}

	usage, err := store.Usage(ctx, ledger.Filter{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ kind, id, gpu string }
	got := map[key]ledger.UsageTotal{}
	for _, u := range usage {
		got[key{u.OwnerKind, u.OwnerID, u.GPU.UUID}] = u
	}
	kinds := map[container.OwnerKind]string{container.OwnerContainer: ledger.KindContainer, container.OwnerHost: ledger.KindHost, container.OwnerNone: ledger.KindNone}
	for _, u := range last.Usage {
		k := key{kinds[u.Owner.Kind], u.Owner.ID, u.UUID}
		l, ok := got[k]
		if !ok {
			t.Errorf("no ledger row for %v", k)
			continue
		}
		name := k.id + " on " + k.gpu
		checkClose(t, name+" allocated", l.AllocatedSeconds, u.Total.AllocatedSeconds, 1e-4)
		checkClose(t, name+" held", l.HeldSeconds, u.Total.HeldSeconds, 1e-4)
		if l.Unheld != (ledger.Unheld{}) {
			t.Errorf("%s: %+v, want every row with held seconds", name, l.Unheld)
		}
		checkClose(t, name+" present", l.PresentSeconds, u.Total.PresentSeconds, 1e-4)
		checkClose(t, name+" used", l.UsedSeconds, u.Total.UsedSeconds, 1e-4)
		checkClose(t, name+" energy", l.EnergyJoules, u.Total.EnergyJoules, 0.1)
		checkClose(t, name+" memory", l.MemoryByteSeconds/gib, u.Total.MemoryByteSeconds/gib, 1e-6)
		if l.PeakMemoryBytes != u.Total.PeakMemoryBytes {
			t.Errorf("%s peak memory = %d, want %d", name, l.PeakMemoryBytes, u.Total.PeakMemoryBytes)
		}
	}
	if len(got) != len(last.Usage) {
		t.Errorf("%d ledger rows, the meter has %d", len(got), len(last.Usage))
	}
	cpu := map[string]float64{}
	for _, u := range usage {
		cpu[u.OwnerID] += u.CPUSeconds
	}
	for _, c := range last.Containers {
		if c.Total.CPUSeconds == 0 && c.ID == sim.ContainerID(node, "a") {
			t.Errorf("container a booked no CPU")
		}
		checkClose(t, c.Name+" CPU", cpu[c.ID], c.Total.CPUSeconds, 1e-4)
	}
}

func checkClose(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %v, want %v (±%v)", what, got, want, tol)
	}
}

// TestFlushFailureRetriesAlone checks that a batch whose write failed is
// sent again alone, before the rows summed while it was under way (which
// go out in a batch of their own), that together they add up, and that the
// container keeps the first time it was seen.
func TestFlushFailureRetriesAlone(t *testing.T) {
	store := &flakyStore{Store: openStore(t), fail: 1}
	rec := record.New(record.Config{Store: store, Node: node})
	r := newRig()
	rec.Add(r.step(at(0), 50, gib))
	rec.Add(r.step(at(10), 50, 2*gib))
	store.during = func() { rec.Add(r.step(at(20), 50, gib)) }
	if err := rec.Flush(context.Background()); !errors.Is(err, errDiskFull) {
		t.Fatalf("Flush() = %v, want %v", err, errDiskFull)
	}
	flush(t, rec)
	if w, f, _ := store.counts(); w != 2 || f != 1 {
		t.Errorf("%d writes, %d failed; want 2 (the failed batch again, then the new rows) and 1", w, f)
	}
	got := read(t, store, t0, t0.Add(time.Minute))
	want := minute{
		Usage: ledger.Sums{AllocatedSeconds: 20, HeldSeconds: 20, PresentSeconds: 20, UsedSeconds: 10, MemoryByteSeconds: 30 * gib, EnergyJoules: 5000, PeakMemoryBytes: 2 * gib, PeakUtil: 50},
		GPU:   ledger.GPUSums{Seconds: 20, AllocatedSeconds: 20, UsedSeconds: 10, EnergyJoules: 5000, PeakUtil: 50},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("minute (-want +got):\n%s", diff)
	}
	usage, err := store.Usage(context.Background(), ledger.Filter{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	if len(usage) != 1 || usage[0].Container == nil || !usage[0].Container.FirstSeen.Equal(at(0)) {
		t.Errorf("container rows %+v, want one first seen at %s", usage, at(0))
	}
}

// TestMaxRows fills three minutes of rows (one usage, one GPU and one
// container row each) while the ledger is down, with room for seven.
func TestMaxRows(t *testing.T) {
	store := &flakyStore{Store: openStore(t), fail: 1 << 30}
	rec := record.New(record.Config{Store: store, Node: node, MaxRows: 7})
	r := newRig()
	r.ctrs[0].MemoryBytes = gib
	for s := 0.0; s <= 180; s += 30 {
		r.ctrs[0].CPUSeconds = s
		rec.Add(r.step(at(s), 50, gib))
		_ = rec.Flush(context.Background())
	}
	st := rec.Status()
	if st.DroppedRows != 3 || st.PendingRows != 6 {
		t.Errorf("%d rows dropped, %d pending; want 3 and 6", st.DroppedRows, st.PendingRows)
	}
	store.failNext(0)
	flush(t, rec)
	for i, want := range []float64{0, 60, 60} {
		from := t0.Add(time.Duration(i) * time.Minute)
		got := read(t, store, from, from.Add(time.Minute))
		if got.GPU.Seconds != want || got.Usage.AllocatedSeconds != want || got.CPU != want {
			t.Errorf("minute %s: GPU %v s, allocated %v s, CPU %v s; want %v each", from.Format("15:04"), got.GPU.Seconds, got.Usage.AllocatedSeconds, got.CPU, want)
		}
	}
}

func TestStatusAndMetrics(t *testing.T) {
	names := []string{
		"gpumeter_ledger_pending_rows", "gpumeter_ledger_flushes_total", "gpumeter_ledger_flush_errors_total",
		"gpumeter_ledger_dropped_rows_total", "gpumeter_ledger_up",
	}
	metrics := func(pending, flushes, errs, up int) string {
		return strings.NewReplacer("PENDING", strconv.Itoa(pending), "FLUSHES", strconv.Itoa(flushes), "ERRORS", strconv.Itoa(errs), "UP", strconv.Itoa(up)).Replace(`
# HELP gpumeter_ledger_dropped_rows_total Rows dropped because the ledger stayed unwritable past ledger.max_pending_rows.
# TYPE gpumeter_ledger_dropped_rows_total counter
gpumeter_ledger_dropped_rows_total 0
# HELP gpumeter_ledger_flush_errors_total Batches the ledger refused; their rows stay in memory and go out with the next batch.
# TYPE gpumeter_ledger_flush_errors_total counter
gpumeter_ledger_flush_errors_total ERRORS
# HELP gpumeter_ledger_flushes_total Batches written to the ledger.
# TYPE gpumeter_ledger_flushes_total counter
gpumeter_ledger_flushes_total FLUSHES
# HELP gpumeter_ledger_pending_rows Usage rows summed in memory and not yet written to the ledger.
# TYPE gpumeter_ledger_pending_rows gauge
gpumeter_ledger_pending_rows PENDING
# HELP gpumeter_ledger_up 1 when the last write to the ledger succeeded.
# TYPE gpumeter_ledger_up gauge
gpumeter_ledger_up UP
`)
	}
	store := &flakyStore{Store: openStore(t), fail: 1}
	rec := record.New(record.Config{Store: store, Node: node})
	compare := func(when, want string) {
		t.Helper()
		if err := testutil.CollectAndCompare(rec, strings.NewReader(want), names...); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
	compare("at the start", metrics(0, 0, 0, 1))
	if n := testutil.CollectAndCount(rec, "gpumeter_ledger_last_flush_timestamp_seconds"); n != 0 {
		t.Errorf("%d last-flush series before any flush, want 0", n)
	}

	r := newRig()
	r.ctrs[0].MemoryBytes = gib
	rec.Add(r.step(at(0), 50, gib))
	rec.Add(r.step(at(1), 50, gib))
	compare("with one minute pending", metrics(3, 0, 0, 1))

	if err := rec.Flush(context.Background()); !errors.Is(err, errDiskFull) {
		t.Fatalf("Flush() = %v, want %v", err, errDiskFull)
	}
	if st := rec.Status(); st.LastError != errDiskFull.Error() || st.FlushErrors != 1 || st.PendingRows != 3 || !st.LastFlush.IsZero() {
		t.Errorf("after a failed flush: %+v", st)
	}
	compare("after a failed flush", metrics(3, 0, 1, 0))

	before := time.Now()
	flush(t, rec)
	st := rec.Status()
	if st.LastError != "" || st.Flushes != 1 || st.PendingRows != 0 || st.LastFlush.Before(before) || st.WriteSeconds <= 0 {
		t.Errorf("after a good flush: %+v", st)
	}
	compare("after a good flush", metrics(0, 1, 1, 1))
	if n := testutil.CollectAndCount(rec, "gpumeter_ledger_last_flush_timestamp_seconds", "gpumeter_ledger_write_duration_seconds"); n != 2 {
		t.Errorf("%d last-flush and write-duration series, want 2", n)
	}

	// Nothing pending: a flush writes nothing and counts nothing.
	flush(t, rec)
	if st := rec.Status(); st.Flushes != 1 {
		t.Errorf("an empty flush counted: %d flushes, want 1", st.Flushes)
	}
}

func TestRun(t *testing.T) {
	t.Run("flushes on its interval", func(t *testing.T) {
		store := &flakyStore{Store: openStore(t)}
		rec := record.New(record.Config{Store: store, Node: node, FlushInterval: 10 * time.Millisecond,
			MinuteRetention: 100 * 365 * 24 * time.Hour, HourRetention: 100 * 365 * 24 * time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- rec.Run(ctx) }()
		r := newRig()
		rec.Add(r.step(at(0), 50, gib))
		rec.Add(r.step(at(1), 50, gib))
		waitFor(t, "a flush", func() bool { return rec.Status().Flushes >= 1 })
		rec.Add(r.step(at(2), 50, gib))
		waitFor(t, "the second interval in the ledger", func() bool { return read(t, store, t0, t0.Add(time.Minute)).GPU.Seconds == 2 })
		cancel()
		if err := wait(t, done); err != nil {
			t.Errorf("Run() = %v", err)
		}
		if st := rec.Status(); st.Flushes < 2 || st.FlushErrors != 0 {
			t.Errorf("%d flushes, %d errors; want at least 2 and none", st.Flushes, st.FlushErrors)
		}
		if _, _, retains := store.counts(); retains != 1 {
			t.Errorf("retention ran %d times, want once an hour", retains)
		}
	})
	t.Run("flushes when its context ends", func(t *testing.T) {
		store := &flakyStore{Store: openStore(t)}
		rec := record.New(record.Config{Store: store, Node: node, FlushInterval: time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- rec.Run(ctx) }()
		r := newRig()
		rec.Add(r.step(at(0), 50, gib))
		rec.Add(r.step(at(1), 50, gib))
		cancel()
		if err := wait(t, done); err != nil {
			t.Errorf("Run() = %v", err)
		}
		if st := rec.Status(); st.Flushes != 1 || st.PendingRows != 0 {
			t.Errorf("after Run: %d flushes, %d rows pending; want 1 and 0", st.Flushes, st.PendingRows)
		}
		if got := read(t, store, t0, t0.Add(time.Minute)); got.GPU.Seconds != 1 {
			t.Errorf("ledger has %v GPU-seconds, want 1", got.GPU.Seconds)
		}
		if _, _, retains := store.counts(); retains != 0 {
			t.Errorf("retention ran %d times without being configured", retains)
		}
	})
	t.Run("returns the last flush's error", func(t *testing.T) {
		store := &flakyStore{Store: openStore(t), fail: 1}
		rec := record.New(record.Config{Store: store, Node: node, FlushInterval: time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- rec.Run(ctx) }()
		r := newRig()
		rec.Add(r.step(at(0), 50, gib))
		rec.Add(r.step(at(1), 50, gib))
		cancel()
		if err := wait(t, done); !errors.Is(err, errDiskFull) {
			t.Errorf("Run() = %v, want %v", err, errDiskFull)
		}
	})
}

// goneGPUs is a GPU source that reads one idle GPU until gone is set,
// and nothing at all after.
type goneGPUs struct{ gone bool }

func (g *goneGPUs) Read(_ context.Context, now time.Time) (gpu.Sample, error) {
	if g.gone {
		return gpu.Sample{}, errors.New("nvml: driver gone")
	}
	d := gpu.Device{Index: 0, UUID: gpuID, Model: model, MemoryTotal: 80 * gib, PowerWatts: idleW}
	return gpu.Sample{Time: now, Devices: []gpu.Device{d}}, nil
}

// TestAddRepublishedTick: while the GPU source reads nothing, the sampler
// publishes its last figures again with the new health. Those deltas were
// summed once already and must not reach the ledger twice.
func TestAddRepublishedTick(t *testing.T) {
	store := openStore(t)
	rec := record.New(record.Config{Store: store, Node: node})
	src := &goneGPUs{}
	s := sampler.New(sampler.Config{Node: node, GPUs: src, OnTick: rec.Add})
	ctx := context.Background()
	s.Step(ctx, at(0))
	s.Step(ctx, at(1))
	src.gone = true
	for i := 2; i < 5; i++ {
		if tick := s.Step(ctx, at(float64(i))); tick.GPUs[0].Delta.Seconds != 1 {
			t.Fatalf("the sampler did not republish the last figures")
		}
	}
	flush(t, rec)
	if got := read(t, store, t0, t0.Add(time.Minute)).GPU; got.Seconds != 1 || got.IdleSeconds != 1 {
		t.Errorf("ledger has %v GPU-seconds, %v idle; want 1 and 1", got.Seconds, got.IdleSeconds)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after its context ended")
		return nil
	}
}

// discard is a store that accepts every batch and keeps nothing.
type discard struct{ ledger.Store }

func (discard) Write(context.Context, ledger.Batch) error { return nil }

// BenchmarkAdd measures one tick of the load scenario (8 GPUs, 64
// containers, 256 GPU processes) read from the simulator, resolved,
// metered and summed into minutes by Add. The rows are written away,
// outside the timer, every five virtual seconds as Run does, or every
// virtual hour as simulate does.
func BenchmarkAdd(b *testing.B) {
	for _, bc := range []struct {
		name  string
		every int // ticks between flushes
	}{{"flush-5s", 5}, {"flush-1h", 3600}} {
		b.Run(bc.name, func(b *testing.B) {
			sc, err := sim.Load("../../testdata/bench-8gpu-64ctr.yaml")
			if err != nil {
				b.Fatal(err)
			}
			s := samplertest.Scenario(sc, sampler.Config{})
			rec := record.New(record.Config{Store: discard{}, Node: sc.Node, MaxRows: 1 << 30})
			ctx := context.Background()
			now := sc.Start
			rec.Add(s.Step(ctx, now))
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				now = now.Add(time.Second)
				rec.Add(s.Step(ctx, now))
				if n++; n%bc.every == 0 {
					b.StopTimer()
					if err := rec.Flush(ctx); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			}
			if st := rec.Status(); st.DroppedRows != 0 {
				b.Fatalf("%d rows dropped", st.DroppedRows)
			}
		})
	}
}

// invalidStore refuses every batch as invalid, as a store does with a row
// it can never hold.
type invalidStore struct{ ledger.Store }

func (invalidStore) Write(context.Context, ledger.Batch) error {
	return fmt.Errorf("row 3: %w: energy is NaN", ledger.ErrInvalidBatch)
}

// TestInvalidBatchDropped checks that a batch the ledger calls invalid is
// dropped and counted, not kept to block every later batch.
func TestInvalidBatchDropped(t *testing.T) {
	rec := record.New(record.Config{Store: invalidStore{openStore(t)}, Node: node})
	r := newRig()
	rec.Add(r.step(at(0), 50, gib))
	rec.Add(r.step(at(1), 50, gib))
	pending := rec.Status().PendingRows
	if pending == 0 {
		t.Fatal("nothing pending after two ticks")
	}
	if err := rec.Flush(context.Background()); !errors.Is(err, ledger.ErrInvalidBatch) {
		t.Fatalf("Flush() = %v, want ErrInvalidBatch", err)
	}
	st := rec.Status()
	if st.PendingRows != 0 || st.DroppedRows != uint64(pending) || st.FlushErrors != 1 {
		t.Errorf("after an invalid batch: %d pending, %d dropped, %d errors; want 0, %d, 1", st.PendingRows, st.DroppedRows, st.FlushErrors, pending)
	}
}
