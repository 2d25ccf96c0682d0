// Minutes written late: rows for hours whose minutes are compacted into
// chunks already (a spooled batch replayed after an outage), for minutes
// a chunk holds and for minutes it lacks, and rows for the open hour.

package ledgertest

import (
	"context"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

func testLateMinutes(t *testing.T, s ledger.Ledger) {
	meta, batches := edgeData()
	write(t, s, meta)
	for _, b := range batches {
		write(t, s, b)
	}
	// The minutes edgeData leaves out of hour 1, now written.
	var gaps ledger.Batch
	for m := 60; m < 120; m++ {
		if m%4 == 0 {
			gaps.Usage = append(gaps.Usage, usage(nodeA, at(0, m), ledger.KindContainer, ctr1, gpuA, edgeSums(m, 0)))
		}
		if m%5 == 0 {
			gaps.ContainerUsage = append(gaps.ContainerUsage, ledger.ContainerUsage{Node: nodeA, Start: at(0, m), ContainerID: ctr1, CPUSeconds: 0.5, RAMByteSeconds: 2048})
		}
	}
	all := append([]ledger.Batch(nil), batches...)
	for _, b := range []ledger.Batch{batches[0], gaps, batches[2], batches[4], batches[0]} {
		write(t, s, b)
		all = append(all, b)

		for _, w := range [][2]time.Time{
			{at(0, 0), at(5, 0)}, {at(0, 17), at(4, 43)}, {at(1, 3), at(1, 59)}, {at(0, 59), at(2, 1)},
			{at(4, 30), at(5, 0)}, {at(-1, 0), at(6, 0)},
		} {
			f := ledger.Filter{From: w[0], To: w[1]}
			checkUsage(t, s, f, bruteUsage(all, w[0], w[1]))
			checkGPUs(t, s, f, bruteGPUs(all, w[0], w[1]))
		}
	}
	// The GPUs the ledger knows, without reading usage.
	known, err := s.KnownGPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff([]ledger.GPU{gpuMetaA, gpuMetaB}, known); diff != "" {
		t.Errorf("KnownGPUs mismatch (-want +got):\n%s", diff)
	}
	// Compacting every hour, the open one too, changes no answer.
	if err := s.CompactMinutes(context.Background(), nodeA, at(5, 0)); err != nil {
		t.Fatal(err)
	}
	for _, w := range [][2]time.Time{{at(0, 0), at(5, 0)}, {at(0, 17), at(4, 43)}, {at(4, 30), at(5, 0)}} {
		f := ledger.Filter{From: w[0], To: w[1]}
		checkUsage(t, s, f, bruteUsage(all, w[0], w[1]))
		checkGPUs(t, s, f, bruteGPUs(all, w[0], w[1]))
	}
	// Minute by minute, the series holds each minute once, its rows added.
	points := readSeries(t, s, ledger.Filter{From: at(1, 0), To: at(2, 0)}, time.Minute)
	seen := map[[3]string]bool{}
	for _, p := range points {
		k := [3]string{p.Start.String(), p.OwnerID, p.GPU.UUID}
		if seen[k] {
			t.Fatalf("Series: minute %v of %s on %s twice", p.Start, p.OwnerID, p.GPU.UUID)
		}
		seen[k] = true
		f := ledger.Filter{From: p.Start, To: p.Start.Add(time.Minute)}
		var want ledger.Sums
		for _, u := range bruteUsage(all, f.From, f.To) {
			if u.OwnerID == p.OwnerID && u.GPU.UUID == p.GPU.UUID {
				want = u.Sums
			}
		}
		if want != p.Sums {
			t.Errorf("Series at %v, %s on %s: %+v, want %+v", p.Start, p.OwnerID, p.GPU.UUID, p.Sums, want)
		}
	}
	if len(points) == 0 {
		t.Fatal("Series of hour 1: no points")
	}

	// The GPUs' minutes and hours, as written and added up.
	for _, step := range []time.Duration{time.Minute, time.Hour} {
		f := ledger.Filter{From: at(0, 30), To: at(4, 30)}
		rows, err := s.GPUUsageSeries(context.Background(), f, step)
		if err != nil {
			t.Fatal(err)
		}
		var want []ledger.GPUUsage
		from, to := plan(f, step)
		for at := from; at.Before(to); at = at.Add(step) {
			for _, g := range bruteGPUs(all, at, at.Add(step)) {
				want = append(want, ledger.GPUUsage{Node: nodeA, Start: at, GPU: g.GPU.UUID, GPUSums: g.GPUSums})
			}
		}
		if diff := gocmp.Diff(want, rows, equateEmpty); diff != "" {
			t.Errorf("GPUUsageSeries(%v) mismatch (-want +got):\n%s", step, diff)
		}
	}
}

// plan is the window a series of step reads for f: whole minutes, or
// every hour it touches.
func plan(f ledger.Filter, step time.Duration) (from, to time.Time) {
	from, to = ledger.Minute(f.From), ledger.Minute(f.To)
	if step == time.Hour {
		from, to = from.Truncate(time.Hour), to.Add(time.Hour-time.Nanosecond).Truncate(time.Hour)
	}
	return from, to
}
