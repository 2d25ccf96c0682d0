package nvml

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/internal/gpu"
)

// deviceReader reads one GPU into d. Once d.Err is set the GPU is not read
// further.
type deviceReader struct {
	s *Source
	d gpu.Device
}

// readDevice reads GPU i. It turns a panic inside go-nvml (or a fake) into
// the device's Err, so that one GPU answering nonsense never stops the
// others or the agent.
func (s *Source) readDevice(i int) (d gpu.Device) {
	r := &deviceReader{s: s, d: gpu.Device{Index: i}}
	defer func() {
		if p := recover(); p != nil {
			d = gpu.Device{Index: i, UUID: r.d.UUID, Model: r.d.Model,
				Err: fmt.Errorf("gpu %d: NVML call panicked: %v", i, p)}
		}
	}()
	r.read()
	return r.d
}

// fail records that a call that matters failed: the device is not read
// further.
func (r *deviceReader) fail(call string, err error) {
	r.d.Err = fmt.Errorf("gpu %d: %s: %w", r.d.Index, call, err)
}

// missing adds fields to d.Missing, once each.
func (r *deviceReader) missing(fields ...gpu.Field) {
	for _, f := range fields {
		if r.d.Has(f) {
			r.d.Missing = append(r.d.Missing, f)
		}
	}
}

// optional reports whether an optional call succeeded. When it did not,
// fields are marked missing; a lost GPU fails the device, and errors other
// than NOT_SUPPORTED are logged at debug level, since they repeat on every
// read.
func (r *deviceReader) optional(call string, ret nvml.Return, fields ...gpu.Field) bool {
	switch ret {
	case nvml.SUCCESS:
		return true
	case nvml.ERROR_GPU_IS_LOST:
		r.fail(call, ret)
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		r.s.logger.Debug("NVML value not read", "gpu", r.d.Index, "call", call, "err", ret)
	}
	r.missing(fields...)
	return false
}

// percent checks a utilisation NVML gave; above 100 it is nonsense and the
// field is marked missing.
func (r *deviceReader) percent(call string, v uint32, f gpu.Field) float64 {
	if v > 100 {
		r.s.logger.Debug("NVML value out of range", "gpu", r.d.Index, "call", call, "value", v)
		r.missing(f)
		return 0
	}
	return float64(v)
}

func (r *deviceReader) read() {
	h, ret := r.s.lib.DeviceGetHandleByIndex(r.d.Index)
	if ret != nvml.SUCCESS {
		r.fail("DeviceGetHandleByIndex", ret)
		return
	}
	if h == nil {
		r.fail("DeviceGetHandleByIndex", errors.New("no handle"))
		return
	}

	uuid, ret := h.GetUUID()
	if ret != nvml.SUCCESS {
		r.fail("GetUUID", ret)
		return
	}
	if uuid == "" {
		// The UUID keys the GPU in the ledger; an empty one would merge
		// GPUs.
		r.fail("GetUUID", errors.New("empty UUID"))
		return
	}
	r.d.UUID = uuid

	if name, ret := h.GetName(); r.optional("GetName", ret) {
		r.d.Model = name
	}
	if r.d.Err != nil {
		return
	}

	var call string
	r.d.MemoryTotal, r.d.MemoryUsed, r.d.MemoryFree, call, ret = r.memoryInfo(h)
	if ret != nvml.SUCCESS {
		r.fail(call, ret)
		return
	}

	if r.s.sym.mig {
		if current, _, ret := h.GetMigMode(); r.optional("GetMigMode", ret) {
			r.d.MIGEnabled = current == nvml.DEVICE_MIG_ENABLE
		}
		if r.d.Err != nil {
			return
		}
	}

	for _, step := range gaugeSteps {
		step(r, h)
		if r.d.Err != nil {
			return
		}
	}
	if r.d.MIGEnabled {
		r.readMIG(h)
		return
	}
	r.readProcesses(h)
	if r.d.Err != nil {
		return
	}
	r.readProcessUtil(h)
}

// gaugeSteps read a device's optional values, in order; each stops early
// when the GPU turns out lost.
var gaugeSteps = [...]func(*deviceReader, nvml.Device){
	(*deviceReader).readUtil,
	(*deviceReader).readCodecUtil,
	(*deviceReader).readPower,
	(*deviceReader).readTemps,
	(*deviceReader).readClocks,
}

func (r *deviceReader) readUtil(h nvml.Device) {
	if r.d.MIGEnabled {
		// Under MIG, NVML gives neither device utilisation (the engines are
		// split between instances and nvmlDeviceGetUtilizationRates answers
		// NOT_SUPPORTED) nor per-process utilisation (the documented
		// limitation of nvmlDeviceGetProcessUtilization and
		// nvmlDeviceGetProcessesUtilizationInfo). Say so instead of
		// reporting idle GPUs.
		r.missing(gpu.FieldUtil, gpu.FieldMemCopyUtil, gpu.FieldProcessUtil)
		return
	}
	if u, ret := h.GetUtilizationRates(); r.optional("GetUtilizationRates", ret, gpu.FieldUtil, gpu.FieldMemCopyUtil) {
		r.d.Util = r.percent("GetUtilizationRates", u.Gpu, gpu.FieldUtil)
		r.d.MemCopyUtil = r.percent("GetUtilizationRates", u.Memory, gpu.FieldMemCopyUtil)
	}
}

func (r *deviceReader) readCodecUtil(h nvml.Device) {
	if u, _, ret := h.GetEncoderUtilization(); r.optional("GetEncoderUtilization", ret, gpu.FieldEncUtil) {
		r.d.EncUtil = r.percent("GetEncoderUtilization", u, gpu.FieldEncUtil)
	}
	if r.d.Err != nil {
		return
	}
	if u, _, ret := h.GetDecoderUtilization(); r.optional("GetDecoderUtilization", ret, gpu.FieldDecUtil) {
		r.d.DecUtil = r.percent("GetDecoderUtilization", u, gpu.FieldDecUtil)
	}
}

func (r *deviceReader) readPower(h nvml.Device) {
	if mw, ret := h.GetPowerUsage(); r.optional("GetPowerUsage", ret, gpu.FieldPower) {
		r.d.PowerWatts = float64(mw) / 1000
	}
	if r.d.Err != nil {
		return
	}
	if !r.s.sym.energy {
		r.missing(gpu.FieldEnergy)
		return
	}
	// The counter is passed through as NVML gives it; a decrease after a
	// driver reload is the meter's to handle.
	if mj, ret := h.GetTotalEnergyConsumption(); r.optional("GetTotalEnergyConsumption", ret, gpu.FieldEnergy) {
		r.d.EnergyMilliJoules = mj
	}
}

func (r *deviceReader) readTemps(h nvml.Device) {
	if t, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); r.optional("GetTemperature", ret, gpu.FieldTemp) {
		r.d.TempC = float64(t)
	}
	if r.d.Err != nil {
		return
	}
	r.readMemoryTemp(h)
}

func (r *deviceReader) readClocks(h nvml.Device) {
	if c, ret := h.GetClockInfo(nvml.CLOCK_SM); r.optional("GetClockInfo(SM)", ret, gpu.FieldSMClock) {
		r.d.SMClockMHz = float64(c)
	}
	if r.d.Err != nil {
		return
	}
	if c, ret := h.GetClockInfo(nvml.CLOCK_MEM); r.optional("GetClockInfo(MEM)", ret, gpu.FieldMemClock) {
		r.d.MemClockMHz = float64(c)
	}
}

// memoryInfo prefers nvmlDeviceGetMemoryInfo_v2, whose used memory leaves
// out what the driver reserves (as nvidia-smi shows it), and falls back to
// the first version on drivers without it. call names the call that failed.
func (r *deviceReader) memoryInfo(h nvml.Device) (total, used, free uint64, call string, ret nvml.Return) {
	if r.s.sym.memoryV2 {
		m, ret := h.GetMemoryInfo_v2()
		switch ret {
		case nvml.SUCCESS:
			return m.Total, m.Used, m.Free, "", ret
		case nvml.ERROR_GPU_IS_LOST:
			return 0, 0, 0, "GetMemoryInfo_v2", ret
		}
	}
	m, ret := h.GetMemoryInfo()
	return m.Total, m.Used, m.Free, "GetMemoryInfo", ret
}

// readMemoryTemp reads the memory (HBM) temperature, which NVML exposes
// only as the field value FI_DEV_MEMORY_TEMP. GPUs without a memory sensor
// answer NOT_SUPPORTED or 0; a memory at 0 °C in a running GPU is not a
// reading, so 0 is taken as missing too.
func (r *deviceReader) readMemoryTemp(h nvml.Device) {
	const call = "GetFieldValues(FI_DEV_MEMORY_TEMP)"
	if !r.s.sym.fieldValues {
		r.missing(gpu.FieldMemTemp)
		return
	}
	values := []nvml.FieldValue{{FieldId: nvml.FI_DEV_MEMORY_TEMP}}
	if !r.optional(call, h.GetFieldValues(values), gpu.FieldMemTemp) {
		return
	}
	if !r.optional(call, nvml.Return(values[0].NvmlReturn), gpu.FieldMemTemp) {
		return
	}
	v, ok := fieldValue(values[0])
	if !ok || v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		r.missing(gpu.FieldMemTemp)
		return
	}
	r.d.MemTempC = v
}

// fieldValue decodes a field value's union by its type.
func fieldValue(v nvml.FieldValue) (float64, bool) {
	b := v.Value[:]
	switch nvml.ValueType(v.ValueType) {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(binary.NativeEndian.Uint64(b)), true
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(binary.NativeEndian.Uint32(b)), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(binary.NativeEndian.Uint64(b)), true
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(binary.NativeEndian.Uint64(b))), true
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(binary.NativeEndian.Uint32(b))), true
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(binary.NativeEndian.Uint16(b)), true
	default:
		return 0, false
	}
}
