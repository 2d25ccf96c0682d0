package agent

import (
	"reflect"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// TestQueueView: a job's container and processes are the queue's own; a
// container started by hand with GPUs and a host process are outside use,
// whether the request names GPUs by index or by UUID; the GPUs carry the
// source's topology.
func TestQueueView(t *testing.T) {
	job := container.Container{ID: "c-job", Name: "gpumeter-job-j-000001", Running: true,
		Labels: map[string]string{spec.JobLabel: "j-000001"}, GPUs: container.GPURequest{IDs: []string{"GPU-a"}}}
	notebook := container.Container{ID: "c-nb", Name: "notebook", User: "bob", Running: true,
		GPUs: container.GPURequest{IDs: []string{"2"}}}
	stopped := container.Container{ID: "c-old", Name: "old", Running: false, GPUs: container.GPURequest{All: true}}
	plain := container.Container{ID: "c-cpu", Name: "web", Running: true}
	tick := &sampler.Tick{
		Tick: &meter.Tick{
			Time: time.Unix(100, 0),
			Sample: gpu.Sample{Devices: []gpu.Device{
				{Index: 0, UUID: "GPU-a", MemoryTotal: 80 << 30, Processes: []gpu.Process{{PID: 10, MemoryUsed: 10 << 30}},
					Topology: gpu.Topology{NVLink: []string{"GPU-b"}, PCIeSwitch: "pcie:GPU-a"}},
				{Index: 1, UUID: "GPU-b", MemoryTotal: 80 << 30, Processes: []gpu.Process{{PID: 11, MemoryUsed: 3 << 30}},
					Topology: gpu.Topology{NVLink: []string{"GPU-a"}}},
				{Index: 2, UUID: "GPU-c", MemoryTotal: 80 << 30},
			}},
			Containers: []meter.Container{{Container: job}, {Container: notebook}, {Container: stopped}, {Container: plain}},
		},
		Owners: [][]container.Owner{
			{{Kind: container.OwnerContainer, ID: "c-job"}},
			{{Kind: container.OwnerHost, ID: "1000"}},
			{},
		},
	}
	gpus, out, jobMemory := queueView(tick, spec.JobLabel)
	wantGPUs := []queue.GPU{
		{UUID: "GPU-a", Index: 0, MemoryTotal: 80 << 30, NVLink: []string{"GPU-b"}, PCIeSwitch: "pcie:GPU-a"},
		{UUID: "GPU-b", Index: 1, MemoryTotal: 80 << 30, NVLink: []string{"GPU-a"}},
		{UUID: "GPU-c", Index: 2, MemoryTotal: 80 << 30},
	}
	if !reflect.DeepEqual(gpus, wantGPUs) {
		t.Errorf("gpus = %+v, want %+v", gpus, wantGPUs)
	}
	wantOut := []queue.OutsideContainer{{Name: "notebook", User: "bob", GPUs: []string{"GPU-c"}}}
	if !reflect.DeepEqual(out.Containers, wantOut) {
		t.Errorf("outside containers = %+v, want %+v", out.Containers, wantOut)
	}
	if got := out.MemoryUsed; got["GPU-a"] != 0 || got["GPU-b"] != 3<<30 || got["GPU-c"] != 0 {
		t.Errorf("outside memory = %v, want only GPU-b's 3 GiB", got)
	}
	if got := jobMemory["j-000001"]; got != 10<<30 || len(jobMemory) != 1 {
		t.Errorf("job memory = %v, want j-000001's 10 GiB", jobMemory)
	}
	if g, o, _ := queueView(nil, spec.JobLabel); g != nil || len(o.Containers) != 0 {
		t.Errorf("no tick: %v %v", g, o)
	}
}

func TestQueueRules(t *testing.T) {
	q := config.Default().Queue
	q.Images = []string{"ghcr.io/lab/*"}
	q.MountRoots = []string{"/data"}
	q.PublishPorts = []string{"8000-8099", "8888"}
	q.MaxGPUsPerUser = map[string]int{"default": 2, "alice": 8}
	q.Placement = "spread"
	q.Labels = []string{"gpumeter.project", "gpumeter.sim.*"}
	rules, sched, err := queueRules(q, "lab-1", "gpumeter.user", "gpumeter.team")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rules.Labels, q.Labels) {
		t.Errorf("label patterns %v, want %v", rules.Labels, q.Labels)
	}
	if want := []spec.PortRange{{First: 8000, Last: 8099}, {First: 8888, Last: 8888}}; !reflect.DeepEqual(rules.PublishPorts, want) {
		t.Errorf("ports %v, want %v", rules.PublishPorts, want)
	}
	if rules.Network != "gpumeter-jobs-lab-1" || rules.MaxPids != 4096 || rules.MaxOpenFiles != spec.OpenFilesFor(65536) {
		t.Errorf("network %q, pids %d, open files %d; want the node's isolated network and the default limits", rules.Network, rules.MaxPids, rules.MaxOpenFiles)
	}
	for _, n := range []string{"none", "bridge", "lab-jobs"} {
		q := q
		q.Network = n
		if r, _, err := queueRules(q, "lab-1", "", ""); err != nil || r.Network != n {
			t.Errorf("queue.network %s: rules' network %q, %v; want it as it is", n, r.Network, err)
		}
	}
	if sched.Placement != queue.Spread || sched.MaxGPUsPerUser != 2 || sched.UserMaxGPUs["alice"] != 8 {
		t.Errorf("sched = %+v", sched)
	}
	for _, bad := range []string{"0", "9000-8000", "x", "70000"} {
		q.PublishPorts = []string{bad}
		if _, _, err := queueRules(q, "lab-1", "", ""); err == nil {
			t.Errorf("port range %q accepted", bad)
		}
	}
	q.PublishPorts = nil
	q.Placement = "random"
	if _, _, err := queueRules(q, "lab-1", "", ""); err == nil {
		t.Error("placement random accepted")
	}
}

func TestExemptKeys(t *testing.T) {
	got := exemptKeys([]string{"lab.keep=yes", "lab.notebook", "a=b=c"})
	if want := []string{"lab.keep", "lab.notebook", "a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("exemptKeys = %v, want %v", got, want)
	}
}
