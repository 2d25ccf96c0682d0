package doctor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

const (
	procVersion = "driver/nvidia/version"
	procModules = "modules"
)

func checkRoot(_ context.Context, s *state) Result {
	fi, err := fs.Stat(s.Root, ".")
	if errors.Is(err, syscall.ENOTDIR) {
		return fail("set host.root to the directory where the host's / is mounted", "host.root %s is not a directory", s.RootPath)
	}
	if err != nil {
		return fail("set host.root to the directory where the host's / is mounted", "host.root %s: %v", s.RootPath, err)
	}
	if !fi.IsDir() {
		return fail("set host.root to the directory where the host's / is mounted", "host.root %s is not a directory", s.RootPath)
	}
	return pass("reading the host under %s", s.RootPath)
}

var kernelModuleVersion = regexp.MustCompile(`Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)`)

// parseKernelVersion reads the driver version from the first line of
// /proc/driver/nvidia/version, proprietary or open module.
func parseKernelVersion(data []byte) (string, bool) {
	m := kernelModuleVersion.FindSubmatch(data)
	if m == nil {
		return "", false
	}
	return string(m[1]), true
}

const installDriver = "install the NVIDIA driver (e.g. `ubuntu-drivers install` or your distribution's nvidia-driver package) and load it with `modprobe nvidia` or a reboot"

func checkKernelDriver(_ context.Context, s *state) Result {
	data, err := fs.ReadFile(s.Proc, procVersion)
	if err != nil {
		return fail(installDriver, "%s: %v: the NVIDIA kernel driver is not loaded", s.procPath(procVersion), unwrapPath(err))
	}
	v, ok := parseKernelVersion(data)
	if !ok {
		first, _, _ := bytes.Cut(data, []byte("\n"))
		return warn("report this line to gpumeter", "%s:1: no driver version in %q", s.procPath(procVersion), first)
	}
	s.kernelVersion = v
	return pass("kernel module %s", v)
}

// loadedModules is the module names in /proc/modules.
func loadedModules(data []byte) []string {
	var mods []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			mods = append(mods, f[0])
		}
	}
	return mods
}

func checkModules(_ context.Context, s *state) Result {
	data, err := fs.ReadFile(s.Proc, procModules)
	if err != nil {
		return skip("%s: %v", s.procPath(procModules), unwrapPath(err))
	}
	mods := loadedModules(data)
	if slices.Contains(mods, "nouveau") {
		return fail("blacklist nouveau (`echo 'blacklist nouveau' > /etc/modprobe.d/blacklist-nouveau.conf; echo 'options nouveau modeset=0' >> /etc/modprobe.d/blacklist-nouveau.conf`), run `update-initramfs -u` (or `dracut -f`) and reboot",
			"nouveau, the open-source driver, is loaded and holds the GPUs")
	}
	var missing []string
	for _, m := range []string{"nvidia", "nvidia_uvm"} {
		if !slices.Contains(mods, m) {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		fix := "run `modprobe nvidia`, or reinstall the driver: " + installDriver
		if len(missing) == 1 && missing[0] == "nvidia_uvm" {
			fix = "run `modprobe nvidia-uvm` (CUDA needs it; `nvidia-modprobe -u -c=0` also creates /dev/nvidia-uvm)"
		}
		return fail(fix, "not loaded: %s", strings.Join(missing, ", "))
	}
	return pass("nvidia, nvidia_uvm loaded; nouveau not loaded")
}

var gpuNode = regexp.MustCompile(`^nvidia(\d+)$`)

// gpuNodes lists dev/nvidiaN, sorted.
func (s *state) gpuNodes() []string {
	entries, _ := fs.ReadDir(s.Root, "dev")
	var out []string
	for _, e := range entries {
		if gpuNode.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

func checkDevices(_ context.Context, s *state) Result {
	var missing []string
	for _, n := range []string{"dev/nvidiactl", "dev/nvidia-uvm"} {
		if !s.exists(n) {
			missing = append(missing, s.hostPath(n))
		}
	}
	nodes := s.gpuNodes()
	if s.nvmlOK && len(nodes) < s.gpuCount {
		missing = append(missing, fmt.Sprintf("%d of %d /dev/nvidiaN", s.gpuCount-len(nodes), s.gpuCount))
	} else if len(nodes) == 0 {
		missing = append(missing, "/dev/nvidiaN")
	}
	if len(missing) > 0 {
		return fail("run `nvidia-modprobe -c=0 -u` (or `nvidia-ctk system create-device-nodes --control-devices --load-kernel-modules`); enable nvidia-persistenced so they exist at boot",
			"missing: %s", strings.Join(missing, ", "))
	}
	return pass("/dev/nvidiactl, /dev/nvidia-uvm, %d GPU nodes", len(nodes))
}

func checkDevChar(ctx context.Context, s *state) Result {
	info, err := s.dockerInfo(ctx)
	if err != nil {
		return skip("Docker not reachable: the cgroup driver is unknown")
	}
	if info.CgroupDriver != "systemd" {
		return skip("cgroup driver %s: the symlinks are not needed", info.CgroupDriver)
	}
	nodes := append([]string{"nvidiactl", "nvidia-uvm"}, s.gpuNodes()...)
	linked := map[string]bool{}
	entries, _ := fs.ReadDir(s.Root, "dev/char")
	for _, e := range entries {
		target, err := fs.ReadLink(s.Root, path.Join("dev/char", e.Name()))
		if err == nil {
			linked[path.Base(target)] = true
		}
	}
	var missing []string
	for _, n := range nodes {
		if s.exists("dev/"+n) && !linked[n] {
			missing = append(missing, "/dev/"+n)
		}
	}
	if len(missing) > 0 {
		return fail("run `nvidia-ctk system create-dev-char-symlinks --create-all`, and make it last with a udev rule: `ACTION==\"add\", DEVPATH==\"/bus/pci/drivers/nvidia\", RUN+=\"/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all\"` in /lib/udev/rules.d/71-nvidia-dev-char.rules",
			"no /dev/char symlink for %s: with the systemd cgroup driver containers lose their GPUs (\"Failed to initialize NVML: Unknown Error\") after `systemctl daemon-reload`", strings.Join(missing, ", "))
	}
	return pass("/dev/char links every NVIDIA device node")
}

var xidLine = regexp.MustCompile(`NVRM: Xid \(([^)]*)\): (\d+)`)

// xidFix says what to do about an XID code, for the ones with one answer.
func xidFix(code int) string {
	switch code {
	case 79:
		return "XID 79: the GPU fell off the bus: check its power and PCIe seating, and its temperature"
	case 48, 63, 64, 94, 95:
		return fmt.Sprintf("XID %d: an ECC error or row remapping: drain the GPU and reset it (`nvidia-smi -r -i N`); if it recurs, replace it", code)
	case 119, 120:
		return fmt.Sprintf("XID %d: the GSP firmware timed out: update the driver, or load it with NVreg_EnableGpuFirmware=0", code)
	case 13, 31, 43:
		return fmt.Sprintf("XID %d: usually an application fault (bad memory access): look at the job that ran then", code)
	}
	return fmt.Sprintf("XID %d: look it up in NVIDIA's XID catalogue", code)
}

func checkXID(_ context.Context, s *state) Result {
	for _, p := range []string{"var/log/kern.log", "var/log/messages", "var/log/syslog"} {
		data, err := fs.ReadFile(s.Root, p)
		if err != nil {
			continue
		}
		if len(data) > 4<<20 {
			data = data[len(data)-4<<20:]
		}
		counts := map[int]int{}
		var codes []int
		for _, m := range xidLine.FindAllSubmatch(data, -1) {
			c, _ := strconv.Atoi(string(m[2]))
			if counts[c] == 0 {
				codes = append(codes, c)
			}
			counts[c]++
		}
		if len(codes) == 0 {
			return pass("no XID errors in %s", s.hostPath(p))
		}
		slices.Sort(codes)
		var seen, fixes []string
		for _, c := range codes {
			seen = append(seen, fmt.Sprintf("XID %d ×%d", c, counts[c]))
			fixes = append(fixes, xidFix(c))
		}
		return warn(strings.Join(fixes, "; "), "%s: %s", s.hostPath(p), strings.Join(seen, ", "))
	}
	return skip("no kernel log file (kern.log, messages, syslog) under /var/log: read `journalctl -k | grep Xid`")
}

// unwrapPath drops the path an fs error repeats, which the caller names
// with the host's spelling.
func unwrapPath(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}
