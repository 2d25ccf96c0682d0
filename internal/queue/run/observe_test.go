package run

import (
	"reflect"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// TestObservationOf: a job's container and processes are the queue's own; a
// container started by hand with GPUs and a host process are outside use,
// whether the request names GPUs by index or by UUID; the GPUs carry the
// source's topology.
func TestObservationOf(t *testing.T) {
	job := container.Container{ID: "c-job", Name: "gpumeter-job-j-000001", Running: true,
		Labels: map[string]string{spec.JobLabel: "j-000001", spec.NodeLabel: "n1"}, GPUs: container.GPURequest{IDs: []string{"GPU-a"}}}
	// Another node's job of the same id, on the engine both agents share:
	// that node's, and so use outside this node's queue.
	theirs := container.Container{ID: "c-theirs", Name: "gpumeter-job-node2-j-000001", User: "carol", Running: true,
		Labels: map[string]string{spec.JobLabel: "j-000001", spec.NodeLabel: "node2"}, GPUs: container.GPURequest{IDs: []string{"GPU-b"}}}
	notebook := container.Container{ID: "c-nb", Name: "notebook", User: "bob", Running: true,
		GPUs: container.GPURequest{IDs: []string{"2"}}}
	stopped := container.Container{ID: "c-old", Name: "old", Running: false, GPUs: container.GPURequest{All: true}}
	plain := container.Container{ID: "c-cpu", Name: "web", Running: true}
	tick := &sampler.Tick{
		Node: "n1",
		Tick: &meter.Tick{
			Time: time.Unix(100, 0),
			Sample: gpu.Sample{Devices: []gpu.Device{
				{Index: 0, UUID: "GPU-a", MemoryTotal: 80 << 30, Processes: []gpu.Process{{PID: 10, MemoryUsed: 10 << 30}},
					Topology: gpu.Topology{NVLink: []string{"GPU-b"}, PCIeSwitch: "pcie:GPU-a"}},
				{Index: 1, UUID: "GPU-b", MemoryTotal: 80 << 30, Processes: []gpu.Process{{PID: 11, MemoryUsed: 3 << 30}, {PID: 12, MemoryUsed: 5 << 30}},
					Topology: gpu.Topology{NVLink: []string{"GPU-a"}}},
				{Index: 2, UUID: "GPU-c", MemoryTotal: 80 << 30},
			}},
			Containers: []meter.Container{{Container: job}, {Container: notebook}, {Container: theirs}, {Container: stopped}, {Container: plain}},
		},
		Owners: [][]container.Owner{
			{{Kind: container.OwnerContainer, ID: "c-job"}},
			{{Kind: container.OwnerHost, ID: "1000"}, {Kind: container.OwnerContainer, ID: "c-theirs"}},
			{},
		},
	}
	o := ObservationOf(tick)
	gpus, out, jobMemory := o.GPUs, o.Outside, o.JobMemory
	wantGPUs := []queue.GPU{
		{UUID: "GPU-a", Index: 0, MemoryTotal: 80 << 30, NVLink: []string{"GPU-b"}, PCIeSwitch: "pcie:GPU-a"},
		{UUID: "GPU-b", Index: 1, MemoryTotal: 80 << 30, NVLink: []string{"GPU-a"}},
		{UUID: "GPU-c", Index: 2, MemoryTotal: 80 << 30},
	}
	if !reflect.DeepEqual(gpus, wantGPUs) {
		t.Errorf("gpus = %+v, want %+v", gpus, wantGPUs)
	}
	wantOut := []queue.OutsideContainer{{Name: "notebook", User: "bob", GPUs: []string{"GPU-c"}}, {Name: "gpumeter-job-node2-j-000001", User: "carol", GPUs: []string{"GPU-b"}}}
	if !reflect.DeepEqual(out.Containers, wantOut) {
		t.Errorf("outside containers = %+v, want %+v", out.Containers, wantOut)
	}
	if got := out.MemoryUsed; got["GPU-a"] != 0 || got["GPU-b"] != 8<<30 || got["GPU-c"] != 0 {
		t.Errorf("outside memory = %v, want only GPU-b's 8 GiB (a host process's 3, node2's job's 5)", got)
	}
	if got := jobMemory["j-000001"]; got != 10<<30 || len(jobMemory) != 1 {
		t.Errorf("job memory = %v, want this node's j-000001's 10 GiB alone", jobMemory)
	}
	if o := ObservationOf(nil); o.GPUs != nil || len(o.Outside.Containers) != 0 {
		t.Errorf("no tick: %+v", o)
	}
}
