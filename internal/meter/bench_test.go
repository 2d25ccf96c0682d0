package meter

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
)

// benchInput is a busy node: 8 GPUs, 64 running containers and 256 GPU
// processes. GPU g is held by holdersPer[g] containers, so that shares run
// from 1/4 to 1/12; each container runs 4 processes on its GPU. Half the
// containers ask for their GPU by index and half by UUID, as Docker's
// DeviceIDs allow both.
func benchInput() Input {
	holdersPer := []int{4, 6, 8, 10, 12, 8, 8, 8} // Σ = 64
	const procsPer = 4
	in := Input{Time: start}
	for g, n := range holdersPer {
		d := gpu.Device{
			Index:       g,
			UUID:        fmt.Sprintf("GPU-%08x-1111-2222-3333-%012x", g, g),
			Model:       "NVIDIA H100 80GB HBM3",
			MemoryTotal: 80 << 30,
			Util:        90,
			PowerWatts:  500,
		}
		var owners []container.Owner
		for range n {
			i := len(in.Containers)
			id := fmt.Sprintf("%064x", 0xc0ffee000+i)
			req := strconv.Itoa(g)
			if i%2 == 1 {
				req = d.UUID
			}
			in.Containers = append(in.Containers, container.Container{
				ID: id, Name: fmt.Sprintf("job-%02d", i), Running: true,
				GPUs:       container.GPURequest{IDs: []string{req}},
				CPUSeconds: 100, MemoryBytes: 8 << 30,
			})
			for p := range procsPer {
				d.Processes = append(d.Processes, gpu.Process{
					PID: uint32(10000 + i*procsPer + p), MemoryUsed: 1 << 30, SMUtil: 30,
					GPUInstanceID: -1, ComputeInstanceID: -1,
				})
				owners = append(owners, container.Owner{Kind: container.OwnerContainer, ID: id})
			}
		}
		in.Sample.Devices = append(in.Sample.Devices, d)
		in.Owners = append(in.Owners, owners)
	}
	return in
}

// BenchmarkStep measures one warm tick of the meter on a busy node.
//
//	go test -run x -bench Step -benchmem ./internal/meter
func BenchmarkStep(b *testing.B) {
	in := benchInput()
	m := New(Config{})
	m.Step(in) // warm: every GPU primed, every row and container known
	b.ReportAllocs()
	// The input is advanced in place: the ticks are dropped, so none
	// sees its sample change.
	for i := 1; b.Loop(); i++ {
		in.Time = start.Add(time.Duration(i) * time.Second)
		in.Sample.Time = in.Time
		for g := range in.Sample.Devices {
			in.Sample.Devices[g].EnergyMilliJoules += 500_000 // 500 W for 1 s
		}
		for c := range in.Containers {
			in.Containers[c].CPUSeconds++
		}
		m.Step(in)
	}
}
