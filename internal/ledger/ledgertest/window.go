// Window edges and filters: windows with minute and hour edges over five
// hours of data, checked against a brute-force sum of the same rows; open
// windows; and the node filter.

package ledgertest

import (
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

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

func testWindowEdges(t *testing.T, s ledger.Ledger) {
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

func testOpenWindow(t *testing.T, s ledger.Ledger) {
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

func testNodeFilter(t *testing.T, s ledger.Ledger) {
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
