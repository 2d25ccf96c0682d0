// Round trips and sums: what a batch writes comes back, rows of one key add
// up (past what an int64 holds), peaks are maxima, and minutes and hours
// split where they should.

package ledgertest

import (
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

func testEmpty(t *testing.T, s ledger.Ledger) {
	write(t, s, ledger.Batch{})
	checkUsage(t, s, ledger.Filter{}, nil)
	checkGPUs(t, s, ledger.Filter{}, nil)
	checkUsage(t, s, ledger.Filter{From: t0, To: at(1, 0)}, nil)
}

func testRoundTrip(t *testing.T, s ledger.Ledger) {
	c1 := container1()
	write(t, s, ledger.Batch{
		Nodes:      []ledger.Node{{Name: nodeA, FirstSeen: t0, LastSeen: at(0, 5)}},
		GPUs:       []ledger.GPU{gpuMetaA, gpuMetaB},
		Containers: []ledger.Container{c1},
		Usage: []ledger.Usage{
			usage(nodeA, at(0, 0), ledger.KindContainer, ctr1, gpuA, ledger.Sums{AllocatedSeconds: 60, HeldSeconds: 60.000001, PresentSeconds: 60, UsedSeconds: 30.25, MemoryByteSeconds: 1.5e12, EnergyJoules: 4500.5, PeakMemoryBytes: 40 << 30, PeakUtil: 97.5}),
			usage(nodeA, at(0, 1), ledger.KindContainer, ctr1, gpuA, ledger.Sums{AllocatedSeconds: 60, HeldSeconds: 120.5, PresentSeconds: 60, UsedSeconds: 20, MemoryByteSeconds: 1e12, EnergyJoules: 3000.25, PeakMemoryBytes: 41 << 30, PeakUtil: 90}),
			usage(nodeA, at(0, 0), ledger.KindHost, "bob", gpuB, ledger.Sums{PresentSeconds: 45, UsedSeconds: 10.125, MemoryByteSeconds: 1e9, EnergyJoules: 100, PeakMemoryBytes: 1 << 30, PeakUtil: 12.5}),
			usage(nodeA, at(0, 0), ledger.KindNone, "", gpuB, ledger.Sums{EnergyJoules: 0.001}),
		},
		GPUUsage: []ledger.GPUUsage{
			{Node: nodeA, Start: at(0, 0), GPU: gpuA, GPUSums: ledger.GPUSums{Seconds: 60, AllocatedSeconds: 60, UsedSeconds: 30.25, EnergyJoules: 4500.5, PeakUtil: 97.5}},
			{Node: nodeA, Start: at(0, 1), GPU: gpuA, GPUSums: ledger.GPUSums{Seconds: 60, AllocatedSeconds: 60, UsedSeconds: 20, EnergyJoules: 3000.25, PeakUtil: 90}},
			{Node: nodeA, Start: at(0, 0), GPU: gpuB, GPUSums: ledger.GPUSums{Seconds: 60, IdleSeconds: 60, UsedSeconds: 10.125, UnattributedSeconds: 0.000001, EnergyJoules: 100.001, IdleEnergyJoules: 0.001, PeakUtil: 12.5}},
		},
		ContainerUsage: []ledger.ContainerUsage{
			{Node: nodeA, Start: at(0, 0), ContainerID: ctr1, CPUSeconds: 90.5, RAMByteSeconds: 6e11},
			{Node: nodeA, Start: at(0, 1), ContainerID: ctr1, CPUSeconds: 60, RAMByteSeconds: 5e11},
		},
	})

	want := []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, GPU: gpuMetaA,
			Sums:      ledger.Sums{AllocatedSeconds: 120, HeldSeconds: 180.500001, PresentSeconds: 120, UsedSeconds: 50.25, MemoryByteSeconds: 2.5e12, EnergyJoules: 7500.75, PeakMemoryBytes: 41 << 30, PeakUtil: 97.5},
			Container: &c1, CPUSeconds: 150.5, RAMByteSeconds: 1.1e12},
		{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "bob", GPU: gpuMetaB,
			Sums: ledger.Sums{PresentSeconds: 45, UsedSeconds: 10.125, MemoryByteSeconds: 1e9, EnergyJoules: 100, PeakMemoryBytes: 1 << 30, PeakUtil: 12.5}},
		{Node: nodeA, OwnerKind: ledger.KindNone, GPU: gpuMetaB, Sums: ledger.Sums{EnergyJoules: 0.001}},
	}
	wantGPUs := []ledger.GPUTotal{
		{GPU: gpuMetaA, GPUSums: ledger.GPUSums{Seconds: 120, AllocatedSeconds: 120, UsedSeconds: 50.25, EnergyJoules: 7500.75, PeakUtil: 97.5}},
		{GPU: gpuMetaB, GPUSums: ledger.GPUSums{Seconds: 60, IdleSeconds: 60, UsedSeconds: 10.125, UnattributedSeconds: 0.000001, EnergyJoules: 100.001, IdleEnergyJoules: 0.001, PeakUtil: 12.5}},
	}
	// A whole hour (hour rows), the same hour from minute rows, and all.
	for _, f := range []ledger.Filter{
		{From: t0, To: at(1, 0)},
		{From: at(0, 0), To: at(0, 59)},
		{From: at(-1, 30), To: at(1, 30)},
		{},
	} {
		checkUsage(t, s, f, want)
		checkGPUs(t, s, f, wantGPUs)
	}

	// The first minute alone.
	checkUsage(t, s, ledger.Filter{From: at(0, 0), To: at(0, 1)}, []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, GPU: gpuMetaA,
			Sums:      ledger.Sums{AllocatedSeconds: 60, HeldSeconds: 60.000001, PresentSeconds: 60, UsedSeconds: 30.25, MemoryByteSeconds: 1.5e12, EnergyJoules: 4500.5, PeakMemoryBytes: 40 << 30, PeakUtil: 97.5},
			Container: &c1, CPUSeconds: 90.5, RAMByteSeconds: 6e11},
		want[1], want[2],
	})
	// Nothing before or after.
	checkUsage(t, s, ledger.Filter{From: at(-2, 0), To: at(0, 0)}, nil)
	checkUsage(t, s, ledger.Filter{From: at(0, 2), To: at(3, 0)}, nil)
	checkGPUs(t, s, ledger.Filter{From: at(0, 2), To: at(3, 0)}, nil)
	// An empty or inverted window.
	checkUsage(t, s, ledger.Filter{From: at(0, 0), To: at(0, 0)}, nil)
	checkUsage(t, s, ledger.Filter{From: at(1, 0), To: at(0, 0)}, nil)
}

func testAddsTwice(t *testing.T, s ledger.Ledger) {
	sums := ledger.Sums{AllocatedSeconds: 30, HeldSeconds: 45.25, PresentSeconds: 20.5, UsedSeconds: 10.25, MemoryByteSeconds: 1000, EnergyJoules: 1.5, PeakMemoryBytes: 100, PeakUtil: 50}
	b := ledger.Batch{
		GPUs: []ledger.GPU{gpuMetaA},
		Usage: []ledger.Usage{
			usage(nodeA, at(0, 10), ledger.KindHost, "carol", gpuA, sums),
			// The same key twice in one batch adds as well, and a start
			// inside the minute counts for that minute.
			usage(nodeA, at(0, 10).Add(30*time.Second), ledger.KindHost, "carol", gpuA, sums),
		},
		GPUUsage:       []ledger.GPUUsage{{Node: nodeA, Start: at(0, 10), GPU: gpuA, GPUSums: ledger.GPUSums{Seconds: 60, UsedSeconds: 10.25, EnergyJoules: 1.5, PeakUtil: 50}}},
		ContainerUsage: []ledger.ContainerUsage{{Node: nodeA, Start: at(0, 10), ContainerID: ctr1, CPUSeconds: 1.25, RAMByteSeconds: 64}},
	}
	write(t, s, b)
	write(t, s, b)
	want4 := ledger.Sums{AllocatedSeconds: 120, HeldSeconds: 181, PresentSeconds: 82, UsedSeconds: 41, MemoryByteSeconds: 4000, EnergyJoules: 6, PeakMemoryBytes: 100, PeakUtil: 50}
	for _, f := range []ledger.Filter{{From: at(0, 10), To: at(0, 11)}, {From: t0, To: at(1, 0)}} {
		checkUsage(t, s, f, []ledger.UsageTotal{
			{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, CPUSeconds: 2.5, RAMByteSeconds: 128},
			{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "carol", GPU: gpuMetaA, Sums: want4},
		})
		checkGPUs(t, s, f, []ledger.GPUTotal{{GPU: gpuMetaA, GPUSums: ledger.GPUSums{Seconds: 120, UsedSeconds: 20.5, EnergyJoules: 3, PeakUtil: 50}}})
	}
}

func testPeaksAreMax(t *testing.T, s ledger.Ledger) {
	for _, p := range []struct {
		mem  uint64
		util float64
	}{{5 << 30, 20}, {9 << 30, 10}, {7 << 30, 95.25}, {1, 0}} {
		write(t, s, ledger.Batch{
			GPUs:     []ledger.GPU{gpuMetaA},
			Usage:    []ledger.Usage{usage(nodeA, at(0, 30), ledger.KindHost, "dave", gpuA, ledger.Sums{UsedSeconds: 1, PeakMemoryBytes: p.mem, PeakUtil: p.util})},
			GPUUsage: []ledger.GPUUsage{{Node: nodeA, Start: at(0, 30), GPU: gpuA, GPUSums: ledger.GPUSums{Seconds: 1, PeakUtil: p.util}}},
		})
	}
	for _, f := range []ledger.Filter{{From: at(0, 30), To: at(0, 31)}, {From: t0, To: at(1, 0)}} {
		checkUsage(t, s, f, []ledger.UsageTotal{
			{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "dave", GPU: gpuMetaA, Sums: ledger.Sums{UsedSeconds: 4, PeakMemoryBytes: 9 << 30, PeakUtil: 95.25}},
		})
		checkGPUs(t, s, f, []ledger.GPUTotal{{GPU: gpuMetaA, GPUSums: ledger.GPUSums{Seconds: 4, PeakUtil: 95.25}}})
	}
}

// testSumsPastInt64: byte-seconds over a long window add up to more than
// an int64 holds, which every figure of a row does not.
func testSumsPastInt64(t *testing.T, s ledger.Ledger) {
	// A container that held 1 TiB of RAM (and as much GPU memory) for 120
	// days, booked an hour at a time, plus a few byte-seconds more.
	const hours = 120 * 24
	const perHour = 3600 << 40
	b := ledger.Batch{GPUs: []ledger.GPU{gpuMetaA}}
	for h := range hours {
		start := at(h, 0)
		b.Usage = append(b.Usage, usage(nodeA, start, ledger.KindContainer, ctr1, gpuA, ledger.Sums{AllocatedSeconds: 3600, MemoryByteSeconds: perHour}))
		b.ContainerUsage = append(b.ContainerUsage, ledger.ContainerUsage{Node: nodeA, Start: start, ContainerID: ctr1, CPUSeconds: 3600, RAMByteSeconds: perHour})
	}
	b.Usage = append(b.Usage, usage(nodeA, at(0, 7), ledger.KindContainer, ctr1, gpuA, ledger.Sums{MemoryByteSeconds: 12345}))
	b.ContainerUsage = append(b.ContainerUsage, ledger.ContainerUsage{Node: nodeA, Start: at(0, 7), ContainerID: ctr1, RAMByteSeconds: 12345})
	write(t, s, b)
	const total = hours*perHour + 12345 // past math.MaxInt64
	checkUsage(t, s, ledger.Filter{From: t0, To: at(hours, 0)}, []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, GPU: gpuMetaA,
			Sums:       ledger.Sums{AllocatedSeconds: hours * 3600, MemoryByteSeconds: total},
			CPUSeconds: hours * 3600, RAMByteSeconds: total},
	})
}

func testBatchAcrossBoundaries(t *testing.T, s ledger.Ledger) {
	row := func(start time.Time, used float64) ledger.Usage {
		return usage(nodeA, start, ledger.KindHost, "erin", gpuA, ledger.Sums{UsedSeconds: used, PeakUtil: used})
	}
	// 08:58:30 and 08:59:59 fall in minute 08:59; 09:00 opens a new minute
	// and a new hour.
	write(t, s, ledger.Batch{
		GPUs: []ledger.GPU{gpuMetaA},
		Usage: []ledger.Usage{
			row(at(0, 58).Add(30*time.Second), 1),
			row(at(0, 59).Add(59*time.Second), 2),
			row(at(1, 0), 4),
			row(at(1, 1), 8),
		},
	})
	for _, tc := range []struct {
		f    ledger.Filter
		used float64
		peak float64
	}{
		{ledger.Filter{From: at(0, 58), To: at(0, 59)}, 1, 1},
		{ledger.Filter{From: at(0, 59), To: at(1, 0)}, 2, 2},
		{ledger.Filter{From: at(1, 0), To: at(1, 1)}, 4, 4},
		{ledger.Filter{From: at(0, 0), To: at(1, 0)}, 3, 2},
		{ledger.Filter{From: at(1, 0), To: at(2, 0)}, 12, 8},
		{ledger.Filter{From: at(0, 59), To: at(1, 1)}, 6, 4},
		{ledger.Filter{From: at(0, 0), To: at(2, 0)}, 15, 8},
		{ledger.Filter{From: at(0, 30), To: at(1, 30)}, 15, 8},
	} {
		checkUsage(t, s, tc.f, []ledger.UsageTotal{
			{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "erin", GPU: gpuMetaA, Sums: ledger.Sums{UsedSeconds: tc.used, PeakUtil: tc.peak}},
		})
	}
}
