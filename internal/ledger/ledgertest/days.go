// Day rows: windows over several days, answered by day rows for whole
// days, hour rows for the other whole hours and minutes at the edges,
// checked against a brute-force sum of what was written.

package ledgertest

import (
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

func testDayRows(t *testing.T, s ledger.Ledger) {
	meta := ledger.Batch{
		Nodes:      []ledger.Node{{Name: nodeA, FirstSeen: t0, LastSeen: at(100, 0)}},
		GPUs:       []ledger.GPU{gpuMetaA, gpuMetaB},
		Containers: []ledger.Container{container1()},
	}
	write(t, s, meta)
	// Four days from 08:00 on the first, a batch an hour, a row every 7
	// minutes per owner.
	var batches []ledger.Batch
	for h := 0; h < 96; h++ {
		var b ledger.Batch
		for m := h * 60; m < h*60+60; m += 7 {
			for i, o := range []edgeOwner{{ledger.KindContainer, ctr1, gpuA}, {ledger.KindHost, "alice", gpuB}} {
				b.Usage = append(b.Usage, usage(nodeA, at(0, m), o.kind, o.owner, o.gpu, edgeSums(m, i)))
			}
			b.GPUUsage = append(b.GPUUsage, ledger.GPUUsage{Node: nodeA, Start: at(0, m), GPU: gpuA, GPUSums: edgeGPUSums(m, 0)})
			b.ContainerUsage = append(b.ContainerUsage, ledger.ContainerUsage{Node: nodeA, Start: at(0, m), ContainerID: ctr1, CPUSeconds: 1.25, RAMByteSeconds: float64(m)})
		}
		write(t, s, b)
		batches = append(batches, b)
	}
	day := func(d int) time.Time { return t0.Truncate(24 * time.Hour).Add(time.Duration(d) * 24 * time.Hour) }
	for _, w := range [][2]time.Time{
		{day(0), day(5)},        // whole days and more
		{day(1), day(3)},        // two whole days
		{at(0, 17), at(90, 43)}, // minutes, hours and days
		{day(1).Add(-time.Minute), day(2).Add(time.Hour + time.Minute)}, // a day with an hour and a minute either side
		{day(1).Add(time.Hour), day(2)},                                 // no whole day
		{{}, {}},                                                        // open
	} {
		f := ledger.Filter{From: w[0], To: w[1]}
		from, to := w[0], w[1]
		if to.IsZero() {
			to = at(200, 0)
		}
		checkUsage(t, s, f, bruteUsage(batches, ledger.Minute(from), ledger.Minute(to)))
		checkGPUs(t, s, f, bruteGPUs(batches, ledger.Minute(from), ledger.Minute(to)))
	}
}
