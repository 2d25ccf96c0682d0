package doctor

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func checkNVML(_ context.Context, s *state) Result {
	if s.NVML == nil {
		if v := s.libraryVersion(); v != "" {
			return fail("check the loader's cache (`ldconfig -p | grep nvidia-ml`) and nvml_library; reinstall the driver's libraries if it is broken",
				"libnvidia-ml.so.%s is installed but libnvidia-ml.so.1 could not be loaded", v)
		}
		return fail(installDriver, "libnvidia-ml.so.1 could not be loaded: the NVIDIA driver's user-space libraries are not installed")
	}
	ret := safeReturn(func() nvml.Return { return s.NVML.Init() })
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fail(installDriver, "NVML: library not found (libnvidia-ml.so.1)")
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fail(installDriver, "NVML: the kernel driver is not loaded")
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return fail("the driver was upgraded under the loaded module (often by unattended-upgrades): reboot, or stop every GPU user and `rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia`; hold the driver packages (`apt-mark hold`) to stop it recurring",
			"NVML: driver/library version mismatch: kernel module %s, library %s", orUnknown(s.kernelVersion), orUnknown(s.libraryVersion()))
	case nvml.ERROR_NO_PERMISSION:
		return fail("run doctor as root, or give this user access to /dev/nvidia*", "NVML: no permission to open the GPU devices")
	default:
		return fail("see `nvidia-smi` for the driver's own message", "NVML: %s", nvml.ErrorString(ret))
	}
	s.nvmlOK = true
	v, ret := s.NVML.SystemGetDriverVersion()
	if ret == nvml.SUCCESS {
		s.driverVersion = v
	}
	n, ret := s.NVML.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fail("see `nvidia-smi`", "NVML: device count: %s", nvml.ErrorString(ret))
	}
	s.gpuCount = n
	for i := range n {
		d, ret := s.NVML.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		if u, ret := d.GetUUID(); ret == nvml.SUCCESS {
			s.uuids = append(s.uuids, u)
		}
	}
	if s.kernelVersion != "" && s.driverVersion != "" && s.kernelVersion != s.driverVersion {
		return fail("reboot, or reload the kernel module, so that module and library are the same release",
			"kernel module %s, NVML library %s", s.kernelVersion, s.driverVersion)
	}
	return pass("driver %s, %d GPUs", orUnknown(s.driverVersion), n)
}

var libDirs = []string{"usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib"}

var nvmlSoname = regexp.MustCompile(`^libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$`)

// libraryVersion is the release of the installed libnvidia-ml.so.X.Y.Z,
// "" when none is found.
func (s *state) libraryVersion() string {
	for _, d := range libDirs {
		entries, _ := fs.ReadDir(s.Root, d)
		for _, e := range entries {
			if m := nvmlSoname.FindStringSubmatch(e.Name()); m != nil {
				return m[1]
			}
		}
	}
	return ""
}

func orUnknown(v string) string {
	if v == "" {
		return "unknown"
	}
	return v
}

// safeReturn calls f, taking a panic (an entry point the library or a
// mock lacks) for ERROR_FUNCTION_NOT_FOUND.
func safeReturn(f func() nvml.Return) (ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_FUNCTION_NOT_FOUND
		}
	}()
	return f()
}

// gpuChecks makes the per-GPU checks, ids gpu.N.what.
func gpuChecks(s *state) []Result {
	var out []Result
	for i := range s.gpuCount {
		d, ret := s.NVML.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			out = append(out, Result{ID: fmt.Sprintf("gpu.%d", i), Name: fmt.Sprintf("GPU %d", i), Status: Fail,
				Detail: "NVML: " + nvml.ErrorString(ret), Fix: "see `nvidia-smi -i " + fmt.Sprint(i) + "`; the GPU may need a reset"})
			continue
		}
		add := func(what, name string, r Result) {
			r.ID, r.Name = fmt.Sprintf("gpu.%d.%s", i, what), fmt.Sprintf("GPU %d %s", i, name)
			out = append(out, r)
		}
		add("persistence", "persistence mode", persistence(d, i))
		add("accounting", "accounting mode", accounting(d, i))
		add("mig", "MIG mode", migMode(d, i))
		add("ecc", "ECC, retired pages and remapped rows", ecc(d, i))
	}
	return out
}

func persistence(d nvml.Device, i int) Result {
	var m nvml.EnableState
	ret := safeReturn(func() (r nvml.Return) { m, r = d.GetPersistenceMode(); return })
	switch {
	case ret != nvml.SUCCESS:
		return skip("not answered: %s", nvml.ErrorString(ret))
	case m == nvml.FEATURE_ENABLED:
		return pass("on")
	}
	return warn("enable nvidia-persistenced (`systemctl enable --now nvidia-persistenced`), or `nvidia-smi -i "+fmt.Sprint(i)+" -pm 1`",
		"off: the driver tears the GPU down when its last user exits, so each container start pays the initialisation")
}

func accounting(d nvml.Device, i int) Result {
	var m nvml.EnableState
	ret := safeReturn(func() (r nvml.Return) { m, r = d.GetAccountingMode(); return })
	switch {
	case ret != nvml.SUCCESS:
		return skip("not answered: %s", nvml.ErrorString(ret))
	case m == nvml.FEATURE_ENABLED:
		return pass("on")
	}
	return warn("`nvidia-smi -i "+fmt.Sprint(i)+" -am 1` (as root; with persistence mode on it lasts until reboot)",
		"off: processes shorter than a sampling interval are missed between samples")
}

func migMode(d nvml.Device, i int) Result {
	var cur, pend int
	ret := safeReturn(func() (r nvml.Return) { cur, pend, r = d.GetMigMode(); return })
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED:
		return skip("MIG not supported")
	case ret != nvml.SUCCESS:
		return skip("not answered: %s", nvml.ErrorString(ret))
	case cur != pend:
		return warn("reset the GPU (`nvidia-smi -i "+fmt.Sprint(i)+" -r`, with nothing running on it) or reboot so the pending mode applies",
			"current %s, pending %s", onOff(cur), onOff(pend))
	}
	return pass("%s", onOff(cur))
}

func onOff(m int) string {
	if m == nvml.DEVICE_MIG_ENABLE {
		return "on"
	}
	return "off"
}

func ecc(d nvml.Device, i int) Result {
	var problems []string
	var cur, pend nvml.EnableState
	ret := safeReturn(func() (r nvml.Return) { cur, pend, r = d.GetEccMode(); return })
	if ret == nvml.SUCCESS && cur != pend {
		problems = append(problems, "ECC mode change pending a reset")
	}
	var pendingRetire nvml.EnableState
	if safeReturn(func() (r nvml.Return) { pendingRetire, r = d.GetRetiredPagesPendingStatus(); return }) == nvml.SUCCESS && pendingRetire == nvml.FEATURE_ENABLED {
		problems = append(problems, "retired pages pending a reset")
	}
	var corr, unc int
	var pending, failed bool
	if safeReturn(func() (r nvml.Return) { corr, unc, pending, failed, r = d.GetRemappedRows(); return }) == nvml.SUCCESS {
		if failed {
			problems = append(problems, "row remapping failed")
		}
		if pending {
			problems = append(problems, "row remapping pending a reset")
		}
		if unc > 0 {
			problems = append(problems, fmt.Sprintf("%d rows remapped for uncorrectable errors", unc))
		}
	}
	if len(problems) == 0 {
		if ret != nvml.SUCCESS {
			return skip("ECC not answered: %s", nvml.ErrorString(ret))
		}
		return pass("ECC %s, %d correctable remaps, nothing pending", map[bool]string{true: "on", false: "off"}[cur == nvml.FEATURE_ENABLED], corr)
	}
	fix := "drain the GPU and reset it (`nvidia-smi -i " + fmt.Sprint(i) + " -r`) or reboot"
	if failed {
		return fail(fix+"; a failed remap means the GPU should be replaced", "%s", strings.Join(problems, "; "))
	}
	return warn(fix, "%s", strings.Join(problems, "; "))
}
