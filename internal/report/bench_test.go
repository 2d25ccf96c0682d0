package report

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// benchLedger is a month of a 32-node fleet with 8 GPUs each: 2,000
// containers of 50 users in 10 teams, each on two GPUs, so 4,000 usage
// rows.
func benchLedger() ([]ledger.UsageTotal, []ledger.GPUTotal) {
	const nodes, perNode = 32, 8
	var gpus []ledger.GPUTotal
	for n := range nodes {
		for i := range perNode {
			g := ledger.GPU{Node: fmt.Sprintf("node-%02d", n), UUID: fmt.Sprintf("GPU-%02d-%d", n, i), Index: i, Model: models[(n+i)%len(models)]}
			gpus = append(gpus, ledger.GPUTotal{GPU: g, GPUSums: ledger.GPUSums{
				Seconds: 30 * day, AllocatedSeconds: 25 * day, IdleSeconds: 5 * day, EnergyJoules: 1e9, IdleEnergyJoules: 1e8}})
		}
	}
	usage := make([]ledger.UsageTotal, 0, 4000)
	for c := range 2000 {
		ctr := &ledger.Container{
			ID: strings.Repeat(fmt.Sprintf("%04x", c), 16), Name: fmt.Sprintf("job-%d", c), Image: fmt.Sprintf("img-%d", c%20),
			Labels: map[string]string{"run": fmt.Sprint(c)},
			User:   fmt.Sprintf("user-%d", c%50), Team: fmt.Sprintf("team-%d", c%10), Project: fmt.Sprintf("proj-%d", c%30),
		}
		for j := range 2 {
			g := gpus[(2*c+j)%len(gpus)].GPU
			ctr.Node = g.Node
			u := ledger.UsageTotal{Node: g.Node, OwnerKind: ledger.KindContainer, OwnerID: ctr.ID, GPU: g, Container: ctr,
				Sums: ledger.Sums{AllocatedSeconds: 3 * 3600, PresentSeconds: 2 * 3600, UsedSeconds: 3600,
					EnergyJoules: 1e6, PeakMemoryBytes: 1 << 34, PeakUtil: 80}}
			if j == 0 {
				u.CPUSeconds, u.RAMByteSeconds = 3*3600*8, 3*3600*(1<<34)
			}
			usage = append(usage, u)
		}
	}
	return usage, gpus
}

// BenchmarkBuild: go test -run x -bench . -benchmem ./internal/report
func BenchmarkBuild(b *testing.B) {
	usage, gpus := benchLedger()
	m := randomModel()
	m.Idle = cost.IdleEven
	for _, by := range []string{ByUser, ByContainer} {
		b.Run(by, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(usage, gpus, Options{By: by, Cost: m}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
