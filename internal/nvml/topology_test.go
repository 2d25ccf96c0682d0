package nvml

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumeter/gpumeter/internal/gpu"
)

// pciOf is the PCI info of bus b.
func pciOf(b int) nvml.PciInfo {
	p := nvml.PciInfo{Bus: uint32(b)}
	for i, c := range fmt.Sprintf("00000000:%02X:00.0", b) {
		p.BusId[i] = int8(c)
	}
	return p
}

// nvswitchBus is the PCI bus of NVSwitch k in topoMachine.
func nvswitchBus(k int) int { return 0xc0 + k }

// topoMachine is how go-nvml's DGX A100 mock would answer the topology
// calls if it did (it leaves them unset, and calling them panics): GPU i
// on PCI bus i, pairs of GPUs (0–1, 2–3, …) under one PCIe switch, four
// GPUs per NUMA node, and links sets each GPU's active NVLinks' far ends
// by bus; the GPUs have 12 links and answer INVALID_ARGUMENT above.
// calls counts the topology calls.
func topoMachine(links func(i int) []int) (*machine, *atomic.Int64) {
	m := newMachine(dgxa100.New())
	calls := &atomic.Int64{}
	for i, d := range m.devs {
		far := links(i)
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { calls.Add(1); return pciOf(i), nvml.SUCCESS }
		d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			calls.Add(1)
			switch {
			case l >= 12:
				return 0, nvml.ERROR_INVALID_ARGUMENT
			case l >= len(far):
				return nvml.FEATURE_DISABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		d.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
			calls.Add(1)
			if l >= len(far) {
				return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
			}
			return pciOf(far[l]), nvml.SUCCESS
		}
		d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			calls.Add(1)
			j := other.(*server.Device).Index
			switch {
			case i == j:
				return nvml.TOPOLOGY_INTERNAL, nvml.SUCCESS
			case i/2 == j/2:
				return nvml.TOPOLOGY_SINGLE, nvml.SUCCESS
			case i/4 == j/4:
				return nvml.TOPOLOGY_NODE, nvml.SUCCESS
			}
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		}
	}
	return m, calls
}

// nvswitched links each GPU with two links to each of six NVSwitches, as
// in a DGX A100.
func nvswitched(int) []int {
	var far []int
	for l := range 12 {
		far = append(far, nvswitchBus(l/2))
	}
	return far
}

// islands links each GPU directly to the three others of its half, GPUs
// 0–3 and 4–7.
func islands(i int) []int {
	var far []int
	for j := i / 4 * 4; j < i/4*4+4; j++ {
		if j != i {
			far = append(far, j)
		}
	}
	return far
}

// topologies returns the sample's topologies by index.
func topologies(s gpu.Sample) []gpu.Topology {
	out := make([]gpu.Topology, len(s.Devices))
	for i, d := range s.Devices {
		out[i] = d.Topology
	}
	return out
}

// wantTopology is the topology of eight GPUs where GPU i shares NVLink
// with peers(i) and pairs share a PCIe switch.
func wantTopology(peers func(i int) []int) []gpu.Topology {
	out := make([]gpu.Topology, 8)
	for i := range out {
		for _, j := range peers(i) {
			out[i].NVLink = append(out[i].NVLink, testUUID(j))
		}
		out[i].PCIeSwitch = "pcie:" + testUUID(i/2*2)
	}
	return out
}

func TestReadTopology(t *testing.T) {
	all := func(i int) []int {
		var p []int
		for j := range 8 {
			if j != i {
				p = append(p, j)
			}
		}
		return p
	}
	for _, tc := range []struct {
		name  string
		links func(int) []int
		want  []gpu.Topology
	}{
		{"NVSwitch", nvswitched, wantTopology(all)},
		{"two NVLink islands", islands, wantTopology(islands)},
		{"PCIe only", func(int) []int { return nil }, wantTopology(func(int) []int { return nil })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, calls := topoMachine(tc.links)
			s := New(m.srv, testLogger(t))
			got := read(t, s)
			for _, d := range got.Devices {
				if d.Err != nil {
					t.Fatalf("GPU %d: %v", d.Index, d.Err)
				}
			}
			if diff := cmp.Diff(tc.want, topologies(got), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("topology mismatch (-want +got):\n%s", diff)
			}
			n := calls.Load()
			if n == 0 {
				t.Fatal("no topology call was made")
			}
			if again := read(t, s); !cmp.Equal(topologies(again), topologies(got)) || calls.Load() != n {
				t.Errorf("second read: %d more topology calls, topology equal %v; want it read once",
					calls.Load()-n, cmp.Equal(topologies(again), topologies(got)))
			}
		})
	}
}

// TestReadTopologyLinkReportedOnce: a direct link reported by one end
// only makes both GPUs peers.
func TestReadTopologyLinkReportedOnce(t *testing.T) {
	m, _ := topoMachine(func(i int) []int {
		if i == 0 {
			return []int{5}
		}
		return nil
	})
	got := topologies(read(t, New(m.srv, nil)))
	if !cmp.Equal(got[0].NVLink, []string{testUUID(5)}) || !cmp.Equal(got[5].NVLink, []string{testUUID(0)}) || len(got[1].NVLink) != 0 {
		t.Errorf("NVLink = %v / %v / %v, want GPU 0 and 5 peers of each other only", got[0].NVLink, got[5].NVLink, got[1].NVLink)
	}
}

// TestReadTopologyMissing: the mock as it comes panics on the topology
// calls, and a driver may fail them; the GPUs read as usual, without
// topology, and a failure is logged once.
func TestReadTopologyMissing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		machine func() *machine
		logged  string
	}{
		{"calls not answered", func() *machine { return newMachine(dgxa100.New()) }, "GetNvLinkState was just called"},
		{"calls fail", func() *machine {
			m, _ := topoMachine(nvswitched)
			for _, d := range m.devs {
				d.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
				d.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
					return 0, nvml.ERROR_NOT_SUPPORTED
				}
			}
			return m
		}, "ERROR_UNKNOWN"},
		{"same PCI address twice", func() *machine {
			m, _ := topoMachine(islands)
			m.devs[3].GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pciOf(2), nvml.SUCCESS }
			m.devs[0].GetTopologyCommonAncestorFunc = nil
			return m
		}, "same PCI address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			s := New(tc.machine().srv, slog.New(slog.NewTextHandler(&buf, nil)))
			for range 2 {
				for _, d := range read(t, s).Devices {
					if d.Err != nil || d.Topology.Known() {
						t.Errorf("GPU %d: err %v, topology %+v; want read, without topology", d.Index, d.Err, d.Topology)
					}
				}
			}
			if n := strings.Count(buf.String(), tc.logged); n != 1 {
				t.Errorf("%q logged %d times, want once; log:\n%s", tc.logged, n, buf.String())
			}
		})
	}
}

// TestReadTopologyLateGPU: a GPU that cannot be read at first gets its
// topology once it can.
func TestReadTopologyLateGPU(t *testing.T) {
	m, calls := topoMachine(islands)
	m.gpus[6].setFail("GetUUID", nvml.ERROR_UNKNOWN)
	s := New(m.srv, nil)
	first := read(t, s)
	if first.Devices[6].Err == nil || first.Devices[6].Topology.Known() || !first.Devices[7].Topology.Known() {
		t.Fatalf("first read: GPU 6 %v %+v, GPU 7 %+v", first.Devices[6].Err, first.Devices[6].Topology, first.Devices[7].Topology)
	}
	m.gpus[6].setFail("GetUUID", nvml.SUCCESS)
	n := calls.Load()
	got := topologies(read(t, s))
	if want := wantTopology(islands); !cmp.Equal(got, want, cmpopts.EquateEmpty()) || calls.Load() == n {
		t.Errorf("after GPU 6 came back: %+v, want %+v, read again", got, want)
	}
}
