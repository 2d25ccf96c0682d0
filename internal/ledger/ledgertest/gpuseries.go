// GPU series: the sampled figures of GPU rows, their means and maxima per
// step, from minute or hour rows.

package ledgertest

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// gauges holds n readings of the same figures.
func gauges(n int64, util, mem, power, temp float64) ledger.GPUGauges {
	var g ledger.GPUGauges
	for range n {
		g.Observe(util, mem, power, temp)
	}
	return g
}

func gpuRow(node, gpu string, start time.Time, g ledger.GPUGauges) ledger.GPUUsage {
	return ledger.GPUUsage{Node: node, Start: start, GPU: gpu, GPUSums: ledger.GPUSums{Seconds: 1}, Gauges: g}
}

func gpuSeries(t *testing.T, s ledger.Ledger, node string, from, to time.Time, step time.Duration) []ledger.GPUHistory {
	t.Helper()
	h, err := s.GPUSeries(context.Background(), node, from, to, step)
	if err != nil {
		t.Fatalf("GPUSeries(%s, %v–%v, %v): %v", node, from, to, step, err)
	}
	return h
}

func testGPUSeries(t *testing.T, s ledger.Ledger) {
	gpuOther := ledger.GPU{Node: nodeB, UUID: gpuA, Index: 0, Model: "NVIDIA A100-SXM4-40GB", MemoryTotal: 40 << 30}
	// Two batches add to the same minute of GPU A: 2 readings, then 1.
	write(t, s, ledger.Batch{GPUs: []ledger.GPU{gpuMetaA, gpuMetaB, gpuOther}, GPUUsage: []ledger.GPUUsage{
		gpuRow(nodeA, gpuA, at(0, 0), gauges(2, 40, 1<<30, 200, 50)),
		gpuRow(nodeA, gpuA, at(0, 1), gauges(1, 10, 1<<20, 100.5, 40.25)),
		gpuRow(nodeA, gpuB, at(0, 0), gauges(1, 0, 0, 60, 30)),
		// A row without readings (written before gauges, or a GPU that
		// could not be read) has no point.
		gpuRow(nodeA, gpuB, at(0, 2), ledger.GPUGauges{}),
		gpuRow(nodeB, gpuA, at(0, 0), gauges(1, 99, 99, 99, 99)),
		gpuRow(nodeA, gpuA, at(1, 0), gauges(1, 5, 5, 5, 5)),
	}})
	write(t, s, ledger.Batch{GPUUsage: []ledger.GPUUsage{
		gpuRow(nodeA, gpuA, at(0, 0), gauges(1, 100, 4<<30, 500, 80)),
	}})

	minuteA0 := ledger.GPUPoint{Start: at(0, 0), Samples: 3,
		UtilMean: 60, UtilMax: 100, MemoryMean: 2 << 30, MemoryMax: 4 << 30,
		PowerMean: 300, PowerMax: 500, TempMean: 60, TempMax: 80}
	minuteA1 := ledger.GPUPoint{Start: at(0, 1), Samples: 1,
		UtilMean: 10, UtilMax: 10, MemoryMean: 1 << 20, MemoryMax: 1 << 20,
		PowerMean: 100.5, PowerMax: 100.5, TempMean: 40.25, TempMax: 40.25}
	minuteB0 := ledger.GPUPoint{Start: at(0, 0), Samples: 1, PowerMean: 60, PowerMax: 60, TempMean: 30, TempMax: 30}

	got := gpuSeries(t, s, nodeA, at(0, 0), at(1, 0), time.Minute)
	want := []ledger.GPUHistory{
		{GPU: gpuMetaA, Points: []ledger.GPUPoint{minuteA0, minuteA1}},
		{GPU: gpuMetaB, Points: []ledger.GPUPoint{minuteB0}},
	}
	if d := gocmp.Diff(want, got); d != "" {
		t.Errorf("minute series (-want +got):\n%s", d)
	}

	// The window is [from, to): 08:01 alone.
	got = gpuSeries(t, s, nodeA, at(0, 1), at(0, 2), time.Minute)
	want = []ledger.GPUHistory{{GPU: gpuMetaA, Points: []ledger.GPUPoint{minuteA1}}}
	if d := gocmp.Diff(want, got); d != "" {
		t.Errorf("one-minute window (-want +got):\n%s", d)
	}

	// Five-minute steps sum the minutes: 4 readings of GPU A.
	five := ledger.GPUPoint{Start: at(0, 0), Samples: 4,
		UtilMean: 47.5, UtilMax: 100, MemoryMean: (2<<30 + 4<<30 + 1<<20) / 4.0, MemoryMax: 4 << 30,
		PowerMean: (400 + 500 + 100.5) / 4, PowerMax: 500, TempMean: (100 + 80 + 40.25) / 4, TempMax: 80}
	got = gpuSeries(t, s, nodeA, at(0, 0), at(1, 0), 5*time.Minute)
	want = []ledger.GPUHistory{
		{GPU: gpuMetaA, Points: []ledger.GPUPoint{five}},
		{GPU: gpuMetaB, Points: []ledger.GPUPoint{minuteB0}},
	}
	if d := gocmp.Diff(want, got); d != "" {
		t.Errorf("five-minute series (-want +got):\n%s", d)
	}

	// Hour steps read the hour rows, which the write rolled up; a window
	// edge inside an hour widens to it.
	hourA1 := ledger.GPUPoint{Start: at(1, 0), Samples: 1, UtilMean: 5, UtilMax: 5, MemoryMean: 5, MemoryMax: 5,
		PowerMean: 5, PowerMax: 5, TempMean: 5, TempMax: 5}
	got = gpuSeries(t, s, nodeA, at(0, 30), at(1, 10), time.Hour)
	hourA0 := five
	want = []ledger.GPUHistory{
		{GPU: gpuMetaA, Points: []ledger.GPUPoint{hourA0, hourA1}},
		{GPU: gpuMetaB, Points: []ledger.GPUPoint{minuteB0}},
	}
	if d := gocmp.Diff(want, got); d != "" {
		t.Errorf("hour series (-want +got):\n%s", d)
	}
	// Two-hour steps sum hour rows.
	got = gpuSeries(t, s, nodeA, at(0, 0), at(2, 0), 2*time.Hour)
	if len(got) != 2 || len(got[0].Points) != 1 || got[0].Points[0].Samples != 5 || got[0].Points[0].Start != at(0, 0) {
		t.Errorf("two-hour series: %+v; want GPU A's 5 readings in one point at %v", got, at(0, 0))
	}

	// The other node's GPU of the same UUID is its own.
	got = gpuSeries(t, s, nodeB, at(0, 0), at(1, 0), time.Minute)
	want = []ledger.GPUHistory{{GPU: gpuOther, Points: []ledger.GPUPoint{{Start: at(0, 0), Samples: 1,
		UtilMean: 99, UtilMax: 99, MemoryMean: 99, MemoryMax: 99, PowerMean: 99, PowerMax: 99, TempMean: 99, TempMax: 99}}}}
	if d := gocmp.Diff(want, got); d != "" {
		t.Errorf("node B (-want +got):\n%s", d)
	}
	if got := gpuSeries(t, s, "node-none", at(0, 0), at(1, 0), time.Minute); len(got) != 0 {
		t.Errorf("unknown node: %+v, want none", got)
	}
	if got := gpuSeries(t, s, nodeA, at(5, 0), at(6, 0), time.Minute); len(got) != 0 {
		t.Errorf("empty window: %+v, want none", got)
	}

	// Readings that cannot be stored are refused with the batch.
	for name, g := range map[string]ledger.GPUGauges{
		"Gauges.Samples":   {Samples: -1},
		"Gauges.UtilSum":   {Samples: 1, UtilSum: math.NaN()},
		"Gauges.PowerMax":  {Samples: 1, PowerMax: math.Inf(1)},
		"Gauges.MemorySum": {Samples: 1, MemorySum: 1e30},
	} {
		err := s.Write(context.Background(), ledger.Batch{GPUUsage: []ledger.GPUUsage{gpuRow(nodeA, gpuA, at(3, 0), g)}})
		if !errors.Is(err, ledger.ErrInvalidBatch) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s out of range: %v, want ErrInvalidBatch naming it", name, err)
		}
	}
	if got := gpuSeries(t, s, nodeA, at(3, 0), at(4, 0), time.Minute); len(got) != 0 {
		t.Errorf("refused batches left points: %+v", got)
	}

	for _, step := range []time.Duration{0, -time.Minute, 30 * time.Second, 90 * time.Second} {
		if _, err := s.GPUSeries(context.Background(), nodeA, at(0, 0), at(1, 0), step); err == nil {
			t.Errorf("step %v: no error", step)
		}
	}
	if _, err := s.GPUSeries(context.Background(), "", at(0, 0), at(1, 0), time.Minute); err == nil {
		t.Error("no node: no error")
	}
}

func testGPUSeriesRetain(t *testing.T, s ledger.Ledger) {
	var b ledger.Batch
	b.GPUs = []ledger.GPU{gpuMetaA}
	for h := range 3 {
		for m := range 60 {
			b.GPUUsage = append(b.GPUUsage, gpuRow(nodeA, gpuA, at(h, m), gauges(1, float64(h), 0, 0, 0)))
		}
	}
	write(t, s, b)
	if err := s.Retain(context.Background(), nodeA, at(2, 30), time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	// Minute rows before 09:00 are gone; hour rows stay.
	got := gpuSeries(t, s, nodeA, at(0, 0), at(3, 0), time.Minute)
	if len(got) != 1 || len(got[0].Points) != 120 || got[0].Points[0].Start != at(1, 0) {
		t.Errorf("minute series after Retain: %d histories, want GPU A from %v with 120 points", len(got), at(1, 0))
	}
	got = gpuSeries(t, s, nodeA, at(0, 0), at(3, 0), time.Hour)
	if len(got) != 1 || len(got[0].Points) != 3 || got[0].Points[0].Samples != 60 || got[0].Points[2].UtilMean != 2 {
		t.Errorf("hour series after Retain: %+v, want 3 hours of 60 readings", got)
	}
}

// BenchGPUSeries reads the last 7 days of the month Fill30Days wrote in
// hour steps (the console's 7-day charts) and the last 24 hours in
// five-minute steps, checking that every GPU has its points.
func BenchGPUSeries(b *testing.B, s ledger.Ledger, m Month) {
	ctx := context.Background()
	for _, w := range []struct {
		name       string
		span, step time.Duration
	}{{"7d", 7 * 24 * time.Hour, time.Hour}, {"24h", 24 * time.Hour, 5 * time.Minute}} {
		b.Run(w.name, func(b *testing.B) {
			want := int(w.span / w.step)
			for b.Loop() {
				h, err := s.GPUSeries(ctx, m.Node, m.To.Add(-w.span), m.To, w.step)
				if err != nil {
					b.Fatal(err)
				}
				if len(h) != len(m.GPUs) || len(h[0].Points) != want {
					b.Fatalf("%d GPUs, %d points; want %d and %d", len(h), len(h[0].Points), len(m.GPUs), want)
				}
			}
		})
	}
}
