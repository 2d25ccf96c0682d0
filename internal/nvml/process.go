package nvml

import (
	"cmp"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/internal/gpu"
)

// NVML's markers for an instance id that does not apply (no MIG) and for a
// memory figure it cannot give (no permission, Windows WDDM).
const (
	instanceNotApplicable = 0xFFFFFFFF
	memoryNotAvailable    = ^uint64(0)
)

// processList is one of NVML's per-type process lists.
type processList struct {
	call string
	typ  gpu.ProcessType
	get  func(nvml.Device) ([]nvml.ProcessInfo, nvml.Return)
}

var processLists = [...]processList{
	{"GetComputeRunningProcesses", gpu.Compute, nvml.Device.GetComputeRunningProcesses},
	{"GetGraphicsRunningProcesses", gpu.Graphics, nvml.Device.GetGraphicsRunningProcesses},
	{"GetMPSComputeRunningProcesses", gpu.MPS, nvml.Device.GetMPSComputeRunningProcesses},
}

// instance places processes on a MIG instance; both ids are -1 for a whole
// GPU.
type instance struct{ gi, ci int }

var wholeGPU = instance{-1, -1}

func (r *deviceReader) readProcesses(h nvml.Device) {
	r.d.Processes = mergeProcesses(r.appendProcesses(nil, h, wholeGPU))
}

// appendProcesses appends the processes of every type that h lists. On a
// MIG device handle, in gives the instance ids to use where NVML leaves
// them out. The lists are not merged yet.
func (r *deviceReader) appendProcesses(dst []gpu.Process, h nvml.Device, in instance) []gpu.Process {
	var lists [len(processLists)][]nvml.ProcessInfo
	n := 0
	for i, l := range processLists {
		if l.typ == gpu.MPS && !r.s.sym.mpsProcs {
			continue
		}
		infos, ret := l.get(h)
		if !r.optional(l.call, ret) {
			if r.d.Err != nil {
				return dst
			}
			continue
		}
		lists[i] = infos
		n += len(infos)
	}
	dst = slices.Grow(dst, n)
	for i, infos := range lists {
		for _, p := range infos {
			q := gpu.Process{
				PID:               p.Pid,
				Type:              processLists[i].typ,
				GPUInstanceID:     -1,
				ComputeInstanceID: -1,
			}
			if p.UsedGpuMemory != memoryNotAvailable {
				q.MemoryUsed = p.UsedGpuMemory
			}
			if in != wholeGPU {
				q.GPUInstanceID = instanceID(p.GpuInstanceId, in.gi)
				q.ComputeInstanceID = instanceID(p.ComputeInstanceId, in.ci)
			}
			dst = append(dst, q)
		}
	}
	return dst
}

func instanceID(v uint32, fallback int) int {
	if v == instanceNotApplicable {
		return fallback
	}
	return int(v)
}

// typeRank orders process types for merging: a process in the compute list
// is a compute process whatever else lists it, and an MPS client that also
// draws is an MPS process.
func typeRank(t gpu.ProcessType) int {
	switch t {
	case gpu.Compute:
		return 0
	case gpu.MPS:
		return 1
	default:
		return 2
	}
}

func compareProcesses(a, b gpu.Process) int {
	return cmp.Or(
		cmp.Compare(a.PID, b.PID),
		cmp.Compare(a.GPUInstanceID, b.GPUInstanceID),
		cmp.Compare(a.ComputeInstanceID, b.ComputeInstanceID),
	)
}

// mergeProcesses sorts ps by PID (then instance) and merges the entries of
// one process found in several lists: the highest-ranked type wins and
// memory is the largest figure, since each list reports the same
// allocation. It reuses ps and returns nil for no processes.
func mergeProcesses(ps []gpu.Process) []gpu.Process {
	if len(ps) == 0 {
		return nil
	}
	slices.SortFunc(ps, compareProcesses)
	out := ps[:1]
	for _, p := range ps[1:] {
		last := &out[len(out)-1]
		if compareProcesses(*last, p) != 0 {
			out = append(out, p)
			continue
		}
		last.MemoryUsed = max(last.MemoryUsed, p.MemoryUsed)
		if typeRank(p.Type) < typeRank(last.Type) {
			last.Type = p.Type
		}
	}
	return out
}

// readProcessUtil fills each process's SM utilisation from
// nvmlDeviceGetProcessUtilization, asking only for samples newer than the
// newest one the previous read saw on this GPU.
//
// go-nvml v0.13.4-1 also wraps the newer
// nvmlDeviceGetProcessesUtilizationInfo, but that wrapper cannot work:
// Device.GetProcessesUtilizationInfo takes no arguments and hands NVML a
// struct with only the version set, so the caller can neither pass
// lastSeenTimeStamp nor supply the procUtilArray buffer that NVML fills.
// It can only ever return an empty result or INSUFFICIENT_SIZE, so this
// package does not use it.
func (r *deviceReader) readProcessUtil(h nvml.Device) {
	last := r.s.lastSeen[r.d.UUID]
	samples, ret := processUtilization(h, last)
	switch {
	case ret == nvml.SUCCESS:
	case ret == nvml.ERROR_NOT_FOUND,
		ret == nvml.ERROR_INSUFFICIENT_SIZE && len(samples) == 0:
		// No sample since last: nothing ran a kernel, so every process
		// stays at 0 %. go-nvml reports an empty sizing answer as
		// INSUFFICIENT_SIZE with no samples.
		return
	default:
		r.optional("GetProcessUtilization", ret, gpu.FieldProcessUtil)
		return
	}

	procs := r.d.Processes
	// from[i] is the sample that set procs[i].SMUtil.
	type source struct {
		ts  uint64
		set bool
	}
	from := make([]source, len(procs))
	newest := last
	for _, smp := range samples {
		if smp.SmUtil > 100 {
			continue
		}
		if last != 0 && smp.TimeStamp <= last {
			// NVML promises only newer samples; an older one is stale.
			continue
		}
		newest = max(newest, smp.TimeStamp)
		i, found := slices.BinarySearchFunc(procs, smp.Pid, func(p gpu.Process, pid uint32) int {
			return cmp.Compare(p.PID, pid)
		})
		if !found {
			// A process that has exited, or one NVML does not list for this
			// GPU: nothing to attribute it to.
			continue
		}
		// Several samples of one process in the window: keep the newest.
		if !from[i].set || smp.TimeStamp >= from[i].ts {
			from[i] = source{smp.TimeStamp, true}
			procs[i].SMUtil = float64(smp.SmUtil)
		}
	}
	r.s.lastSeen[r.d.UUID] = newest
}

// processUtilization calls GetProcessUtilization and turns a panic inside
// go-nvml into ERROR_UNKNOWN: v0.13.4-1 sizes its buffer with a first call,
// then re-slices it to the count the second call returns, which is out of
// range when more processes appeared in between.
func processUtilization(h nvml.Device, lastSeen uint64) (samples []nvml.ProcessUtilizationSample, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			samples, ret = nil, nvml.ERROR_UNKNOWN
		}
	}()
	return h.GetProcessUtilization(lastSeen)
}
