package gpuhistory

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// historyTick is a tick at second i: GPU-a at i mod 100 %, 1 GiB per 10 %,
// 100 W + i mod 100, 40 + i mod 10 °C; GPU-b at 50 % without a power
// reading; GPU-c unreadable.
func historyTick(i int) *sampler.Tick {
	at := t0.Add(time.Duration(i) * time.Second)
	u := float64(i % 100)
	devs := []gpu.Device{
		{Index: 0, UUID: "GPU-a", Model: "H100", Util: u, MemoryUsed: uint64(u/10) << 30, PowerWatts: 100 + u, TempC: 40 + float64(i%10)},
		{Index: 1, UUID: "GPU-b", Model: "H100", Util: 50, Missing: []gpu.Field{gpu.FieldPower}},
		{Index: 2, UUID: "GPU-c", Model: "H100", Err: errors.New("GPU is lost")},
	}
	return &sampler.Tick{Tick: &meter.Tick{Time: at, Sample: gpu.Sample{Time: at, Devices: devs}}}
}

// utilTick is a tick at at with one readable GPU at percent.
func utilTick(uuid string, at time.Time, percent float64) *sampler.Tick {
	devs := []gpu.Device{{UUID: uuid, Util: percent}}
	return &sampler.Tick{Tick: &meter.Tick{Time: at, Sample: gpu.Sample{Time: at, Devices: devs}}}
}

// TestRecent: the ring holds a fixed hour of samples, steps give the
// means and maxima of the samples in them, a republished tick adds
// nothing, and GPUs without every reading are left out.
func TestRecent(t *testing.T) {
	h := New(time.Second)
	const n = 5000
	for i := range n {
		tick := historyTick(i)
		h.Add(tick)
		h.Add(tick) // republished while the GPUs read nothing new
	}
	if got := len(h.gpus["GPU-a"].samples); got != 3601 {
		t.Errorf("ring holds %d samples, want 3601", got)
	}
	to := t0.Add(n * time.Second) // just past the last sample
	from := to.Add(-time.Hour)
	got := h.Recent(from, to, 10*time.Second)
	if len(got) != 1 || got[0].GPU.UUID != "GPU-a" || got[0].GPU.Index != 0 || got[0].GPU.Model != "H100" {
		t.Fatalf("Recent: %+v, want GPU-a alone", got)
	}
	ps := got[0].Points
	if len(ps) != 360 {
		t.Fatalf("%d points, want 360", len(ps))
	}
	var samples int64
	for _, p := range ps {
		samples += p.Samples
	}
	if samples != 3600 {
		t.Errorf("%d samples over the hour, want 3600 (each once)", samples)
	}
	// The step at second 1400: seconds 1400..1409, at 0..9 % and 40..49 °C.
	p := ps[0]
	if !p.Start.Equal(from) || p.Samples != 10 || p.UtilMean != 4.5 || p.UtilMax != 9 ||
		p.PowerMean != 104.5 || p.PowerMax != 109 || p.TempMean != 44.5 || p.TempMax != 49 || p.MemoryMax != 0 {
		t.Errorf("first point %+v", p)
	}
	// Seconds 1490..1499: 90..99 %, 9 GiB.
	if p := ps[9]; p.UtilMean != 94.5 || p.MemoryMean != 9<<30 || p.MemoryMax != 9<<30 {
		t.Errorf("tenth point %+v", p)
	}
	// Older than the ring: nothing.
	if got := h.Recent(t0, t0.Add(time.Minute), 10*time.Second); len(got) != 0 {
		t.Errorf("samples that left the ring: %+v", got)
	}
	// The placement window reads the GPU without a power reading too.
	m := h.Means(to, 10*time.Minute)
	if m["GPU-b"] != 0.5 {
		t.Errorf("GPU-b mean %v, want 0.5", m["GPU-b"])
	}
	if _, ok := m["GPU-c"]; ok {
		t.Errorf("the unreadable GPU-c has a mean %v", m["GPU-c"])
	}
}

// TestMeans: the mean covers the window only, ends included, and a GPU
// with no recent sample is left out.
func TestMeans(t *testing.T) {
	h := New(time.Second)
	h.Add(utilTick("GPU-old", t0, 100))
	for i := range 30 {
		p := 20.0
		if i >= 20 {
			p = 80 // the last ten seconds
		}
		h.Add(utilTick("GPU-a", t0.Add(time.Duration(i)*time.Second), p))
	}
	now := t0.Add(29 * time.Second)
	m := h.Means(now, 10*time.Second)
	// The window holds seconds 19..29: one 20 % sample and ten 80 %.
	if want := (20 + 10*80) / 11.0 / 100; math.Abs(m["GPU-a"]-want) > 1e-9 {
		t.Errorf("GPU-a mean %v, want %v", m["GPU-a"], want)
	}
	if _, ok := m["GPU-old"]; ok {
		t.Errorf("GPU-old has a mean %v from a sample outside the window", m["GPU-old"])
	}
}

// BenchmarkTick is what the ring costs the sampler's tick on 8 GPUs with
// a full hour kept: the tick added, then the queue's placement window
// (10 minutes) read back.
//
//	go test -run '^$' -bench Tick ./internal/gpuhistory/
func BenchmarkTick(b *testing.B) {
	devs := make([]gpu.Device, 8)
	for i := range devs {
		devs[i] = gpu.Device{Index: i, UUID: "GPU-" + string(rune('a'+i)), Util: float64(10 * i)}
	}
	h := New(time.Second)
	tick := func(i int) *sampler.Tick {
		at := t0.Add(time.Duration(i) * time.Second)
		return &sampler.Tick{Tick: &meter.Tick{Time: at, Sample: gpu.Sample{Time: at, Devices: devs}}}
	}
	for i := range 3601 {
		h.Add(tick(i))
	}
	i := 3601
	for b.Loop() {
		t := tick(i)
		h.Add(t)
		if m := h.Means(t.Time, 10*time.Minute); len(m) != 8 {
			b.Fatalf("%d means, want 8", len(m))
		}
		i++
	}
}
