// Write semantics: an invalid batch is refused with an error that names
// what is wrong, a batch goes in whole or not at all, concurrent writers
// add up exactly, and a cancelled context writes nothing.

package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

func testInvalidBatch(t *testing.T, s ledger.Ledger) {
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

func testAtomicBatch(t *testing.T, s ledger.Ledger) {
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

func testConcurrentWriters(t *testing.T, s ledger.Ledger) {
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

func testCancelledContext(t *testing.T, s ledger.Ledger) {
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
