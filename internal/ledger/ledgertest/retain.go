// Retention: minute rows and hour rows each go past their horizon, and
// hour rows stand in for the minutes that went.

package ledgertest

import (
	"context"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

func testRetain(t *testing.T, s ledger.Ledger) {
	// One second of use per minute from 08:00 to 17:59.
	for h := 0; h < 10; h++ {
		var b ledger.Batch
		for m := 0; m < 60; m++ {
			b.Usage = append(b.Usage, usage(nodeA, at(h, m), ledger.KindHost, "hank", gpuA, ledger.Sums{UsedSeconds: 1}))
			b.GPUUsage = append(b.GPUUsage, ledger.GPUUsage{Node: nodeA, Start: at(h, m), GPU: gpuA, GPUSums: ledger.GPUSums{Seconds: 1}})
			b.ContainerUsage = append(b.ContainerUsage, ledger.ContainerUsage{Node: nodeA, Start: at(h, m), ContainerID: ctr1, CPUSeconds: 1})
		}
		b.GPUs = []ledger.GPU{gpuMetaA}
		write(t, s, b)
	}
	used := func(f ledger.Filter) (usedSec, gpuSec, cpuSec float64) {
		t.Helper()
		for _, r := range readUsage(t, s, f) {
			usedSec += r.UsedSeconds
			cpuSec += r.CPUSeconds
		}
		for _, g := range readGPUs(t, s, f) {
			gpuSec += g.Seconds
		}
		return usedSec, gpuSec, cpuSec
	}
	check := func(from, to time.Time, want float64) {
		t.Helper()
		f := ledger.Filter{From: from, To: to}
		u, g, c := used(f)
		if u != want || g != want || c != want {
			t.Errorf("after Retain, %s: used %v, GPU %v, CPU %v seconds; want %v each", fmtFilter(f), u, g, c, want)
		}
	}
	check(at(0, 0), at(10, 0), 600)

	// now is 18:17: minute rows before 15:00 and hour rows before 12:00 go.
	now := at(10, 17)
	ctx := context.Background()
	if err := s.Retain(ctx, "", now, 3*time.Hour+17*time.Minute, 6*time.Hour); err != nil {
		t.Fatalf("Retain: %v", err)
	}
	check(at(0, 0), at(10, 0), 360)  // hours 12–17
	check(at(7, 10), at(7, 20), 10)  // minute rows kept
	check(at(7, 0), at(7, 1), 1)     // the first kept minute
	check(at(6, 10), at(6, 20), 60)  // minutes gone: the hour row stands in
	check(at(6, 10), at(7, 20), 80)  // hour 14 whole plus 15:00–15:20
	check(at(6, 59), at(7, 1), 61)   //
	check(at(3, 10), at(3, 20), 0)   // 11:00: both gone
	check(at(4, 0), at(5, 0), 60)    // 12:00, the first kept hour
	check(at(-5, 0), at(20, 0), 360) // everything left
	check(at(9, 30), at(10, 30), 30) // recent minutes untouched
	check(at(3, 30), at(4, 30), 60)  // 11:00 gone, 12:00 whole
	check(at(9, 59), at(10, 0), 1)   // the last minute
	check(at(10, 0), at(11, 0), 0)   // after the data
	check(time.Time{}, time.Time{}, 360)

	// Zero durations keep everything; an earlier now does not bring back
	// or move the horizon.
	if err := s.Retain(ctx, "", now, 0, 0); err != nil {
		t.Fatalf("Retain(0, 0): %v", err)
	}
	if err := s.Retain(ctx, "", now.Add(-5*time.Hour), 3*time.Hour, 6*time.Hour); err != nil {
		t.Fatalf("Retain(earlier): %v", err)
	}
	check(at(6, 10), at(6, 20), 60)
	check(at(7, 10), at(7, 20), 10)
	check(at(0, 0), at(10, 0), 360)
}
