package nvml

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/internal/gpu"
)

// maxMIGDevices bounds the MIG device count NVML may report. A GPU has at
// most 7 compute slices today; anything far above is an odd answer.
const maxMIGDevices = 64

// readMIG reads the instances of a GPU in MIG mode and their processes.
// Each MIG device handle is one compute instance; the instances are
// reported per GPU instance (compute instances of one GPU instance share
// its memory), the processes with both ids. Processes are read through the
// MIG device handles, because on the parent handle NVML lists them only
// for privileged callers.
func (r *deviceReader) readMIG(h nvml.Device) {
	n, ret := h.GetMaxMigDeviceCount()
	if !r.optional("GetMaxMigDeviceCount", ret) {
		return
	}
	n = min(max(n, 0), maxMIGDevices)

	var procs []gpu.Process
	for j := range n {
		mh, ret := h.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND {
			continue // an index without a MIG device
		}
		call := fmt.Sprintf("GetMigDeviceHandleByIndex(%d)", j)
		if !r.optional(call, ret) {
			if r.d.Err != nil {
				return
			}
			continue
		}
		if mh == nil {
			continue
		}
		gi, ret := mh.GetGpuInstanceId()
		if !r.optional(call+".GetGpuInstanceId", ret) {
			if r.d.Err != nil {
				return
			}
			continue
		}
		ci, ret := mh.GetComputeInstanceId()
		if !r.optional(call+".GetComputeInstanceId", ret) {
			if r.d.Err != nil {
				return
			}
			ci = -1
		}

		if !slices.ContainsFunc(r.d.MIG, func(m gpu.MIGInstance) bool { return m.GPUInstanceID == gi }) {
			inst, ok := r.migInstance(mh, call, gi)
			if r.d.Err != nil {
				return
			}
			if ok {
				r.d.MIG = append(r.d.MIG, inst)
			}
		}
		procs = r.appendProcesses(procs, mh, instance{gi, ci})
		if r.d.Err != nil {
			return
		}
	}
	slices.SortFunc(r.d.MIG, func(a, b gpu.MIGInstance) int {
		return cmp.Compare(a.GPUInstanceID, b.GPUInstanceID)
	})
	r.d.Processes = mergeProcesses(procs)
}

// migInstance reads the GPU instance that MIG device mh belongs to.
func (r *deviceReader) migInstance(mh nvml.Device, call string, gi int) (gpu.MIGInstance, bool) {
	inst := gpu.MIGInstance{GPUInstanceID: gi}
	uuid, ret := mh.GetUUID()
	if !r.optional(call+".GetUUID", ret) {
		return inst, false
	}
	inst.UUID = uuid
	total, used, _, memCall, ret := r.memoryInfo(mh)
	if r.optional(call+"."+memCall, ret) {
		inst.MemoryTotal, inst.MemoryUsed = total, used
	} else if r.d.Err != nil {
		return inst, false
	}
	inst.Profile = r.migProfile(mh, call)
	return inst, true
}

// migProfile names the GPU instance's profile ("1g.10gb"). NVML names a
// MIG device "<GPU name> MIG <profile>", where the profile of a compute
// instance smaller than its GPU instance carries a compute part
// ("1c.3g.40gb") that is dropped here. A name without a profile is rebuilt
// from the instance's slices and memory the way nvidia-smi names them. It
// is empty when neither is obtainable.
func (r *deviceReader) migProfile(mh nvml.Device, call string) string {
	if name, ret := mh.GetName(); ret == nvml.SUCCESS {
		if _, profile, ok := strings.Cut(name, " MIG "); ok {
			profile = strings.TrimSpace(profile)
			if c, gi, ok := strings.Cut(profile, "c."); ok && isDigits(c) {
				profile = gi
			}
			if profile != "" {
				return profile
			}
		}
	} else if !r.optional(call+".GetName", ret) && r.d.Err != nil {
		return ""
	}
	a, ret := mh.GetAttributes()
	if !r.optional(call+".GetAttributes", ret) || a.GpuInstanceSliceCount == 0 {
		return ""
	}
	return fmt.Sprintf("%dg.%dgb", a.GpuInstanceSliceCount, (a.MemorySizeMB+1023)/1024)
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}
