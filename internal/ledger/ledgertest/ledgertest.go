// Package ledgertest is the conformance suite that every ledger.Store
// backend runs, a month-long ledger builder, and benchmarks over both.
package ledgertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Run runs the conformance suite. open returns a new, empty store for one
// subtest and closes it when that subtest ends (t.Cleanup).
func Run(t *testing.T, open func(t *testing.T) ledger.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s ledger.Store)
	}{
		{"Empty", testEmpty},
		{"RoundTrip", testRoundTrip},
		{"AddsTwice", testAddsTwice},
		{"PeaksAreMax", testPeaksAreMax},
		{"SumsPastInt64", testSumsPastInt64},
		{"BatchAcrossBoundaries", testBatchAcrossBoundaries},
		{"WindowEdges", testWindowEdges},
		{"OpenWindow", testOpenWindow},
		{"NodeFilter", testNodeFilter},
		{"Containers", testContainers},
		{"ContainerCPUOnce", testContainerCPUOnce},
		{"UnknownGPU", testUnknownGPU},
		{"Retain", testRetain},
		{"RetainOneNode", testRetainOneNode},
		{"TotalsOneSnapshot", testTotalsSnapshot},
		{"InvalidBatch", testInvalidBatch},
		{"AtomicBatch", testAtomicBatch},
		{"ConcurrentWriters", testConcurrentWriters},
		{"CancelledContext", testCancelledContext},
		{"SeriesEmpty", testSeriesEmpty},
		{"SeriesRoundTrip", testSeriesRoundTrip},
		{"SeriesWindowEdges", testSeriesWindowEdges},
		{"SeriesNodeFilter", testSeriesNodeFilter},
		{"SeriesOrder", testSeriesOrder},
		{"SeriesRetain", testSeriesRetain},
		{"SeriesStep", testSeriesStep},
		{"SeriesCancelledContext", testSeriesCancelledContext},
		{"Audit", testAudit},
		{"AuditRetain", testAuditRetain},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t))
		})
	}
}

// t0 is 08:00 UTC on a Monday; every test writes around it.
var t0 = time.Date(2025, 3, 10, 8, 0, 0, 0, time.UTC)

// at is t0 plus h hours and m minutes.
func at(h, m int) time.Time {
	return t0.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)
}

const (
	nodeA = "node-a"
	nodeB = "node-b"
	gpuA  = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
	gpuB  = "GPU-9f8e7d6c-0000-1111-2222-333344445555"
	ctr1  = "3f4c1a9e2b7d6c5a4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d"
	ctr2  = "8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d3f4c1a9e"
	ctr3  = "0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d3f4c1a9e8a7b6c5d4e3f2a1b"
)

var (
	gpuMetaA = ledger.GPU{Node: nodeA, UUID: gpuA, Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryTotal: 80 << 30}
	gpuMetaB = ledger.GPU{Node: nodeA, UUID: gpuB, Index: 1, Model: "NVIDIA H100 80GB HBM3", MemoryTotal: 80 << 30}
)

func container1() ledger.Container {
	return ledger.Container{
		Node: nodeA, ID: ctr1, Name: "train-seg", Image: "nvcr.io/nvidia/pytorch:24.01-py3",
		Labels: map[string]string{"gpumeter.user": "alice", "gpumeter.team": "vision"},
		User:   "alice", Team: "vision", Project: "segmentation", GPURequest: "device=0,1",
		StartedAt: t0.Add(-time.Hour), FirstSeen: t0.Add(-time.Hour), LastSeen: at(0, 5),
	}
}

func usage(node string, start time.Time, kind, owner, gpu string, s ledger.Sums) ledger.Usage {
	return ledger.Usage{Node: node, Start: start, OwnerKind: kind, OwnerID: owner, GPU: gpu, Sums: s}
}

func write(t *testing.T, s ledger.Store, b ledger.Batch) {
	t.Helper()
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func readUsage(t *testing.T, s ledger.Store, f ledger.Filter) []ledger.UsageTotal {
	t.Helper()
	got, err := s.Usage(context.Background(), f)
	if err != nil {
		t.Fatalf("Usage(%s): %v", fmtFilter(f), err)
	}
	return got
}

func readGPUs(t *testing.T, s ledger.Store, f ledger.Filter) []ledger.GPUTotal {
	t.Helper()
	got, err := s.GPUs(context.Background(), f)
	if err != nil {
		t.Fatalf("GPUs(%s): %v", fmtFilter(f), err)
	}
	return got
}

func fmtFilter(f ledger.Filter) string {
	s := f.From.UTC().Format("15:04:05") + "–" + f.To.UTC().Format("15:04:05")
	if f.Node != "" {
		s += " node " + f.Node
	}
	return s
}

var equateEmpty = cmpopts.EquateEmpty()

func checkUsage(t *testing.T, s ledger.Store, f ledger.Filter, want []ledger.UsageTotal) {
	t.Helper()
	if diff := gocmp.Diff(want, readUsage(t, s, f), equateEmpty); diff != "" {
		t.Errorf("Usage(%s) mismatch (-want +got):\n%s", fmtFilter(f), diff)
	}
}

func checkGPUs(t *testing.T, s ledger.Store, f ledger.Filter, want []ledger.GPUTotal) {
	t.Helper()
	if diff := gocmp.Diff(want, readGPUs(t, s, f), equateEmpty); diff != "" {
		t.Errorf("GPUs(%s) mismatch (-want +got):\n%s", fmtFilter(f), diff)
	}
}

func testEmpty(t *testing.T, s ledger.Store) {
	write(t, s, ledger.Batch{})
	checkUsage(t, s, ledger.Filter{}, nil)
	checkGPUs(t, s, ledger.Filter{}, nil)
	checkUsage(t, s, ledger.Filter{From: t0, To: at(1, 0)}, nil)
}

func testRoundTrip(t *testing.T, s ledger.Store) {
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

func testAddsTwice(t *testing.T, s ledger.Store) {
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

func testPeaksAreMax(t *testing.T, s ledger.Store) {
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
func testSumsPastInt64(t *testing.T, s ledger.Store) {
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

func testBatchAcrossBoundaries(t *testing.T, s ledger.Store) {
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

// edgeOwner is one (owner, GPU) of the window test.
type edgeOwner struct {
	kind, owner, gpu string
}

// edgeData is 300 minutes (08:00–12:59) of usage, with gaps, for two
// owners on two GPUs, plus per-GPU rows and the container's CPU; every
// value is a multiple of 1/4, so float sums are exact.
func edgeData() (ledger.Batch, []ledger.Batch) {
	owners := []edgeOwner{
		{ledger.KindContainer, ctr1, gpuA},
		{ledger.KindContainer, ctr1, gpuB},
		{ledger.KindHost, "alice", gpuB},
	}
	meta := ledger.Batch{
		Nodes:      []ledger.Node{{Name: nodeA, FirstSeen: t0, LastSeen: at(5, 0)}},
		GPUs:       []ledger.GPU{gpuMetaA, gpuMetaB},
		Containers: []ledger.Container{container1()},
	}
	var batches []ledger.Batch
	for h := 0; h < 5; h++ {
		var b ledger.Batch
		for m := h * 60; m < h*60+60; m++ {
			start := at(0, m)
			for i, o := range owners {
				if (m+i)%4 == 0 {
					continue
				}
				b.Usage = append(b.Usage, usage(nodeA, start, o.kind, o.owner, o.gpu, edgeSums(m, i)))
			}
			for i, g := range []string{gpuA, gpuB} {
				b.GPUUsage = append(b.GPUUsage, ledger.GPUUsage{Node: nodeA, Start: start, GPU: g, GPUSums: edgeGPUSums(m, i)})
			}
			if m%5 != 0 {
				b.ContainerUsage = append(b.ContainerUsage, ledger.ContainerUsage{Node: nodeA, Start: start, ContainerID: ctr1,
					CPUSeconds: float64(m%3) + 0.25, RAMByteSeconds: float64(m * 1000)})
			}
		}
		batches = append(batches, b)
	}
	return meta, batches
}

func edgeSums(m, i int) ledger.Sums {
	var held float64 // the host owner (i == 2) holds nothing
	if i < 2 {
		held = float64(m%3)*0.75 + 7.5
	}
	return ledger.Sums{
		AllocatedSeconds:  float64(m%7) + 0.5,
		HeldSeconds:       held,
		PresentSeconds:    float64((m + i) % 11),
		UsedSeconds:       float64(m%5) + 0.25,
		MemoryByteSeconds: float64(m * (i + 1) * 1024),
		EnergyJoules:      float64(m%13) * 1.75,
		PeakMemoryBytes:   uint64((m*37+i*101)%1000) << 20,
		PeakUtil:          float64((m*13+i*7)%100) + 0.25,
	}
}

func edgeGPUSums(m, i int) ledger.GPUSums {
	return ledger.GPUSums{
		Seconds: 60, AllocatedSeconds: float64(m % 60), IdleSeconds: float64(60 - m%60),
		UsedSeconds: float64(m%9) + 0.5, UnattributedSeconds: float64(m%2) * 0.25,
		EnergyJoules: float64(m%17) * 10.5, IdleEnergyJoules: float64(m%3) * 2.25,
		PeakUtil: float64((m*7+i)%100) + 0.5,
	}
}

// bruteUsage computes what Usage must answer over [from, to) from the
// minute rows of edgeData.
func bruteUsage(batches []ledger.Batch, from, to time.Time) []ledger.UsageTotal {
	c1 := container1()
	meta := map[string]ledger.GPU{gpuA: gpuMetaA, gpuB: gpuMetaB}
	type key struct{ kind, owner, gpu string }
	sums := map[key]*ledger.UsageTotal{}
	var cpu, ram float64
	sawCPU := false
	in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	for _, b := range batches {
		for _, u := range b.Usage {
			if !in(u.Start) {
				continue
			}
			k := key{u.OwnerKind, u.OwnerID, u.GPU}
			r := sums[k]
			if r == nil {
				r = &ledger.UsageTotal{Node: u.Node, OwnerKind: u.OwnerKind, OwnerID: u.OwnerID, GPU: meta[u.GPU]}
				if u.OwnerKind == ledger.KindContainer {
					r.Container = &c1
				}
				sums[k] = r
			}
			r.Sums.Add(u.Sums)
		}
		for _, c := range b.ContainerUsage {
			if in(c.Start) {
				cpu += c.CPUSeconds
				ram += c.RAMByteSeconds
				sawCPU = true
			}
		}
	}
	var out []ledger.UsageTotal
	for _, r := range sums {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b ledger.UsageTotal) int {
		return cmp.Or(cmp.Compare(a.OwnerKind, b.OwnerKind), cmp.Compare(a.OwnerID, b.OwnerID), cmp.Compare(a.GPU.UUID, b.GPU.UUID))
	})
	if sawCPU {
		placed := false
		for i := range out {
			if out[i].OwnerKind == ledger.KindContainer && out[i].OwnerID == ctr1 {
				out[i].CPUSeconds, out[i].RAMByteSeconds = cpu, ram
				placed = true
				break
			}
		}
		if !placed {
			out = append(out, ledger.UsageTotal{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, Container: &c1, CPUSeconds: cpu, RAMByteSeconds: ram})
			slices.SortStableFunc(out, func(a, b ledger.UsageTotal) int {
				return cmp.Or(cmp.Compare(a.OwnerKind, b.OwnerKind), cmp.Compare(a.OwnerID, b.OwnerID), cmp.Compare(a.GPU.UUID, b.GPU.UUID))
			})
		}
	}
	return out
}

func bruteGPUs(batches []ledger.Batch, from, to time.Time) []ledger.GPUTotal {
	totals := map[string]*ledger.GPUTotal{}
	for _, b := range batches {
		for _, g := range b.GPUUsage {
			if g.Start.Before(from) || !g.Start.Before(to) {
				continue
			}
			r := totals[g.GPU]
			if r == nil {
				r = &ledger.GPUTotal{GPU: map[string]ledger.GPU{gpuA: gpuMetaA, gpuB: gpuMetaB}[g.GPU]}
				totals[g.GPU] = r
			}
			r.GPUSums.Add(g.GPUSums)
		}
	}
	var out []ledger.GPUTotal
	for _, g := range []string{gpuA, gpuB} {
		if r := totals[g]; r != nil {
			out = append(out, *r)
		}
	}
	return out
}

func testWindowEdges(t *testing.T, s ledger.Store) {
	meta, batches := edgeData()
	write(t, s, meta)
	for _, b := range batches {
		write(t, s, b)
	}
	type window struct{ from, to time.Time }
	windows := []window{
		{at(0, 0), at(5, 0)},   // whole hours only
		{at(0, 17), at(4, 43)}, // minute edges around three whole hours
		{at(0, 17), at(0, 43)}, // inside one hour
		{at(0, 17), at(1, 43)}, // two partial hours, no whole one
		{at(1, 0), at(1, 43)},  // aligned start, partial end
		{at(0, 17), at(2, 0)},  // partial start, aligned end
		{at(-1, 0), at(6, 0)},  // wider than the data
		{at(4, 59), at(5, 0)},  // the last minute
		{at(0, 0), at(0, 1)},   // the first minute
		{at(2, 5), at(2, 6)},   // a minute with no CPU row
		{at(0, 17).Add(30 * time.Second), at(4, 43).Add(10 * time.Second)}, // truncated to minutes
	}
	for from := 0; from < 300; from += 37 {
		for to := from + 1; to <= 300; to += 53 {
			windows = append(windows, window{at(0, from), at(0, to)})
		}
	}
	for _, w := range windows {
		f := ledger.Filter{From: w.from, To: w.to}
		bf, bt := ledger.Minute(w.from), ledger.Minute(w.to)
		checkUsage(t, s, f, bruteUsage(batches, bf, bt))
		checkGPUs(t, s, f, bruteGPUs(batches, bf, bt))
	}
}

func testOpenWindow(t *testing.T, s ledger.Store) {
	meta, batches := edgeData()
	write(t, s, meta)
	for _, b := range batches {
		write(t, s, b)
	}
	all := bruteUsage(batches, at(-100, 0), at(100, 0))
	checkUsage(t, s, ledger.Filter{}, all)
	checkUsage(t, s, ledger.Filter{From: at(0, 0)}, all)
	checkUsage(t, s, ledger.Filter{To: at(5, 0)}, all)
	checkUsage(t, s, ledger.Filter{To: at(2, 30)}, bruteUsage(batches, at(-100, 0), at(2, 30)))
	checkUsage(t, s, ledger.Filter{From: at(2, 30)}, bruteUsage(batches, at(2, 30), at(100, 0)))
	checkGPUs(t, s, ledger.Filter{}, bruteGPUs(batches, at(-100, 0), at(100, 0)))
}

func testNodeFilter(t *testing.T, s ledger.Store) {
	gpuOnB := ledger.GPU{Node: nodeB, UUID: "GPU-bbbb", Index: 0, Model: "NVIDIA A100-SXM4-40GB", MemoryTotal: 40 << 30}
	cB := ledger.Container{Node: nodeB, ID: ctr2, Name: "notebook", Image: "jupyter/base", User: "frank", FirstSeen: t0, LastSeen: t0}
	sums := ledger.Sums{AllocatedSeconds: 60, UsedSeconds: 15}
	write(t, s, ledger.Batch{
		Nodes:      []ledger.Node{{Name: nodeA}, {Name: nodeB}},
		GPUs:       []ledger.GPU{gpuMetaA, gpuOnB},
		Containers: []ledger.Container{cB},
		Usage: []ledger.Usage{
			usage(nodeA, at(0, 0), ledger.KindHost, "alice", gpuA, sums),
			usage(nodeB, at(0, 0), ledger.KindHost, "alice", gpuOnB.UUID, sums),
			usage(nodeB, at(0, 0), ledger.KindContainer, ctr2, gpuOnB.UUID, sums),
		},
		GPUUsage: []ledger.GPUUsage{
			{Node: nodeA, Start: at(0, 0), GPU: gpuA, GPUSums: ledger.GPUSums{Seconds: 60}},
			{Node: nodeB, Start: at(0, 0), GPU: gpuOnB.UUID, GPUSums: ledger.GPUSums{Seconds: 60}},
		},
		ContainerUsage: []ledger.ContainerUsage{
			{Node: nodeA, Start: at(0, 0), ContainerID: ctr1, CPUSeconds: 7},
			{Node: nodeB, Start: at(0, 0), ContainerID: ctr2, CPUSeconds: 9},
		},
	})
	aliceA := ledger.UsageTotal{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "alice", GPU: gpuMetaA, Sums: sums}
	ctrA := ledger.UsageTotal{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, CPUSeconds: 7}
	aliceB := ledger.UsageTotal{Node: nodeB, OwnerKind: ledger.KindHost, OwnerID: "alice", GPU: gpuOnB, Sums: sums}
	ctrB := ledger.UsageTotal{Node: nodeB, OwnerKind: ledger.KindContainer, OwnerID: ctr2, GPU: gpuOnB, Sums: sums, Container: &cB, CPUSeconds: 9}
	for _, w := range []ledger.Filter{{From: at(0, 0), To: at(0, 1)}, {From: t0, To: at(1, 0)}} {
		f := w
		checkUsage(t, s, f, []ledger.UsageTotal{ctrA, aliceA, ctrB, aliceB})
		f.Node = nodeA
		checkUsage(t, s, f, []ledger.UsageTotal{ctrA, aliceA})
		checkGPUs(t, s, f, []ledger.GPUTotal{{GPU: gpuMetaA, GPUSums: ledger.GPUSums{Seconds: 60}}})
		f.Node = nodeB
		checkUsage(t, s, f, []ledger.UsageTotal{ctrB, aliceB})
		checkGPUs(t, s, f, []ledger.GPUTotal{{GPU: gpuOnB, GPUSums: ledger.GPUSums{Seconds: 60}}})
		f.Node = "node-unknown"
		checkUsage(t, s, f, nil)
		checkGPUs(t, s, f, nil)
	}
}

// oddLabels are labels a store must keep byte for byte.
var oddLabels = map[string]string{
	`quote"key`:       `it's "quoted"`,
	`back\slash`:      `C:\path\`,
	"newline":         "line1\nline2\r\n",
	"unicode":         "日本語 ✓ 🚀 é",
	"sql":             `'); DROP TABLE containers; --`,
	"empty":           "",
	"json":            `{"nested": [1, 2, {"x": null}]}`,
	"control\t":       "\x01\x1f\u2028",
	"com.docker.name": "with space and = sign & ampersand?",
}

func testContainers(t *testing.T, s ledger.Store) {
	exit0, exit137 := 0, 137
	running := ledger.Container{
		Node: nodeA, ID: ctr1, Name: "train/odd name", Image: "registry.example.com:5000/team/img@sha256:abc",
		Labels: oddLabels, User: "alice", Team: "vision", Project: "seg", GPURequest: "count=2",
		StartedAt: at(0, 0), FirstSeen: at(0, 0).Add(3 * time.Second), LastSeen: at(0, 5),
	}
	succeeded := ledger.Container{
		Node: nodeA, ID: ctr2, Name: "ok", Image: "busybox", Labels: map[string]string{},
		StartedAt: at(0, 1), FinishedAt: at(0, 3), ExitCode: &exit0, FirstSeen: at(0, 1), LastSeen: at(0, 3),
	}
	killed := ledger.Container{
		Node: nodeA, ID: ctr3, Name: "oom", Image: "busybox", User: "bob",
		StartedAt: at(0, 1), FinishedAt: at(0, 4), ExitCode: &exit137, FirstSeen: at(0, 1), LastSeen: at(0, 4),
	}
	cpu := func(id string) ledger.ContainerUsage {
		return ledger.ContainerUsage{Node: nodeA, Start: at(0, 2), ContainerID: id, CPUSeconds: 1}
	}
	write(t, s, ledger.Batch{
		Containers:     []ledger.Container{running, succeeded, killed},
		ContainerUsage: []ledger.ContainerUsage{cpu(ctr1), cpu(ctr2), cpu(ctr3)},
	})
	f := ledger.Filter{From: t0, To: at(1, 0)}
	row := func(c ledger.Container) ledger.UsageTotal {
		return ledger.UsageTotal{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: c.ID, Container: &c, CPUSeconds: 1}
	}
	// By container ID: ctr3, ctr1, ctr2.
	checkUsage(t, s, f, []ledger.UsageTotal{row(killed), row(running), row(succeeded)})
	got := readUsage(t, s, f)
	for _, r := range got {
		if r.OwnerID == ctr1 && r.Container.ExitCode != nil {
			t.Errorf("running container: ExitCode = %d, want nil", *r.Container.ExitCode)
		}
		if r.OwnerID == ctr2 && (r.Container.ExitCode == nil || *r.Container.ExitCode != 0) {
			t.Errorf("succeeded container: ExitCode = %v, want 0", r.Container.ExitCode)
		}
	}

	// Seen again, finished: what moves on is replaced, the first sighting
	// and a start time the later record lacks are kept.
	finished := running
	finished.Labels = map[string]string{"gpumeter.user": "alice2"}
	finished.User = "alice2"
	finished.StartedAt = time.Time{}
	finished.FirstSeen = at(0, 9)
	finished.LastSeen = at(0, 10)
	finished.FinishedAt = at(0, 10)
	finished.ExitCode = &exit0
	write(t, s, ledger.Batch{Containers: []ledger.Container{finished}})
	want := finished
	want.StartedAt = running.StartedAt
	want.FirstSeen = running.FirstSeen
	checkUsage(t, s, f, []ledger.UsageTotal{row(killed), row(want), row(succeeded)})

	// A late record of an earlier sighting does not move LastSeen back.
	late := finished
	late.LastSeen = at(0, 6)
	write(t, s, ledger.Batch{Containers: []ledger.Container{late}})
	checkUsage(t, s, f, []ledger.UsageTotal{row(killed), row(want), row(succeeded)})
}

func testContainerCPUOnce(t *testing.T, s ledger.Store) {
	c1 := container1()
	sums := ledger.Sums{AllocatedSeconds: 60, UsedSeconds: 30}
	write(t, s, ledger.Batch{
		GPUs:       []ledger.GPU{gpuMetaA, gpuMetaB},
		Containers: []ledger.Container{c1},
		Usage: []ledger.Usage{
			// gpuB listed first: the CPU must still land on gpuA's row.
			usage(nodeA, at(0, 0), ledger.KindContainer, ctr1, gpuB, sums),
			usage(nodeA, at(0, 0), ledger.KindContainer, ctr1, gpuA, sums),
			usage(nodeA, at(0, 0), ledger.KindHost, "root", gpuA, sums),
		},
		ContainerUsage: []ledger.ContainerUsage{
			{Node: nodeA, Start: at(0, 0), ContainerID: ctr1, CPUSeconds: 100, RAMByteSeconds: 1 << 40},
			{Node: nodeA, Start: at(0, 1), ContainerID: ctr1, CPUSeconds: 20, RAMByteSeconds: 1 << 30},
			// A container that never touched a GPU.
			{Node: nodeA, Start: at(0, 0), ContainerID: ctr2, CPUSeconds: 5, RAMByteSeconds: 10},
		},
	})
	f := ledger.Filter{From: t0, To: at(1, 0)}
	checkUsage(t, s, f, []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, GPU: gpuMetaA, Sums: sums, Container: &c1, CPUSeconds: 120, RAMByteSeconds: 1<<40 + 1<<30},
		{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, GPU: gpuMetaB, Sums: sums, Container: &c1},
		{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr2, CPUSeconds: 5, RAMByteSeconds: 10},
		{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "root", GPU: gpuMetaA, Sums: sums},
	})
	// In a window where the container has CPU but no GPU rows, it still
	// appears, once.
	checkUsage(t, s, ledger.Filter{From: at(0, 1), To: at(0, 2)}, []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, Container: &c1, CPUSeconds: 20, RAMByteSeconds: 1 << 30},
	})
	var cpu float64
	n := 0
	for _, r := range readUsage(t, s, f) {
		cpu += r.CPUSeconds
		if r.CPUSeconds != 0 {
			n++
		}
	}
	if cpu != 125 || n != 2 {
		t.Errorf("CPU over rows = %v on %d rows, want 125 on 2", cpu, n)
	}
}

func testUnknownGPU(t *testing.T, s ledger.Store) {
	sums := ledger.Sums{UsedSeconds: 3}
	write(t, s, ledger.Batch{Usage: []ledger.Usage{usage(nodeA, at(0, 0), ledger.KindHost, "gina", gpuA, sums)}})
	f := ledger.Filter{From: t0, To: at(1, 0)}
	checkUsage(t, s, f, []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "gina", GPU: ledger.GPU{Node: nodeA, UUID: gpuA, Index: -1}, Sums: sums},
	})
	write(t, s, ledger.Batch{GPUs: []ledger.GPU{gpuMetaA}})
	checkUsage(t, s, f, []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "gina", GPU: gpuMetaA, Sums: sums},
	})
	// A GPU described again with new facts is updated.
	moved := gpuMetaA
	moved.Index, moved.Model = 3, "NVIDIA H200"
	write(t, s, ledger.Batch{GPUs: []ledger.GPU{moved}})
	checkUsage(t, s, f, []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "gina", GPU: moved, Sums: sums},
	})
}

func testRetain(t *testing.T, s ledger.Store) {
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

func testInvalidBatch(t *testing.T, s ledger.Store) {
	ok := usage(nodeA, at(0, 0), ledger.KindHost, "ivan", gpuA, ledger.Sums{UsedSeconds: 1})
	bad := func(mod func(*ledger.Usage)) ledger.Batch {
		u := ok
		mod(&u)
		return ledger.Batch{Usage: []ledger.Usage{ok, u}}
	}
	for _, tc := range []struct {
		name string
		b    ledger.Batch
		want string
	}{
		{"NaN", bad(func(u *ledger.Usage) { u.UsedSeconds = math.NaN() }), "UsedSeconds is NaN"},
		{"Inf", bad(func(u *ledger.Usage) { u.EnergyJoules = math.Inf(1) }), "EnergyJoules is +Inf"},
		{"HeldNaN", bad(func(u *ledger.Usage) { u.HeldSeconds = math.NaN() }), "HeldSeconds is NaN"},
		{"HeldHuge", bad(func(u *ledger.Usage) { u.HeldSeconds = -1e300 }), "HeldSeconds -1e+300 is out of range"},
		{"HugeValue", bad(func(u *ledger.Usage) { u.AllocatedSeconds = 1e300 }), "out of range"},
		{"HugePeak", bad(func(u *ledger.Usage) { u.PeakMemoryBytes = math.MaxUint64 }), "out of range"},
		{"NoNode", bad(func(u *ledger.Usage) { u.Node = "" }), "empty key"},
		{"NoGPU", bad(func(u *ledger.Usage) { u.GPU = "" }), "empty key"},
		{"NoStart", bad(func(u *ledger.Usage) { u.Start = time.Time{} }), "zero Start"},
		{"UnknownKind", bad(func(u *ledger.Usage) { u.OwnerKind = "pod" }), `unknown owner kind "pod"`},
		{"NoneWithID", bad(func(u *ledger.Usage) { u.OwnerKind = ledger.KindNone }), "takes no owner ID"},
		{"HostWithoutID", bad(func(u *ledger.Usage) { u.OwnerID = "" }), "needs an owner ID"},
		{"BadUTF8", bad(func(u *ledger.Usage) { u.OwnerID = "bad\xff" }), "not valid UTF-8"},
		{"NUL", bad(func(u *ledger.Usage) { u.OwnerID = "a\x00b" }), "NUL"},
		{"GPUUsageNaN", ledger.Batch{GPUUsage: []ledger.GPUUsage{{Node: nodeA, Start: t0, GPU: gpuA, GPUSums: ledger.GPUSums{IdleEnergyJoules: math.NaN()}}}}, "IdleEnergyJoules is NaN"},
		{"ContainerUsageNaN", ledger.Batch{ContainerUsage: []ledger.ContainerUsage{{Node: nodeA, Start: t0, ContainerID: ctr1, RAMByteSeconds: math.NaN()}}}, "RAMByteSeconds is NaN"},
		{"LabelNUL", ledger.Batch{Containers: []ledger.Container{{Node: nodeA, ID: ctr1, Labels: map[string]string{"k": "v\x00"}}}}, "NUL"},
		{"ContainerNoID", ledger.Batch{Containers: []ledger.Container{{Node: nodeA}}}, "empty key"},
		{"GPUNoUUID", ledger.Batch{GPUs: []ledger.GPU{{Node: nodeA}}}, "empty key"},
		{"NodeNoName", ledger.Batch{Nodes: []ledger.Node{{}}}, "empty key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Write(context.Background(), tc.b)
			if !errors.Is(err, ledger.ErrInvalidBatch) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Write = %v, want an error wrapping ledger.ErrInvalidBatch that says %q", err, tc.want)
			}
		})
	}
	// What may be empty is accepted.
	write(t, s, ledger.Batch{
		GPUs:       []ledger.GPU{{Node: nodeA, UUID: gpuA}},
		Containers: []ledger.Container{{Node: nodeA, ID: ctr1}},
	})
	checkUsage(t, s, ledger.Filter{}, nil)
}

func testAtomicBatch(t *testing.T, s ledger.Store) {
	first := usage(nodeA, at(0, 0), ledger.KindHost, "judy", gpuA, ledger.Sums{UsedSeconds: 5})
	write(t, s, ledger.Batch{GPUs: []ledger.GPU{gpuMetaA}, Usage: []ledger.Usage{first}})

	// Good rows of every kind, new nodes, GPUs and containers, then one bad
	// value at the very end.
	gpuNew := ledger.GPU{Node: nodeB, UUID: "GPU-new", Index: 0, Model: "X"}
	b := ledger.Batch{
		Nodes:      []ledger.Node{{Name: nodeB, FirstSeen: t0, LastSeen: t0}},
		GPUs:       []ledger.GPU{gpuNew},
		Containers: []ledger.Container{{Node: nodeB, ID: ctr2, Name: "new"}},
		Usage: []ledger.Usage{
			usage(nodeA, at(0, 0), ledger.KindHost, "judy", gpuA, ledger.Sums{UsedSeconds: 7}),
			usage(nodeB, at(0, 0), ledger.KindContainer, ctr2, "GPU-new", ledger.Sums{UsedSeconds: 7}),
		},
		GPUUsage:       []ledger.GPUUsage{{Node: nodeB, Start: at(0, 0), GPU: "GPU-new", GPUSums: ledger.GPUSums{Seconds: 60}}},
		ContainerUsage: []ledger.ContainerUsage{{Node: nodeB, Start: at(0, 0), ContainerID: ctr2, CPUSeconds: 1}, {Node: nodeB, Start: at(0, 1), ContainerID: ctr2, CPUSeconds: math.NaN()}},
	}
	err := s.Write(context.Background(), b)
	if !errors.Is(err, ledger.ErrInvalidBatch) || !strings.Contains(err.Error(), "CPUSeconds is NaN") {
		t.Fatalf("Write with a NaN = %v, want an error wrapping ledger.ErrInvalidBatch naming CPUSeconds", err)
	}
	want := []ledger.UsageTotal{{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "judy", GPU: gpuMetaA, Sums: ledger.Sums{UsedSeconds: 5}}}
	checkUsage(t, s, ledger.Filter{}, want)
	checkUsage(t, s, ledger.Filter{From: at(0, 0), To: at(0, 1)}, want)
	checkGPUs(t, s, ledger.Filter{}, nil)

	// The same batch without the bad row goes in whole; the failed one
	// left no GPU or container behind that would change the answer.
	b.ContainerUsage = b.ContainerUsage[:1]
	write(t, s, b)
	checkUsage(t, s, ledger.Filter{}, []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "judy", GPU: gpuMetaA, Sums: ledger.Sums{UsedSeconds: 12}},
		{Node: nodeB, OwnerKind: ledger.KindContainer, OwnerID: ctr2, GPU: gpuNew, Sums: ledger.Sums{UsedSeconds: 7},
			Container: &b.Containers[0], CPUSeconds: 1},
	})
}

func testConcurrentWriters(t *testing.T, s ledger.Store) {
	const writers, batches = 8, 200
	c1 := container1()
	batch := func(w, i int) ledger.Batch {
		sums := ledger.Sums{AllocatedSeconds: 1, PresentSeconds: 0.5, UsedSeconds: 0.25, MemoryByteSeconds: 1000, EnergyJoules: 2.5,
			PeakMemoryBytes: uint64(w*1000 + i), PeakUtil: float64(i % 100)}
		b := ledger.Batch{
			// Every writer also rewrites the same node, GPUs and container.
			Nodes:      []ledger.Node{{Name: nodeA, FirstSeen: t0, LastSeen: at(0, 59)}},
			GPUs:       []ledger.GPU{gpuMetaA, gpuMetaB},
			Containers: []ledger.Container{c1},
		}
		// The same keys on both sides of an hour boundary, in an order
		// that differs between writers.
		starts := []time.Time{at(0, 59), at(1, 0)}
		gpus := []string{gpuA, gpuB}
		if w%2 == 1 {
			starts[0], starts[1] = starts[1], starts[0]
			gpus[0], gpus[1] = gpus[1], gpus[0]
		}
		for _, st := range starts {
			for _, g := range gpus {
				b.Usage = append(b.Usage, usage(nodeA, st, ledger.KindContainer, ctr1, g, sums))
				b.GPUUsage = append(b.GPUUsage, ledger.GPUUsage{Node: nodeA, Start: st, GPU: g, GPUSums: ledger.GPUSums{Seconds: 1, EnergyJoules: 0.5, PeakUtil: float64(w)}})
			}
			b.ContainerUsage = append(b.ContainerUsage, ledger.ContainerUsage{Node: nodeA, Start: st, ContainerID: ctr1, CPUSeconds: 0.5, RAMByteSeconds: 3})
		}
		return b
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range batches {
				if err := s.Write(context.Background(), batch(w, i)); err != nil {
					errs <- fmt.Errorf("writer %d batch %d: %w", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const n = writers * batches
	for _, tc := range []struct {
		f       ledger.Filter
		minutes float64
	}{
		{ledger.Filter{From: at(0, 59), To: at(1, 0)}, 1},
		{ledger.Filter{From: at(1, 0), To: at(1, 1)}, 1},
		{ledger.Filter{From: at(0, 59), To: at(1, 1)}, 2},
		{ledger.Filter{From: at(0, 0), To: at(2, 0)}, 2},
		{ledger.Filter{From: at(0, 30), To: at(1, 30)}, 2},
	} {
		m := tc.minutes
		sums := ledger.Sums{AllocatedSeconds: n * m, PresentSeconds: n * m * 0.5, UsedSeconds: n * m * 0.25, MemoryByteSeconds: n * m * 1000,
			EnergyJoules: n * m * 2.5, PeakMemoryBytes: (writers-1)*1000 + batches - 1, PeakUtil: 99}
		checkUsage(t, s, tc.f, []ledger.UsageTotal{
			{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, GPU: gpuMetaA, Sums: sums, Container: &c1, CPUSeconds: n * m * 0.5, RAMByteSeconds: n * m * 3},
			{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, GPU: gpuMetaB, Sums: sums, Container: &c1},
		})
		gs := ledger.GPUSums{Seconds: n * m, EnergyJoules: n * m * 0.5, PeakUtil: writers - 1}
		checkGPUs(t, s, tc.f, []ledger.GPUTotal{{GPU: gpuMetaA, GPUSums: gs}, {GPU: gpuMetaB, GPUSums: gs}})
	}
}

func testCancelledContext(t *testing.T, s ledger.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Write(ctx, ledger.Batch{
		GPUs:  []ledger.GPU{gpuMetaA},
		Usage: []ledger.Usage{usage(nodeA, at(0, 0), ledger.KindHost, "kim", gpuA, ledger.Sums{UsedSeconds: 1})},
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Write with a cancelled context = %v, want context.Canceled", err)
	}
	checkUsage(t, s, ledger.Filter{}, nil)
	checkGPUs(t, s, ledger.Filter{}, nil)
	if _, err := s.Usage(ctx, ledger.Filter{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Usage with a cancelled context = %v, want context.Canceled", err)
	}
}
