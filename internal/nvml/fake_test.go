package nvml

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// fakeGPU is what NVML answers for one of the mock server's devices, for
// the calls the mock does not implement itself. Tests change it between
// reads.
type fakeGPU struct {
	mu sync.Mutex

	memory            nvml.Memory_v2
	util              nvml.Utilization
	enc, dec          uint32
	powerMW           uint32
	energyMJ          uint64
	temp              uint32
	memTemp           nvml.FieldValue
	smClock, memClock uint32

	compute, graphics, mps []nvml.ProcessInfo
	// samples are the process-utilisation samples NVML holds; a call
	// returns those newer than its lastSeen, as NVML does.
	samples []nvml.ProcessUtilizationSample
	// fail makes the named call return this instead of SUCCESS.
	fail map[string]nvml.Return
	// lastSeen records the argument of every GetProcessUtilization call.
	lastSeen []uint64
	// mig, when set, are the device's MIG device handles by index.
	mig []nvml.Device
}

func (f *fakeGPU) ret(call string) nvml.Return {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.fail[call]; ok {
		return r
	}
	return nvml.SUCCESS
}

// setFail makes call return ret from now on.
func (f *fakeGPU) setFail(call string, ret nvml.Return) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		f.fail = make(map[string]nvml.Return)
	}
	f.fail[call] = ret
}

func uintField(id uint32, v uint32) nvml.FieldValue {
	fv := nvml.FieldValue{FieldId: id, ValueType: uint32(nvml.VALUE_TYPE_UNSIGNED_INT)}
	binary.NativeEndian.PutUint32(fv.Value[:], v)
	return fv
}

const (
	gib      = 1 << 30
	mib      = 1 << 20
	reserved = 512 * mib
)

// testUUID is device i's UUID; the mock's own are random.
func testUUID(i int) string {
	return fmt.Sprintf("GPU-00000000-0000-0000-0000-%012d", i)
}

// machine is a mock NVML server whose devices answer from fakes.
type machine struct {
	srv  *server.Server
	devs []*server.Device
	gpus []*fakeGPU
}

// newMachine fills in srv's devices: GPU i uses i+1 GiB, runs at 10·i %,
// draws 100+10·i W and so on (see the fields set below), with no
// processes.
func newMachine(srv *server.Server) *machine {
	m := &machine{srv: srv}
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		dev.UUID = testUUID(i)
		total := dev.MemoryInfo.Total
		used := uint64(i+1) * gib
		f := &fakeGPU{
			memory:   nvml.Memory_v2{Total: total, Reserved: reserved, Used: used, Free: total - reserved - used},
			util:     nvml.Utilization{Gpu: uint32(10 * i), Memory: uint32(5 * i)},
			enc:      uint32(i),
			dec:      uint32(2 * i),
			powerMW:  uint32(100_000 + 10_000*i),
			energyMJ: uint64(1_000_000_000 + i),
			temp:     uint32(40 + i),
			memTemp:  uintField(nvml.FI_DEV_MEMORY_TEMP, uint32(50+i)),
			smClock:  1410,
			memClock: 1215,
		}
		install(&dev.Device, f)
		m.devs = append(m.devs, dev)
		m.gpus = append(m.gpus, f)
	}
	return m
}

// install points the mock device's unimplemented calls at f.
func install(d *mock.Device, f *fakeGPU) {
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		return f.memory, f.ret("GetMemoryInfo_v2")
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		// The first version counts the driver's reserve as used.
		m := f.memory
		return nvml.Memory{Total: m.Total, Used: m.Used + m.Reserved, Free: m.Free}, f.ret("GetMemoryInfo")
	}
	for _, call := range []string{"GetUUID", "GetName"} {
		wrapString(d, call, f)
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return f.util, f.ret("GetUtilizationRates")
	}
	d.GetEncoderUtilizationFunc = func() (uint32, uint32, nvml.Return) {
		return f.enc, 167000, f.ret("GetEncoderUtilization")
	}
	d.GetDecoderUtilizationFunc = func() (uint32, uint32, nvml.Return) {
		return f.dec, 167000, f.ret("GetDecoderUtilization")
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) {
		return f.powerMW, f.ret("GetPowerUsage")
	}
	d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
		f.mu.Lock()
		mj := f.energyMJ
		f.mu.Unlock()
		return mj, f.ret("GetTotalEnergyConsumption")
	}
	d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
		if s != nvml.TEMPERATURE_GPU {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return f.temp, f.ret("GetTemperature")
	}
	d.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		if r := f.ret("GetFieldValues"); r != nvml.SUCCESS {
			return r
		}
		for i := range values {
			if values[i].FieldId == nvml.FI_DEV_MEMORY_TEMP {
				values[i] = f.memTemp
				continue
			}
			values[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
		}
		return nvml.SUCCESS
	}
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		switch c {
		case nvml.CLOCK_SM:
			return f.smClock, f.ret("GetClockInfo(SM)")
		case nvml.CLOCK_MEM:
			return f.memClock, f.ret("GetClockInfo(MEM)")
		}
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return f.compute, f.ret("GetComputeRunningProcesses")
	}
	d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return f.graphics, f.ret("GetGraphicsRunningProcesses")
	}
	d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return f.mps, f.ret("GetMPSComputeRunningProcesses")
	}
	d.GetProcessUtilizationFunc = func(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		f.mu.Lock()
		f.lastSeen = append(f.lastSeen, lastSeen)
		f.mu.Unlock()
		if r := f.ret("GetProcessUtilization"); r != nvml.SUCCESS {
			return nil, r
		}
		var out []nvml.ProcessUtilizationSample
		for _, s := range f.samples {
			if s.TimeStamp > lastSeen {
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) {
		return 7, f.ret("GetMaxMigDeviceCount")
	}
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(f.mig) || f.mig[i] == nil {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return f.mig[i], nvml.SUCCESS
	}
}

// wrapString lets f fail the device's string getter call.
func wrapString(d *mock.Device, call string, f *fakeGPU) {
	switch call {
	case "GetUUID":
		prev := d.GetUUIDFunc
		d.GetUUIDFunc = func() (string, nvml.Return) {
			if r := f.ret(call); r != nvml.SUCCESS {
				return "", r
			}
			return prev()
		}
	case "GetName":
		prev := d.GetNameFunc
		d.GetNameFunc = func() (string, nvml.Return) {
			if r := f.ret(call); r != nvml.SUCCESS {
				return "", r
			}
			return prev()
		}
	}
}

// migDevice is one MIG device (a compute instance) of a GPU in MIG mode.
type migDevice struct {
	uuid, name string
	gi, ci     int
	memory     nvml.Memory_v2
	attrs      nvml.DeviceAttributes
	compute    []nvml.ProcessInfo
}

func (m migDevice) handle() nvml.Device {
	d := &mock.Device{}
	d.GetUUIDFunc = func() (string, nvml.Return) { return m.uuid, nvml.SUCCESS }
	d.GetNameFunc = func() (string, nvml.Return) { return m.name, nvml.SUCCESS }
	d.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return m.gi, nvml.SUCCESS }
	d.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return m.ci, nvml.SUCCESS }
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return m.memory, nvml.SUCCESS }
	d.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) { return m.attrs, nvml.SUCCESS }
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return m.compute, nvml.SUCCESS }
	d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	return d
}
