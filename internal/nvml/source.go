// Package nvml is the GPU source that reads NVIDIA GPUs through NVML, using
// github.com/NVIDIA/go-nvml. go-nvml loads libnvidia-ml.so with dlopen at
// run time, so the binary builds and starts on hosts without a driver and
// only Open fails there.
package nvml

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/internal/gpu"
)

// defaultLibrary is the soname the NVIDIA driver installs.
const defaultLibrary = "libnvidia-ml.so.1"

// maxDevices bounds the device count NVML may report; anything above is an
// odd answer, not a machine, and would only make Read allocate wildly.
const maxDevices = 1024

var errClosed = errors.New("nvml source closed")

// Source reads GPUs through NVML. Reads are serialised: NVML is
// thread-safe, but the per-GPU lastSeen timestamps are not.
type Source struct {
	lib    nvml.Interface
	logger *slog.Logger
	// owned is set when Open loaded the library, so Close shuts it down.
	owned bool
	sym   symbols

	mu     sync.Mutex
	closed bool
	// lastSeen holds, per GPU UUID, the newest process-utilisation sample
	// timestamp (µs) read so far, so each Read asks NVML only for newer
	// samples.
	lastSeen map[string]uint64
	// topo is the GPUs' topology by UUID, read once (see applyTopology);
	// topoLogged the topology failures already logged.
	topo       map[string]gpu.Topology
	topoLogged map[string]bool
}

// symbols says which of the newer NVML entry points the loaded library
// has. go-nvml links every entry point unresolved and binds it on first
// call, so calling one that an older driver lacks ends the process instead
// of returning ERROR_FUNCTION_NOT_FOUND.
type symbols struct {
	memoryV2    bool
	mpsProcs    bool
	mig         bool
	energy      bool
	fieldValues bool
	nvlink      bool
	topology    bool
}

// New returns a Source over lib, which must already be initialised. The
// caller owns lib: Close does not shut it down.
func New(lib nvml.Interface, logger *slog.Logger) *Source {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Source{
		lib:      lib,
		logger:   logger,
		sym:      lookupSymbols(lib),
		lastSeen: make(map[string]uint64),
	}
}

// Open loads the NVML library at libraryPath (the driver's
// libnvidia-ml.so.1 when empty), initialises it and returns a Source that
// owns it. On a host without the NVIDIA driver it returns an error that
// says so.
func Open(libraryPath string, logger *slog.Logger) (*Source, error) {
	name := libraryPath
	if name == "" {
		name = defaultLibrary
	}
	if err := probeLibrary(name); err != nil {
		return nil, err
	}
	lib := nvml.New(nvml.WithLibraryPath(name))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, initError(name, ret)
	}
	s := New(lib, logger)
	s.owned = true
	return s, nil
}

// probeLibrary opens name on its own before go-nvml does. go-nvml's Init
// reports a failed dlopen only as ERROR_LIBRARY_NOT_FOUND and drops the
// loader's message, and it calls nvmlInit from whatever library it opened:
// a path to some other shared object would crash the process there.
func probeLibrary(name string) error {
	lib := dl.New(name, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := lib.Open(); err != nil {
		return fmt.Errorf("load NVIDIA driver library %s (is the NVIDIA driver installed?): %w", name, err)
	}
	defer lib.Close()
	if err := lib.Lookup("nvmlInit_v2"); err != nil {
		return fmt.Errorf("load NVIDIA driver library %s: not an NVML library: %w", name, err)
	}
	return nil
}

func initError(name string, ret nvml.Return) error {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("load NVIDIA driver library %s (is the NVIDIA driver installed?): %w", name, ret)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("init NVML: the NVIDIA kernel driver is not loaded: %w", ret)
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return fmt.Errorf("init NVML: %s does not match the loaded kernel driver (reload the driver or reboot): %w", name, ret)
	case nvml.ERROR_NO_PERMISSION:
		return fmt.Errorf("init NVML: no permission to open the GPU devices: %w", ret)
	default:
		return fmt.Errorf("init NVML: %w", ret)
	}
}

// lookupSymbols asks the library which newer entry points it has. Fakes
// that do not answer LookupSymbol are taken to have them all.
func lookupSymbols(lib nvml.Interface) (sym symbols) {
	has := func(name string) (ok bool) {
		defer func() {
			if recover() != nil {
				ok = true
			}
		}()
		return lib.Extensions().LookupSymbol(name) == nil
	}
	return symbols{
		memoryV2: has("nvmlDeviceGetMemoryInfo_v2"),
		mpsProcs: has("nvmlDeviceGetMPSComputeRunningProcesses"),
		mig: has("nvmlDeviceGetMigMode") && has("nvmlDeviceGetMaxMigDeviceCount") &&
			has("nvmlDeviceGetMigDeviceHandleByIndex") && has("nvmlDeviceGetGpuInstanceId") &&
			has("nvmlDeviceGetComputeInstanceId"),
		energy:      has("nvmlDeviceGetTotalEnergyConsumption"),
		fieldValues: has("nvmlDeviceGetFieldValues"),
		nvlink: has("nvmlDeviceGetNvLinkState") &&
			(has("nvmlDeviceGetNvLinkRemotePciInfo_v2") || has("nvmlDeviceGetNvLinkRemotePciInfo")),
		topology: has("nvmlDeviceGetTopologyCommonAncestor"),
	}
}

// Close shuts NVML down when Open loaded it. It is safe to call twice.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if !s.owned {
		return nil
	}
	if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("shut down NVML: %w", ret)
	}
	return nil
}

// Read reads every GPU. It fails only when NVML cannot say how many GPUs
// there are; a GPU that cannot be read has its Device.Err set and the
// others are read as usual.
func (s *Source) Read(ctx context.Context, now time.Time) (gpu.Sample, error) {
	if err := ctx.Err(); err != nil {
		return gpu.Sample{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return gpu.Sample{}, errClosed
	}

	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return gpu.Sample{}, fmt.Errorf("DeviceGetCount: %w", ret)
	}
	if n < 0 || n > maxDevices {
		return gpu.Sample{}, fmt.Errorf("DeviceGetCount: implausible device count %d", n)
	}

	sample := gpu.Sample{Time: now, Devices: make([]gpu.Device, n)}
	if v, ret := s.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		sample.DriverVersion = v
	} else {
		s.logger.Debug("NVML value not read", "call", "SystemGetDriverVersion", "err", ret)
	}
	for i := range sample.Devices {
		if err := ctx.Err(); err != nil {
			sample.Devices[i] = gpu.Device{Index: i, Err: fmt.Errorf("gpu %d: %w", i, err)}
			continue
		}
		sample.Devices[i] = s.readDevice(i)
	}
	s.applyTopology(sample.Devices)
	return sample, nil
}

// Probe says whether the library at name loads and is NVML, without
// initialising it: doctor calls Init itself to report its return code.
func Probe(name string) error { return probeLibrary(name) }
