package nvml

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

var _ sampler.GPUSource = (*Source)(nil)

var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// wantDevice is what newMachine's GPU i reads as, without processes.
func wantDevice(i int, model string, total uint64) gpu.Device {
	used := uint64(i+1) * gib
	return gpu.Device{
		Index:             i,
		UUID:              testUUID(i),
		Model:             model,
		MemoryTotal:       total,
		MemoryUsed:        used,
		MemoryFree:        total - reserved - used,
		Util:              float64(10 * i),
		MemCopyUtil:       float64(5 * i),
		EncUtil:           float64(i),
		DecUtil:           float64(2 * i),
		PowerWatts:        float64(100 + 10*i),
		EnergyMilliJoules: uint64(1_000_000_000 + i),
		TempC:             float64(40 + i),
		MemTempC:          float64(50 + i),
		SMClockMHz:        1410,
		MemClockMHz:       1215,
	}
}

func read(t testing.TB, s *Source) gpu.Sample {
	t.Helper()
	got, err := s.Read(context.Background(), now)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return got
}

// testLogger logs to the test, so debug lines show with -v.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestReadFullMachine(t *testing.T) {
	tests := []struct {
		name  string
		srv   *server.Server
		model string
		total uint64
	}{
		{"dgxa100", dgxa100.New(), "Mock NVIDIA A100-SXM4-40GB", 40 * gib},
		{"dgxh100", dgxh100.New(), "NVIDIA H100 80GB HBM3", 80 * gib},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMachine(tt.srv)
			// GPU i runs PID 1000+i using i+1 GiB at 10·i % SM.
			for i, f := range m.gpus {
				pid := uint32(1000 + i)
				f.compute = []nvml.ProcessInfo{{Pid: pid, UsedGpuMemory: uint64(i+1) * gib, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}}
				f.samples = []nvml.ProcessUtilizationSample{{Pid: pid, TimeStamp: 5_000_000, SmUtil: uint32(10 * i)}}
			}

			got := read(t, New(m.srv, testLogger(t)))

			want := gpu.Sample{Time: now, DriverVersion: "550.54.15"}
			for i := range 8 {
				d := wantDevice(i, tt.model, tt.total)
				d.Processes = []gpu.Process{{
					PID: uint32(1000 + i), Type: gpu.Compute, MemoryUsed: uint64(i+1) * gib,
					SMUtil: float64(10 * i), GPUInstanceID: -1, ComputeInstanceID: -1,
				}}
				want.Devices = append(want.Devices, d)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Read mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadMemoryFallback(t *testing.T) {
	m := newMachine(dgxa100.New())
	for _, f := range m.gpus {
		f.setFail("GetMemoryInfo_v2", nvml.ERROR_FUNCTION_NOT_FOUND)
	}
	got := read(t, New(m.srv, nil))
	d := got.Devices[2]
	if d.Err != nil {
		t.Fatalf("Err = %v, want nil", d.Err)
	}
	// The first version counts the driver's reserve as used.
	if want := uint64(3*gib + reserved); d.MemoryUsed != want {
		t.Errorf("MemoryUsed = %d, want %d", d.MemoryUsed, want)
	}
	if want := uint64(40 * gib); d.MemoryTotal != want {
		t.Errorf("MemoryTotal = %d, want %d", d.MemoryTotal, want)
	}
}

func TestReadProcessMerge(t *testing.T) {
	const na = 0xFFFFFFFF
	tests := []struct {
		name                   string
		compute, graphics, mps []nvml.ProcessInfo
		mpsRet                 nvml.Return
		want                   []gpu.Process
	}{
		{
			name:     "compute and graphics, one PID in both",
			compute:  []nvml.ProcessInfo{{Pid: 20, UsedGpuMemory: 1 * gib, GpuInstanceId: na, ComputeInstanceId: na}, {Pid: 10, UsedGpuMemory: 3 * gib, GpuInstanceId: na, ComputeInstanceId: na}},
			graphics: []nvml.ProcessInfo{{Pid: 20, UsedGpuMemory: 2 * gib, GpuInstanceId: na, ComputeInstanceId: na}, {Pid: 30, UsedGpuMemory: 512 * mib, GpuInstanceId: na, ComputeInstanceId: na}},
			want: []gpu.Process{
				{PID: 10, Type: gpu.Compute, MemoryUsed: 3 * gib, GPUInstanceID: -1, ComputeInstanceID: -1},
				{PID: 20, Type: gpu.Compute, MemoryUsed: 2 * gib, GPUInstanceID: -1, ComputeInstanceID: -1},
				{PID: 30, Type: gpu.Graphics, MemoryUsed: 512 * mib, GPUInstanceID: -1, ComputeInstanceID: -1},
			},
		},
		{
			name:     "MPS client also in graphics list",
			graphics: []nvml.ProcessInfo{{Pid: 40, UsedGpuMemory: 1 * gib, GpuInstanceId: na, ComputeInstanceId: na}},
			mps:      []nvml.ProcessInfo{{Pid: 40, UsedGpuMemory: 1 * gib, GpuInstanceId: na, ComputeInstanceId: na}},
			want:     []gpu.Process{{PID: 40, Type: gpu.MPS, MemoryUsed: 1 * gib, GPUInstanceID: -1, ComputeInstanceID: -1}},
		},
		{
			name:    "PID listed twice in one list",
			compute: []nvml.ProcessInfo{{Pid: 7, UsedGpuMemory: 1 * gib, GpuInstanceId: na, ComputeInstanceId: na}, {Pid: 7, UsedGpuMemory: 2 * gib, GpuInstanceId: na, ComputeInstanceId: na}},
			want:    []gpu.Process{{PID: 7, Type: gpu.Compute, MemoryUsed: 2 * gib, GPUInstanceID: -1, ComputeInstanceID: -1}},
		},
		{
			name:    "memory not available",
			compute: []nvml.ProcessInfo{{Pid: 8, UsedGpuMemory: ^uint64(0), GpuInstanceId: na, ComputeInstanceId: na}},
			want:    []gpu.Process{{PID: 8, Type: gpu.Compute, GPUInstanceID: -1, ComputeInstanceID: -1}},
		},
		{
			name:    "MPS list not supported",
			compute: []nvml.ProcessInfo{{Pid: 9, UsedGpuMemory: gib, GpuInstanceId: na, ComputeInstanceId: na}},
			mpsRet:  nvml.ERROR_NOT_SUPPORTED,
			want:    []gpu.Process{{PID: 9, Type: gpu.Compute, MemoryUsed: gib, GPUInstanceID: -1, ComputeInstanceID: -1}},
		},
		{
			name: "no processes",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMachine(dgxa100.New())
			f := m.gpus[0]
			f.compute, f.graphics, f.mps = tt.compute, tt.graphics, tt.mps
			if tt.mpsRet != nvml.SUCCESS {
				f.setFail("GetMPSComputeRunningProcesses", tt.mpsRet)
			}
			got := read(t, New(m.srv, testLogger(t))).Devices[0]
			if got.Err != nil {
				t.Fatalf("Err = %v, want nil", got.Err)
			}
			if diff := cmp.Diff(tt.want, got.Processes, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Processes mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadProcessUtilLastSeen(t *testing.T) {
	m := newMachine(dgxa100.New())
	f := m.gpus[1]
	f.compute = []nvml.ProcessInfo{{Pid: 100, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}, {Pid: 200, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}}
	f.samples = []nvml.ProcessUtilizationSample{
		{Pid: 100, TimeStamp: 1_000_100, SmUtil: 30},
		{Pid: 200, TimeStamp: 1_000_300, SmUtil: 50},
		{Pid: 100, TimeStamp: 1_000_200, SmUtil: 40},
	}
	s := New(m.srv, testLogger(t))

	first := read(t, s).Devices[1]
	wantFirst := map[uint32]float64{100: 40, 200: 50}
	if diff := cmp.Diff(wantFirst, smUtil(first)); diff != "" {
		t.Errorf("first read SMUtil mismatch (-want +got):\n%s", diff)
	}

	f.samples = append(f.samples, nvml.ProcessUtilizationSample{Pid: 200, TimeStamp: 2_000_000, SmUtil: 70})
	second := read(t, s).Devices[1]
	wantSecond := map[uint32]float64{100: 0, 200: 70}
	if diff := cmp.Diff(wantSecond, smUtil(second)); diff != "" {
		t.Errorf("second read SMUtil mismatch (-want +got):\n%s", diff)
	}

	third := read(t, s).Devices[1]
	if diff := cmp.Diff(map[uint32]float64{100: 0, 200: 0}, smUtil(third)); diff != "" {
		t.Errorf("third read (no new samples) SMUtil mismatch (-want +got):\n%s", diff)
	}
	if third.Err != nil || !third.Has(gpu.FieldProcessUtil) {
		t.Errorf("third read: Err = %v, Missing = %v; want no error and process util present", third.Err, third.Missing)
	}

	// The first call asks for everything; each later one from the newest
	// sample the previous one returned.
	if diff := cmp.Diff([]uint64{0, 1_000_300, 2_000_000}, f.lastSeen); diff != "" {
		t.Errorf("lastSeen passed to GetProcessUtilization (-want +got):\n%s", diff)
	}
	// Other GPUs keep their own lastSeen.
	if got := m.gpus[0].lastSeen; !cmp.Equal(got, []uint64{0, 0, 0}) {
		t.Errorf("GPU 0 lastSeen = %v, want [0 0 0]", got)
	}
}

func smUtil(d gpu.Device) map[uint32]float64 {
	out := make(map[uint32]float64)
	for _, p := range d.Processes {
		out[p.PID] = p.SMUtil
	}
	return out
}

func TestReadProcessUtil(t *testing.T) {
	procs := []nvml.ProcessInfo{
		{Pid: 100, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
		{Pid: 200, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
	}
	tests := []struct {
		name        string
		samples     []nvml.ProcessUtilizationSample
		ret         nvml.Return
		panics      bool
		want        map[uint32]float64
		wantMissing bool
	}{
		{
			name: "no samples (NOT_FOUND) means 0 %",
			want: map[uint32]float64{100: 0, 200: 0},
		},
		{
			name:    "sample above 100 % dropped",
			samples: []nvml.ProcessUtilizationSample{{Pid: 100, TimeStamp: 10, SmUtil: 101}, {Pid: 200, TimeStamp: 10, SmUtil: 20}},
			want:    map[uint32]float64{100: 0, 200: 20},
		},
		{
			name:    "bad sample does not hide an earlier good one",
			samples: []nvml.ProcessUtilizationSample{{Pid: 100, TimeStamp: 10, SmUtil: 15}, {Pid: 100, TimeStamp: 20, SmUtil: 4000}},
			want:    map[uint32]float64{100: 15, 200: 0},
		},
		{
			name:    "unknown PID dropped",
			samples: []nvml.ProcessUtilizationSample{{Pid: 999, TimeStamp: 10, SmUtil: 90}, {Pid: 100, TimeStamp: 10, SmUtil: 5}},
			want:    map[uint32]float64{100: 5, 200: 0},
		},
		{
			name: "latest sample per PID wins",
			samples: []nvml.ProcessUtilizationSample{
				{Pid: 200, TimeStamp: 30, SmUtil: 33},
				{Pid: 200, TimeStamp: 10, SmUtil: 11},
				{Pid: 200, TimeStamp: 20, SmUtil: 22},
			},
			want: map[uint32]float64{100: 0, 200: 33},
		},
		{
			name:        "not supported",
			ret:         nvml.ERROR_NOT_SUPPORTED,
			want:        map[uint32]float64{100: 0, 200: 0},
			wantMissing: true,
		},
		{
			name:        "other error",
			ret:         nvml.ERROR_UNKNOWN,
			want:        map[uint32]float64{100: 0, 200: 0},
			wantMissing: true,
		},
		{
			name:        "go-nvml panics re-slicing its buffer",
			panics:      true,
			want:        map[uint32]float64{100: 0, 200: 0},
			wantMissing: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMachine(dgxa100.New())
			f := m.gpus[0]
			f.compute, f.samples = procs, tt.samples
			if tt.ret != nvml.SUCCESS {
				f.setFail("GetProcessUtilization", tt.ret)
			}
			if tt.panics {
				m.devs[0].GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
					var buf []nvml.ProcessUtilizationSample
					n := 3
					return buf[:n], nvml.SUCCESS
				}
			}
			got := read(t, New(m.srv, testLogger(t))).Devices[0]
			if got.Err != nil {
				t.Fatalf("Err = %v, want nil", got.Err)
			}
			if diff := cmp.Diff(tt.want, smUtil(got)); diff != "" {
				t.Errorf("SMUtil mismatch (-want +got):\n%s", diff)
			}
			if missing := !got.Has(gpu.FieldProcessUtil); missing != tt.wantMissing {
				t.Errorf("process util missing = %v, want %v (Missing %v)", missing, tt.wantMissing, got.Missing)
			}
		})
	}
}

func TestReadOptionalFieldErrors(t *testing.T) {
	tests := []struct {
		call    string
		missing []gpu.Field
		zero    func(*gpu.Device) // what the device reads as, besides Missing
	}{
		{"GetUtilizationRates", []gpu.Field{gpu.FieldUtil, gpu.FieldMemCopyUtil}, func(d *gpu.Device) { d.Util, d.MemCopyUtil = 0, 0 }},
		{"GetEncoderUtilization", []gpu.Field{gpu.FieldEncUtil}, func(d *gpu.Device) { d.EncUtil = 0 }},
		{"GetDecoderUtilization", []gpu.Field{gpu.FieldDecUtil}, func(d *gpu.Device) { d.DecUtil = 0 }},
		{"GetPowerUsage", []gpu.Field{gpu.FieldPower}, func(d *gpu.Device) { d.PowerWatts = 0 }},
		{"GetTotalEnergyConsumption", []gpu.Field{gpu.FieldEnergy}, func(d *gpu.Device) { d.EnergyMilliJoules = 0 }},
		{"GetTemperature", []gpu.Field{gpu.FieldTemp}, func(d *gpu.Device) { d.TempC = 0 }},
		{"GetFieldValues", []gpu.Field{gpu.FieldMemTemp}, func(d *gpu.Device) { d.MemTempC = 0 }},
		{"GetClockInfo(SM)", []gpu.Field{gpu.FieldSMClock}, func(d *gpu.Device) { d.SMClockMHz = 0 }},
		{"GetClockInfo(MEM)", []gpu.Field{gpu.FieldMemClock}, func(d *gpu.Device) { d.MemClockMHz = 0 }},
		{"GetName", nil, func(d *gpu.Device) { d.Model = "" }},
	}
	for _, ret := range []nvml.Return{nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NO_PERMISSION} {
		for _, tt := range tests {
			t.Run(ret.Error()+"/"+tt.call, func(t *testing.T) {
				m := newMachine(dgxa100.New())
				m.gpus[4].setFail(tt.call, ret)
				got := read(t, New(m.srv, testLogger(t)))

				want := wantDevice(4, "Mock NVIDIA A100-SXM4-40GB", 40*gib)
				tt.zero(&want)
				want.Missing = tt.missing
				if diff := cmp.Diff(want, got.Devices[4], cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("device mismatch (-want +got):\n%s", diff)
				}
				if other := got.Devices[3]; len(other.Missing) != 0 || other.Err != nil {
					t.Errorf("GPU 3: Missing = %v, Err = %v; want neither", other.Missing, other.Err)
				}
			})
		}
	}
}

func TestReadMemoryTemp(t *testing.T) {
	tests := []struct {
		name  string
		value nvml.FieldValue
		want  float64 // 0: missing
	}{
		{"unsigned int", uintField(nvml.FI_DEV_MEMORY_TEMP, 71), 71},
		{"field not supported", nvml.FieldValue{FieldId: nvml.FI_DEV_MEMORY_TEMP, NvmlReturn: uint32(nvml.ERROR_NOT_SUPPORTED)}, 0},
		{"zero means no sensor", uintField(nvml.FI_DEV_MEMORY_TEMP, 0), 0},
		{"unknown value type", nvml.FieldValue{FieldId: nvml.FI_DEV_MEMORY_TEMP, ValueType: 99}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMachine(dgxa100.New())
			m.gpus[0].memTemp = tt.value
			got := read(t, New(m.srv, nil)).Devices[0]
			if got.MemTempC != tt.want {
				t.Errorf("MemTempC = %v, want %v", got.MemTempC, tt.want)
			}
			if has := got.Has(gpu.FieldMemTemp); has != (tt.want != 0) {
				t.Errorf("Has(FieldMemTemp) = %v, want %v", has, tt.want != 0)
			}
		})
	}
}

func TestFieldValue(t *testing.T) {
	tests := []struct {
		name string
		fv   func() nvml.FieldValue
		want float64
	}{
		{"double", func() nvml.FieldValue {
			fv := nvml.FieldValue{ValueType: uint32(nvml.VALUE_TYPE_DOUBLE)}
			putUint64(&fv, 0x4051400000000000) // 69.0
			return fv
		}, 69},
		{"unsigned long long", func() nvml.FieldValue {
			fv := nvml.FieldValue{ValueType: uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)}
			putUint64(&fv, 1<<40)
			return fv
		}, 1 << 40},
		{"signed int", func() nvml.FieldValue {
			fv := nvml.FieldValue{ValueType: uint32(nvml.VALUE_TYPE_SIGNED_INT)}
			v := int32(-5)
			putUint64(&fv, uint64(uint32(v)))
			return fv
		}, -5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := fieldValue(tt.fv())
			if !ok || got != tt.want {
				t.Errorf("fieldValue = %v, %v; want %v, true", got, ok, tt.want)
			}
		})
	}
}

func putUint64(fv *nvml.FieldValue, v uint64) {
	binary.NativeEndian.PutUint64(fv.Value[:], v)
}

func TestReadOutOfRangeUtil(t *testing.T) {
	m := newMachine(dgxa100.New())
	m.gpus[0].util = nvml.Utilization{Gpu: 250, Memory: 30}
	m.gpus[0].enc = 1 << 31
	got := read(t, New(m.srv, nil)).Devices[0]
	if diff := cmp.Diff([]gpu.Field{gpu.FieldUtil, gpu.FieldEncUtil}, got.Missing); diff != "" {
		t.Errorf("Missing mismatch (-want +got):\n%s", diff)
	}
	if got.Util != 0 || got.MemCopyUtil != 30 || got.EncUtil != 0 {
		t.Errorf("Util, MemCopyUtil, EncUtil = %v, %v, %v; want 0, 30, 0", got.Util, got.MemCopyUtil, got.EncUtil)
	}
}

func TestReadGPULost(t *testing.T) {
	const lost = 3
	tests := []struct {
		call    string
		setup   func(m *machine)
		wantErr string
	}{
		{
			call: "DeviceGetHandleByIndex",
			setup: func(m *machine) {
				get := m.srv.DeviceGetHandleByIndexFunc
				m.srv.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
					if i == lost {
						return nil, nvml.ERROR_GPU_IS_LOST
					}
					return get(i)
				}
			},
			wantErr: "gpu 3: DeviceGetHandleByIndex: ERROR_GPU_IS_LOST",
		},
		{
			call:    "GetUUID",
			setup:   func(m *machine) { m.gpus[lost].setFail("GetUUID", nvml.ERROR_GPU_IS_LOST) },
			wantErr: "gpu 3: GetUUID: ERROR_GPU_IS_LOST",
		},
		{
			call:    "GetMemoryInfo_v2",
			setup:   func(m *machine) { m.gpus[lost].setFail("GetMemoryInfo_v2", nvml.ERROR_GPU_IS_LOST) },
			wantErr: "gpu 3: GetMemoryInfo_v2: ERROR_GPU_IS_LOST",
		},
		{
			call: "GetMemoryInfo",
			setup: func(m *machine) {
				m.gpus[lost].setFail("GetMemoryInfo_v2", nvml.ERROR_NOT_SUPPORTED)
				m.gpus[lost].setFail("GetMemoryInfo", nvml.ERROR_GPU_IS_LOST)
			},
			wantErr: "gpu 3: GetMemoryInfo: ERROR_GPU_IS_LOST",
		},
		{
			call:    "GetPowerUsage",
			setup:   func(m *machine) { m.gpus[lost].setFail("GetPowerUsage", nvml.ERROR_GPU_IS_LOST) },
			wantErr: "gpu 3: GetPowerUsage: ERROR_GPU_IS_LOST",
		},
		{
			call:    "GetComputeRunningProcesses",
			setup:   func(m *machine) { m.gpus[lost].setFail("GetComputeRunningProcesses", nvml.ERROR_GPU_IS_LOST) },
			wantErr: "gpu 3: GetComputeRunningProcesses: ERROR_GPU_IS_LOST",
		},
		{
			call:    "GetProcessUtilization",
			setup:   func(m *machine) { m.gpus[lost].setFail("GetProcessUtilization", nvml.ERROR_GPU_IS_LOST) },
			wantErr: "gpu 3: GetProcessUtilization: ERROR_GPU_IS_LOST",
		},
	}
	for _, tt := range tests {
		t.Run(tt.call, func(t *testing.T) {
			m := newMachine(dgxa100.New())
			tt.setup(m)
			got := read(t, New(m.srv, testLogger(t)))
			if len(got.Devices) != 8 {
				t.Fatalf("got %d devices, want 8", len(got.Devices))
			}
			for i, d := range got.Devices {
				if i == lost {
					if d.Err == nil || d.Err.Error() != tt.wantErr {
						t.Errorf("GPU %d: Err = %v, want %q", i, d.Err, tt.wantErr)
					}
					if !errors.Is(d.Err, nvml.ERROR_GPU_IS_LOST) {
						t.Errorf("GPU %d: errors.Is(Err, ERROR_GPU_IS_LOST) = false", i)
					}
					if d.Index != lost {
						t.Errorf("GPU %d: Index = %d", i, d.Index)
					}
					continue
				}
				want := wantDevice(i, "Mock NVIDIA A100-SXM4-40GB", 40*gib)
				if diff := cmp.Diff(want, d, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("GPU %d mismatch (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestReadEnergyCounter(t *testing.T) {
	m := newMachine(dgxh100.New())
	s := New(m.srv, nil)
	// A driver reload resets the counter; the source passes it through
	// and leaves the reset to the meter.
	for _, mj := range []uint64{123_456_789_012, 123_456_790_000, 42, 1<<64 - 1} {
		m.gpus[5].energyMJ = mj
		got := read(t, s).Devices[5]
		if got.EnergyMilliJoules != mj || !got.Has(gpu.FieldEnergy) {
			t.Errorf("EnergyMilliJoules = %d (Missing %v), want %d", got.EnergyMilliJoules, got.Missing, mj)
		}
	}
}

func TestReadMIG(t *testing.T) {
	m := newMachine(dgxa100.New())
	dev := m.devs[0]
	if ret, _ := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
	// Create the instances through the mock, as nvidia-smi mig would: a
	// 3g.20gb GPU instance split in two compute instances, and a 1g.5gb
	// one.
	gi3 := createGI(t, dev, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	gi1 := createGI(t, dev, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	ciA := createCI(t, gi3, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE)
	ciB := createCI(t, gi3, nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE)
	ciC := createCI(t, gi1, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE)
	giID := func(gi nvml.GpuInstance) int { info, _ := gi.GetInfo(); return int(info.Id) }
	ciID := func(ci nvml.ComputeInstance) int { info, _ := ci.GetInfo(); return int(info.Id) }
	mem3 := dgxa100.MIGProfiles.GpuInstanceProfiles[nvml.GPU_INSTANCE_PROFILE_3_SLICE].MemorySizeMB * mib
	mem1 := dgxa100.MIGProfiles.GpuInstanceProfiles[nvml.GPU_INSTANCE_PROFILE_1_SLICE].MemorySizeMB * mib

	const na = 0xFFFFFFFF
	m.gpus[0].mig = []nvml.Device{
		migDevice{
			uuid: "MIG-aaaa", name: "NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb",
			gi: giID(gi3), ci: ciID(ciA),
			memory:  nvml.Memory_v2{Total: mem3, Used: 6 * gib},
			compute: []nvml.ProcessInfo{{Pid: 500, UsedGpuMemory: 2 * gib, GpuInstanceId: uint32(giID(gi3)), ComputeInstanceId: uint32(ciID(ciA))}},
		}.handle(),
		nil, // an index without a MIG device
		migDevice{
			uuid: "MIG-bbbb", name: "NVIDIA A100-SXM4-40GB MIG 2c.3g.20gb",
			gi: giID(gi3), ci: ciID(ciB),
			memory: nvml.Memory_v2{Total: mem3, Used: 6 * gib},
			// NVML left the instance ids out; the handle's apply.
			compute: []nvml.ProcessInfo{{Pid: 501, UsedGpuMemory: 4 * gib, GpuInstanceId: na, ComputeInstanceId: na}},
		}.handle(),
		migDevice{
			uuid: "MIG-cccc", name: "NVIDIA A100-SXM4-40GB",
			gi: giID(gi1), ci: ciID(ciC),
			memory: nvml.Memory_v2{Total: mem1, Used: 1 * gib},
			attrs:  nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: mem1 / mib},
			compute: []nvml.ProcessInfo{
				{Pid: 502, UsedGpuMemory: 1 * gib, GpuInstanceId: uint32(giID(gi1)), ComputeInstanceId: uint32(ciID(ciC))},
			},
		}.handle(),
	}
	// Per-process samples exist, but under MIG they must not be asked for.
	m.gpus[0].samples = []nvml.ProcessUtilizationSample{{Pid: 500, TimeStamp: 10, SmUtil: 50}}

	got := read(t, New(m.srv, testLogger(t)))
	d := got.Devices[0]

	want := wantDevice(0, "Mock NVIDIA A100-SXM4-40GB", 40*gib)
	want.Util, want.MemCopyUtil = 0, 0
	want.Missing = []gpu.Field{gpu.FieldUtil, gpu.FieldMemCopyUtil, gpu.FieldProcessUtil}
	want.MIGEnabled = true
	want.MIG = []gpu.MIGInstance{
		{GPUInstanceID: giID(gi3), UUID: "MIG-aaaa", Profile: "3g.20gb", MemoryTotal: mem3, MemoryUsed: 6 * gib},
		{GPUInstanceID: giID(gi1), UUID: "MIG-cccc", Profile: "1g.5gb", MemoryTotal: mem1, MemoryUsed: 1 * gib},
	}
	want.Processes = []gpu.Process{
		{PID: 500, Type: gpu.Compute, MemoryUsed: 2 * gib, GPUInstanceID: giID(gi3), ComputeInstanceID: ciID(ciA)},
		{PID: 501, Type: gpu.Compute, MemoryUsed: 4 * gib, GPUInstanceID: giID(gi3), ComputeInstanceID: ciID(ciB)},
		{PID: 502, Type: gpu.Compute, MemoryUsed: 1 * gib, GPUInstanceID: giID(gi1), ComputeInstanceID: ciID(ciC)},
	}
	if diff := cmp.Diff(want, d, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("MIG device mismatch (-want +got):\n%s", diff)
	}
	if n := len(dev.GetUtilizationRatesCalls()); n != 0 {
		t.Errorf("GetUtilizationRates called %d times under MIG", n)
	}
	if n := len(dev.GetProcessUtilizationCalls()); n != 0 {
		t.Errorf("GetProcessUtilization called %d times under MIG", n)
	}
	if got.Devices[1].MIGEnabled || got.Devices[1].MIG != nil {
		t.Errorf("GPU 1: MIGEnabled = %v, MIG = %v; want no MIG", got.Devices[1].MIGEnabled, got.Devices[1].MIG)
	}
}

func createGI(t *testing.T, d *server.Device, profile int) nvml.GpuInstance {
	t.Helper()
	info, ret := d.GetGpuInstanceProfileInfo(profile)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceProfileInfo(%d): %v", profile, ret)
	}
	gi, ret := d.CreateGpuInstance(&info)
	if ret != nvml.SUCCESS {
		t.Fatalf("CreateGpuInstance: %v", ret)
	}
	return gi
}

func createCI(t *testing.T, gi nvml.GpuInstance, profile int) nvml.ComputeInstance {
	t.Helper()
	info, ret := gi.GetComputeInstanceProfileInfo(profile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetComputeInstanceProfileInfo(%d): %v", profile, ret)
	}
	ci, ret := gi.CreateComputeInstance(&info)
	if ret != nvml.SUCCESS {
		t.Fatalf("CreateComputeInstance: %v", ret)
	}
	return ci
}

func TestReadOddAnswers(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(m *machine)
		wantErr string // prefix of GPU 2's error; empty: no error
		check   func(t *testing.T, d gpu.Device)
	}{
		{
			name: "nil handle",
			setup: func(m *machine) {
				get := m.srv.DeviceGetHandleByIndexFunc
				m.srv.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
					if i == 2 {
						return nil, nvml.SUCCESS
					}
					return get(i)
				}
			},
			wantErr: "gpu 2: DeviceGetHandleByIndex: no handle",
		},
		{
			name:    "empty UUID",
			setup:   func(m *machine) { m.devs[2].UUID = "" },
			wantErr: "gpu 2: GetUUID: empty UUID",
		},
		{
			name: "call that panics",
			setup: func(m *machine) {
				m.devs[2].GetPowerUsageFunc = nil // the mock panics on a nil func
			},
			wantErr: "gpu 2: NVML call panicked: ",
		},
		{
			name: "thousands of processes",
			setup: func(m *machine) {
				f := m.gpus[2]
				for pid := range uint32(20_000) {
					f.compute = append(f.compute, nvml.ProcessInfo{Pid: pid, UsedGpuMemory: 1, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF})
					f.graphics = append(f.graphics, nvml.ProcessInfo{Pid: pid, UsedGpuMemory: 2, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF})
					f.samples = append(f.samples, nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: uint64(pid) + 1, SmUtil: pid % 200})
				}
			},
			check: func(t *testing.T, d gpu.Device) {
				if len(d.Processes) != 20_000 {
					t.Fatalf("got %d processes, want 20000", len(d.Processes))
				}
				for _, p := range d.Processes {
					want := float64(p.PID % 200)
					if want > 100 {
						want = 0
					}
					if p.Type != gpu.Compute || p.MemoryUsed != 2 || p.SMUtil != want {
						t.Fatalf("process %+v, want compute, 2 bytes, %v %%", p, want)
					}
				}
			},
		},
		{
			name: "huge MIG device count",
			setup: func(m *machine) {
				m.devs[2].SetMigMode(nvml.DEVICE_MIG_ENABLE)
				m.devs[2].GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 1 << 40, nvml.SUCCESS }
			},
			check: func(t *testing.T, d gpu.Device) {
				if !d.MIGEnabled || len(d.MIG) != 0 {
					t.Errorf("MIGEnabled = %v, MIG = %v; want enabled with no instances", d.MIGEnabled, d.MIG)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMachine(dgxa100.New())
			tt.setup(m)
			got := read(t, New(m.srv, testLogger(t)))
			d := got.Devices[2]
			if tt.wantErr != "" {
				if d.Err == nil || !strings.HasPrefix(d.Err.Error(), tt.wantErr) {
					t.Errorf("Err = %v, want it to start with %q", d.Err, tt.wantErr)
				}
			} else if d.Err != nil {
				t.Errorf("Err = %v, want nil", d.Err)
			}
			if tt.check != nil {
				tt.check(t, d)
			}
			for _, i := range []int{1, 3} {
				want := wantDevice(i, "Mock NVIDIA A100-SXM4-40GB", 40*gib)
				if diff := cmp.Diff(want, got.Devices[i], cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("GPU %d mismatch (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestReadDeviceCount(t *testing.T) {
	tests := []struct {
		name    string
		count   int
		ret     nvml.Return
		wantErr string
	}{
		{"fails", 0, nvml.ERROR_UNINITIALIZED, "DeviceGetCount: ERROR_UNINITIALIZED"},
		{"negative", -1, nvml.SUCCESS, "DeviceGetCount: implausible device count -1"},
		{"huge", 1 << 30, nvml.SUCCESS, "DeviceGetCount: implausible device count 1073741824"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := dgxa100.New()
			srv.DeviceGetCountFunc = func() (int, nvml.Return) { return tt.count, tt.ret }
			_, err := New(srv, nil).Read(context.Background(), now)
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("Read error = %v, want %q", err, tt.wantErr)
			}
		})
	}

	t.Run("no GPUs", func(t *testing.T) {
		got := read(t, New(dgxa100.NewWithGPUs(), nil))
		if len(got.Devices) != 0 || got.DriverVersion != "550.54.15" {
			t.Errorf("got %+v, want no devices and the driver version", got)
		}
	})
}

func TestReadDriverVersionMissing(t *testing.T) {
	m := newMachine(dgxa100.New())
	m.srv.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
	got := read(t, New(m.srv, nil))
	if got.DriverVersion != "" || len(got.Devices) != 8 || got.Devices[0].Err != nil {
		t.Errorf("DriverVersion = %q, %d devices, GPU 0 Err = %v; want empty, 8, nil",
			got.DriverVersion, len(got.Devices), got.Devices[0].Err)
	}
}

func TestReadContext(t *testing.T) {
	m := newMachine(dgxa100.New())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := New(m.srv, nil).Read(ctx, now); !errors.Is(err, context.Canceled) {
		t.Errorf("Read error = %v, want context.Canceled", err)
	}
}

func TestMissingSymbols(t *testing.T) {
	m := newMachine(dgxa100.New())
	m.srv.LookupSymbolFunc = func(name string) error {
		switch name {
		case "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetMPSComputeRunningProcesses":
			return errors.New("not found")
		}
		return nil
	}
	for _, d := range m.devs {
		d.GetMemoryInfo_v2Func = nil // the mock panics if it is called
		d.GetTotalEnergyConsumptionFunc = nil
		d.GetMPSComputeRunningProcessesFunc = nil
	}
	got := read(t, New(m.srv, nil)).Devices[0]
	if got.Err != nil {
		t.Fatalf("Err = %v", got.Err)
	}
	if diff := cmp.Diff([]gpu.Field{gpu.FieldEnergy}, got.Missing); diff != "" {
		t.Errorf("Missing mismatch (-want +got):\n%s", diff)
	}
	if want := uint64(gib + reserved); got.MemoryUsed != want {
		t.Errorf("MemoryUsed = %d, want %d from GetMemoryInfo", got.MemoryUsed, want)
	}
}

func TestClose(t *testing.T) {
	srv := dgxa100.New()
	shutdowns := 0
	srv.ShutdownFunc = func() nvml.Return { shutdowns++; return nvml.SUCCESS }

	s := New(srv, nil)
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if shutdowns != 0 {
		t.Errorf("Close shut down a library the caller owns (%d times)", shutdowns)
	}
	if _, err := s.Read(context.Background(), now); err == nil {
		t.Errorf("Read after Close: no error")
	}

	owned := New(srv, nil)
	owned.owned = true
	if err := owned.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := owned.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if shutdowns != 1 {
		t.Errorf("Shutdown called %d times, want 1", shutdowns)
	}
}

func TestOpenBadLibrary(t *testing.T) {
	tests := []struct {
		name, path string
		wantErr    []string
	}{
		{
			name:    "missing file",
			path:    "/nonexistent/libnvidia-ml.so.1",
			wantErr: []string{"load NVIDIA driver library /nonexistent/libnvidia-ml.so.1", "is the NVIDIA driver installed?", "No such file"},
		},
		{
			// Not NVML: go-nvml would call a missing nvmlInit and crash.
			name:    "another library",
			path:    "libc.so.6",
			wantErr: []string{"libc.so.6: not an NVML library", "nvmlInit_v2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(tt.path, nil)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded, want an error", tt.path)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestInitError(t *testing.T) {
	err := initError("libnvidia-ml.so.1", nvml.ERROR_DRIVER_NOT_LOADED)
	if !errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) || !strings.Contains(err.Error(), "kernel driver is not loaded") {
		t.Errorf("initError = %v", err)
	}
}

// BenchmarkRead8GPUs reads an 8-GPU machine with 32 processes per GPU, each
// in the compute list (every fourth also in the graphics list) and with a
// utilisation sample. The mock records every call, so its figures include
// that bookkeeping.
func BenchmarkRead8GPUs(b *testing.B) {
	m := newMachine(dgxh100.New())
	for i, f := range m.gpus {
		for j := range 32 {
			pid := uint32(10_000*i + j)
			f.compute = append(f.compute, nvml.ProcessInfo{Pid: pid, UsedGpuMemory: gib, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF})
			if j%4 == 0 {
				f.graphics = append(f.graphics, nvml.ProcessInfo{Pid: pid, UsedGpuMemory: gib, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF})
			}
			f.samples = append(f.samples, nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: uint64(j + 1), SmUtil: uint32(j)})
		}
	}
	s := New(m.srv, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		// Forget lastSeen so that every read gets the 32 samples again.
		clear(s.lastSeen)
		sample, err := s.Read(ctx, now)
		if err != nil || len(sample.Devices) != 8 || sample.Devices[7].Err != nil {
			b.Fatalf("Read: %v", err)
		}
	}
}
