// Package ledgertest is the conformance suite that every ledger.Ledger
// backend runs, a month-long ledger builder, and benchmarks over both.
package ledgertest

import (
	"context"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Run runs the conformance suite. open returns a new, empty store for one
// subtest and closes it when that subtest ends (t.Cleanup).
func Run(t *testing.T, open func(t *testing.T) ledger.Ledger) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s ledger.Ledger)
	}{
		{"Empty", testEmpty},
		{"RoundTrip", testRoundTrip},
		{"AddsTwice", testAddsTwice},
		{"PeaksAreMax", testPeaksAreMax},
		{"SumsPastInt64", testSumsPastInt64},
		{"BatchAcrossBoundaries", testBatchAcrossBoundaries},
		{"WindowEdges", testWindowEdges},
		{"LateMinutes", testLateMinutes},
		{"DayRows", testDayRows},
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
		{"JobSubmit", testJobSubmit},
		{"JobSubmitAtomic", testJobSubmitAtomic},
		{"JobSequenceFloor", testJobSequenceFloor},
		{"JobCAS", testJobCAS},
		{"JobHeld", testJobHeld},
		{"JobFilters", testJobFilters},
		{"JobEnvKeys", testJobEnvKeys},
		{"JobConcurrentSubmits", testJobConcurrentSubmits},
		{"JobSubmitTogether", testJobSubmitTogether},
		{"JobConcurrentStarts", testJobConcurrentStarts},
		{"JobPlacement", testJobPlacement},
		{"JobCancelBulk", testJobCancelBulk},
		{"JobCancelBulkMany", testJobCancelBulkMany},
		{"JobPages", testJobPages},
		{"JobArray", testJobArray},
		{"JobArrayAtomic", testJobArrayAtomic},
		{"BudgetLifts", testBudgetLifts},
		{"BudgetLiftAtomic", testBudgetLiftAtomic},
		{"UsageByOwner", testUsageByOwner},
		{"GPUSeries", testGPUSeries},
		{"GPUSeriesRetain", testGPUSeriesRetain},
		{"FleetNodes", testFleetNodes},
		{"SchedulerLease", testSchedulerLease},
		{"WriteIntents", testWriteIntents},
		{"IntentsStaleToken", testIntentsStaleToken},
		{"DoubleAllocation", testDoubleAllocation},
		{"SharedAllocations", testSharedAllocations},
		{"AllocationsFollowState", testAllocationsFollowState},
		{"ClaimIntents", testClaimIntents},
		{"FleetRanks", testFleetRanks},
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

func write(t *testing.T, s ledger.Ledger, b ledger.Batch) {
	t.Helper()
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func readUsage(t *testing.T, s ledger.Ledger, f ledger.Filter) []ledger.UsageTotal {
	t.Helper()
	got, err := s.Usage(context.Background(), f)
	if err != nil {
		t.Fatalf("Usage(%s): %v", fmtFilter(f), err)
	}
	return got
}

func readGPUs(t *testing.T, s ledger.Ledger, f ledger.Filter) []ledger.GPUTotal {
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

func checkUsage(t *testing.T, s ledger.Ledger, f ledger.Filter, want []ledger.UsageTotal) {
	t.Helper()
	if diff := gocmp.Diff(want, readUsage(t, s, f), equateEmpty); diff != "" {
		t.Errorf("Usage(%s) mismatch (-want +got):\n%s", fmtFilter(f), diff)
	}
}

func checkGPUs(t *testing.T, s ledger.Ledger, f ledger.Filter, want []ledger.GPUTotal) {
	t.Helper()
	if diff := gocmp.Diff(want, readGPUs(t, s, f), equateEmpty); diff != "" {
		t.Errorf("GPUs(%s) mismatch (-want +got):\n%s", fmtFilter(f), diff)
	}
}
