// Package gpu describes what a GPU source reports at one instant: the
// devices, their gauges and counters, and the processes on them. Sources
// (NVML, the simulator) fill a Sample; the sampler and the meter read it.
package gpu

import "time"

// Sample is one reading of every GPU on a node.
type Sample struct {
	Time          time.Time
	DriverVersion string
	Devices       []Device
}

// ProcessType says how a process uses a GPU.
type ProcessType uint8

// Process types as NVML reports them.
const (
	Compute ProcessType = iota
	Graphics
	MPS
)

func (t ProcessType) String() string {
	switch t {
	case Graphics:
		return "graphics"
	case MPS:
		return "mps"
	default:
		return "compute"
	}
}

// Process is one process holding a context on a GPU.
type Process struct {
	PID        uint32
	Type       ProcessType
	MemoryUsed uint64 // bytes
	// SMUtil is the share of the device's SM time this process used over the
	// last interval, in percent of the whole device (0..100).
	SMUtil float64
	// GPUInstanceID and ComputeInstanceID place the process on a MIG
	// instance; both are -1 on a GPU without MIG.
	GPUInstanceID     int
	ComputeInstanceID int
}

// MIGInstance is one MIG GPU instance of a device in MIG mode.
type MIGInstance struct {
	GPUInstanceID int
	UUID          string
	Profile       string // e.g. "1g.10gb"
	MemoryTotal   uint64
	MemoryUsed    uint64
}

// Field names the optional values of a Device, so a source can say which
// ones the hardware did not give this time.
type Field string

// Optional device fields.
const (
	FieldUtil        Field = "gpu_util"
	FieldMemCopyUtil Field = "mem_copy_util"
	FieldEncUtil     Field = "enc_util"
	FieldDecUtil     Field = "dec_util"
	FieldPower       Field = "power_usage"
	FieldEnergy      Field = "total_energy_consumption"
	FieldTemp        Field = "gpu_temp"
	FieldMemTemp     Field = "memory_temp"
	FieldSMClock     Field = "sm_clock"
	FieldMemClock    Field = "mem_clock"
	FieldProcessUtil Field = "process_sm_util"
)

// Device is one GPU as read at one instant.
type Device struct {
	Index int
	UUID  string
	Model string
	// Err is set when the device could not be read this time. The rest of
	// the fields are then not to be trusted, and the meter skips the device.
	Err error

	MemoryTotal uint64 // bytes
	MemoryUsed  uint64 // bytes
	MemoryFree  uint64 // bytes

	Util        float64 // percent of time a kernel ran, 0..100
	MemCopyUtil float64 // percent
	EncUtil     float64 // percent
	DecUtil     float64 // percent
	PowerWatts  float64
	// EnergyMilliJoules is the device's energy counter since the driver
	// loaded. It only grows, except that a driver reload resets it.
	EnergyMilliJoules uint64
	TempC             float64
	MemTempC          float64
	SMClockMHz        float64
	MemClockMHz       float64

	// Missing lists the optional fields this device did not report, so
	// that sinks leave them out instead of showing a false zero.
	Missing []Field

	MIGEnabled bool
	MIG        []MIGInstance

	Processes []Process

	// Topology says which GPUs of the node this one is close to; its zero
	// value means the source does not know (the simulator, a driver that
	// does not say, a GPU on its own).
	Topology Topology
}

// Topology is how a GPU connects to the other GPUs of its node. Sources
// read it once: it does not change while the driver runs.
type Topology struct {
	// NVLink are the UUIDs of the GPUs this one reaches over an active
	// NVLink, directly or through an NVSwitch.
	NVLink []string
	// PCIeSwitch names the PCIe switch tree the GPU sits under: GPUs with
	// the same non-empty name reach each other without crossing a host
	// bridge. "" when unknown or when no other GPU is under it.
	PCIeSwitch string
}

// Known reports whether t says anything.
func (t Topology) Known() bool {
	return len(t.NVLink) > 0 || t.PCIeSwitch != ""
}

// Has reports whether the device reported field f.
func (d *Device) Has(f Field) bool {
	for _, m := range d.Missing {
		if m == f {
			return false
		}
	}
	return true
}
