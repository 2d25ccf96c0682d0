package nvml

import (
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/internal/gpu"
)

// The GPUs' topology: which GPUs share NVLink (directly or through an
// NVSwitch) and which sit under one PCIe switch. It does not change while
// the driver runs, so it is read once for the GPUs a Read first sees and
// again only when a GPU shows up that it was not read for. Any failure
// means no topology for what it touched, never a failed read.

// applyTopology sets each readable device's Topology, reading it first
// when a device is not in the cache.
func (s *Source) applyTopology(devs []gpu.Device) {
	for i := range devs {
		if devs[i].Err != nil {
			continue
		}
		if _, ok := s.topo[devs[i].UUID]; !ok {
			s.topo = s.readTopology(devs)
			break
		}
	}
	for i := range devs {
		d := &devs[i]
		if t, ok := s.topo[d.UUID]; ok && d.Err == nil {
			d.Topology = gpu.Topology{NVLink: slices.Clone(t.NVLink), PCIeSwitch: t.PCIeSwitch}
		}
	}
}

// topoGPU is one GPU while the topology is read.
type topoGPU struct {
	index int
	uuid  string
	h     nvml.Device
}

// readTopology reads the topology of the readable devices, with an entry,
// empty where nothing is known, for each of them.
func (s *Source) readTopology(devs []gpu.Device) map[string]gpu.Topology {
	out := make(map[string]gpu.Topology, len(devs))
	var gs []topoGPU
	for _, d := range devs {
		if d.Err != nil {
			continue
		}
		out[d.UUID] = gpu.Topology{}
		h, ret := s.lib.DeviceGetHandleByIndex(d.Index)
		if ret != nvml.SUCCESS || h == nil {
			s.topologyFailed("DeviceGetHandleByIndex", ret)
			continue
		}
		gs = append(gs, topoGPU{index: d.Index, uuid: d.UUID, h: h})
	}
	var peers [][]int
	if s.sym.nvlink {
		s.guard("NVLink", func() { peers = s.nvlinkPeers(gs) })
	}
	var switches []int
	if s.sym.topology {
		s.guard("GetTopologyCommonAncestor", func() { switches = s.pcieSwitches(gs) })
	}
	for i, g := range gs {
		var t gpu.Topology
		if i < len(peers) {
			for _, j := range peers[i] {
				t.NVLink = append(t.NVLink, gs[j].uuid)
			}
		}
		if i < len(switches) && switches[i] >= 0 {
			t.PCIeSwitch = "pcie:" + gs[switches[i]].uuid
		}
		out[g.uuid] = t
	}
	return out
}

// guard runs f, turning a panic inside go-nvml (or a fake that does not
// answer the call) into no topology from f.
func (s *Source) guard(call string, f func()) {
	defer func() {
		if p := recover(); p != nil {
			s.topologyFailed(call, fmt.Errorf("NVML call panicked: %v", p))
		}
	}()
	f()
}

// topologyFailed logs a failed topology call once per call and error;
// NOT_SUPPORTED is the answer of GPUs without the feature and is not
// logged.
func (s *Source) topologyFailed(call string, err error) {
	if err == nvml.ERROR_NOT_SUPPORTED {
		return
	}
	key := call + ": " + err.Error()
	if s.topoLogged[key] {
		return
	}
	if s.topoLogged == nil {
		s.topoLogged = make(map[string]bool)
	}
	s.topoLogged[key] = true
	s.logger.Warn("GPU topology not read; the queue places jobs without it", "call", call, "err", err)
}

// pciKey identifies a PCI device by domain, bus and device, which both
// GetPciInfo and GetNvLinkRemotePciInfo fill, whatever the text form of
// their bus ids.
type pciKey struct{ domain, bus, device uint32 }

func keyOf(p nvml.PciInfo) pciKey { return pciKey{p.Domain, p.Bus, p.Device} }

// nvlinkPeers returns, for each of gs, the positions of the GPUs it
// shares an active NVLink with. A link whose far end is one of gs makes
// the two peers; a far end that is no GPU is an NVSwitch (or a CPU's
// NVLink port), and the GPUs linked to the same one are peers of each
// other.
func (s *Source) nvlinkPeers(gs []topoGPU) [][]int {
	remotes := make([][]pciKey, len(gs))
	linked := false
	for i, g := range gs {
		for l := range nvml.NVLINK_MAX_LINKS {
			state, ret := g.h.GetNvLinkState(l)
			switch {
			case ret == nvml.ERROR_INVALID_ARGUMENT || ret == nvml.ERROR_NOT_SUPPORTED:
				continue // a link the GPU does not have
			case ret != nvml.SUCCESS:
				s.topologyFailed("GetNvLinkState", ret)
				continue
			case state != nvml.FEATURE_ENABLED:
				continue
			}
			pci, ret := g.h.GetNvLinkRemotePciInfo(l)
			if ret != nvml.SUCCESS {
				s.topologyFailed("GetNvLinkRemotePciInfo", ret)
				continue
			}
			remotes[i] = append(remotes[i], keyOf(pci))
			linked = true
		}
	}
	if !linked {
		return nil
	}
	own := make(map[pciKey]int, len(gs))
	for i, g := range gs {
		pci, ret := g.h.GetPciInfo()
		if ret != nvml.SUCCESS {
			s.topologyFailed("GetPciInfo", ret)
			continue
		}
		k := keyOf(pci)
		if j, dup := own[k]; dup {
			s.topologyFailed("GetPciInfo", fmt.Errorf("GPUs %d and %d have the same PCI address %04x:%02x:%02x", gs[j].index, g.index, k.domain, k.bus, k.device))
			return nil
		}
		own[k] = i
	}
	peers := make([][]int, len(gs))
	hubs := map[pciKey][]int{}
	for i, rs := range remotes {
		for _, k := range rs {
			if j, ok := own[k]; ok {
				if j != i {
					peers[i] = append(peers[i], j)
					peers[j] = append(peers[j], i)
				}
				continue
			}
			hubs[k] = append(hubs[k], i)
		}
	}
	for _, members := range hubs {
		for _, i := range members {
			for _, j := range members {
				if i != j {
					peers[i] = append(peers[i], j)
				}
			}
		}
	}
	for i := range peers {
		slices.Sort(peers[i])
		peers[i] = slices.Compact(peers[i])
	}
	return peers
}

// pcieSwitches returns, for each of gs, the position of the first GPU of
// its PCIe switch group, or -1 for a GPU no other GPU shares a switch
// with. Two GPUs share one when their closest common ancestor is a board
// or one or more PCIe switches (TOPOLOGY_INTERNAL, _SINGLE, _MULTIPLE);
// a host bridge, a NUMA node or the system between them is not.
func (s *Source) pcieSwitches(gs []topoGPU) []int {
	group := make([]int, len(gs))
	for i := range group {
		group[i] = i
	}
	find := func(i int) int {
		for group[i] != i {
			i = group[i]
		}
		return i
	}
	for i := range gs {
		for j := i + 1; j < len(gs); j++ {
			level, ret := gs[i].h.GetTopologyCommonAncestor(gs[j].h)
			if ret != nvml.SUCCESS {
				s.topologyFailed("GetTopologyCommonAncestor", ret)
				continue
			}
			if level <= nvml.TOPOLOGY_MULTIPLE {
				a, b := find(i), find(j)
				group[max(a, b)] = min(a, b)
			}
		}
	}
	size := make([]int, len(gs))
	for i := range gs {
		size[find(i)]++
	}
	out := make([]int, len(gs))
	for i := range gs {
		if r := find(i); size[r] > 1 {
			out[i] = r
		} else {
			out[i] = -1
		}
	}
	return out
}
