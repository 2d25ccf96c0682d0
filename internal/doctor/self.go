package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Self is what the gpumeter checks need from its config.
type Self struct {
	// DataDir is the agent's data directory, as this process sees it.
	DataDir string
	// Listen is the agent's listen address.
	Listen string
	// QueueEnabled, GPUPassing and Simulated are queue.enabled,
	// queue.gpu_passing and whether the GPU source is simulated.
	QueueEnabled bool
	GPUPassing   string
	Simulated    bool
	// OpenLedger opens the ledger read-only and closes it; nil when
	// there is none to open.
	OpenLedger func(ctx context.Context) error
	// Root says that doctor runs as root, so that a fix does not ask for
	// what it already has.
	Root bool
}

func selfChecks() []check {
	return []check{
		{"gpumeter.pid_namespace", "host PID namespace", checkPIDNamespace},
		{"gpumeter.cgroup_namespace", "host cgroup namespace", checkCgroupNamespace},
		{"gpumeter.data_dir", "data directory writable, safe permissions", checkDataDir},
		{"gpumeter.listen", "listen address free", checkListen},
		{"gpumeter.ledger", "ledger opens (read-only)", checkLedger},
		{"gpumeter.gpu_passing", "how the queue gives jobs their GPUs", checkGPUPassing},
	}
}

// hostPIDNamespace is the link /proc/PID/ns/pid has in the initial PID
// namespace: the kernel gives that namespace a fixed inode
// (PROC_PID_INIT_INO, 0xEFFFFFFC).
const hostPIDNamespace = "pid:[4026531836]"

// checkPIDNamespace asks which PID namespace PID 1 is in, by its
// ns/pid link; where that cannot be read (it needs the right to trace
// PID 1), by /proc/1/sched, whose first line names PID 1 by its PID in
// the initial namespace on kernels that write it so (newer kernels write
// the reader's view, 1, which then proves nothing and is only a warning).
func checkPIDNamespace(_ context.Context, s *state) Result {
	const fix = "run the agent's container with --pid=host, or set host.proc_root to the host's /proc"
	if ns, err := fs.ReadLink(s.Proc, "1/ns/pid"); err == nil {
		if ns == hostPIDNamespace {
			return pass("PID 1 is in the host's PID namespace (%s)", ns)
		}
		return fail(fix, "PID 1 is in PID namespace %s, not the host's %s: other users' processes, and their GPU use, cannot be attributed", ns, hostPIDNamespace)
	}
	data, err := fs.ReadFile(s.Proc, "1/sched")
	if err != nil {
		return skip("neither 1/ns/pid nor 1/sched under host.proc_root can be read: %v", unwrapPath(err))
	}
	first, _, _ := bytes.Cut(data, []byte("\n"))
	if bytes.Contains(first, []byte("(1,")) {
		fix := "run gpumeter doctor as root, so that it may read /proc/1/ns/pid"
		if s.Self != nil && s.Self.Root {
			// Root was refused all the same: the container lacks the right
			// to trace PID 1.
			fix = "run the agent's container with --pid=host and --cap-add SYS_PTRACE, so that root in it may read /proc/1/ns/pid"
		}
		return warn(fix, "PID 1 may be the host's (%s), but its ns/pid link could not be read, and newer kernels write 1 here in any namespace", strings.TrimSpace(string(first)))
	}
	return fail(fix, "PID 1 here is not the host's (%s): other users' processes, and their GPU use, cannot be attributed", strings.TrimSpace(string(first)))
}

func checkCgroupNamespace(_ context.Context, s *state) Result {
	data, err := fs.ReadFile(s.Proc, "self/cgroup")
	if err != nil {
		return skip("self/cgroup under host.proc_root: %v", unwrapPath(err))
	}
	if strings.TrimSpace(string(data)) == "0::/" {
		return warn("run the agent's container with --cgroupns=host, so cgroup paths name containers", "this process's cgroup path is / : a private cgroup namespace hides the paths that name containers")
	}
	return pass("%s", strings.TrimSpace(string(data)))
}

func checkDataDir(_ context.Context, s *state) Result {
	if s.Self == nil || s.Self.DataDir == "" {
		return skip("no data directory configured")
	}
	d := s.Self.DataDir
	fi, err := os.Stat(d)
	if errors.Is(err, fs.ErrNotExist) {
		return warn("the agent creates it on start; check that its parent is writable", "%s does not exist yet", d)
	}
	if err != nil {
		return fail("run doctor as the agent's user, or fix the directory", "%s: %v", d, err)
	}
	if !fi.IsDir() {
		return fail("set data_dir to a directory", "%s is not a directory", d)
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return fail("chmod o-w "+d, "%s is world-writable (%v): anyone could replace the ledger", d, fi.Mode().Perm())
	}
	f, err := os.CreateTemp(d, ".doctor-*")
	if err != nil {
		return fail("run doctor as the agent's user, or chown the directory to it", "%s is not writable: %v", d, err)
	}
	f.Close()
	os.Remove(f.Name())
	if _, err := os.Stat(filepath.Join(d, "ledger.db")); err == nil {
		return pass("%s writable (%v), holds a ledger", d, fi.Mode().Perm())
	}
	return pass("%s writable (%v)", d, fi.Mode().Perm())
}

func checkListen(_ context.Context, s *state) Result {
	if s.Self == nil || s.Self.Listen == "" {
		return skip("no listen address configured")
	}
	l, err := net.Listen("tcp", s.Self.Listen)
	if err == nil {
		l.Close()
		return pass("%s is free", s.Self.Listen)
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return warn("if `gpumeter serve` is running this is expected; otherwise stop what holds it (`ss -ltnp 'sport = "+portOf(s.Self.Listen)+"'`) or change listen", "%s is in use", s.Self.Listen)
	}
	return fail("change listen", "%s: %v", s.Self.Listen, err)
}

func portOf(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return fmt.Sprintf(":%s", p)
}

func checkLedger(ctx context.Context, s *state) Result {
	if s.Self == nil || s.Self.OpenLedger == nil {
		return skip("no ledger to open")
	}
	if err := s.Self.OpenLedger(ctx); err != nil {
		return fail("see the error; `gpumeter ledger` commands name the file and what to do", "%v", err)
	}
	return pass("opens")
}

// checkGPUPassing says what queue.gpu_passing resolves to here, as the
// agent resolves it at start.
func checkGPUPassing(ctx context.Context, s *state) Result {
	if s.Self == nil || !s.Self.QueueEnabled {
		return skip("the queue is off (queue.enabled)")
	}
	setting := s.Self.GPUPassing
	if setting == "" {
		setting = "auto"
	}
	if s.Self.Simulated && setting == "auto" {
		return pass("auto: env (NVIDIA_VISIBLE_DEVICES), as the GPU source is simulated")
	}
	in, err := s.dockerInfo(ctx)
	if err != nil {
		return skip("Docker not reachable")
	}
	nvidia := slices.Contains(in.Runtimes, "nvidia") || in.DefaultRuntime == "nvidia"
	switch setting {
	case "auto", "device_requests":
		if nvidia {
			return pass("%s: device_requests (--gpus), through the nvidia runtime's hook", setting)
		}
		return fail("install the NVIDIA Container Toolkit, `nvidia-ctk runtime configure --runtime=docker`, restart Docker; or set queue.gpu_passing to cdi (with a CDI spec) or env (with nvidia as the default runtime)",
			"%s: Docker has no nvidia runtime: the agent refuses to start the queue, as jobs would run without their GPUs", setting)
	case "cdi":
		if !apiAtLeast(in.APIVersion, 1, 44) || len(in.CDISpecDirs) == 0 {
			return fail("set queue.gpu_passing to device_requests, or enable CDI in Docker (API 1.44+, \"features\": {\"cdi\": true})", "cdi: Docker (API %s) has no CDI spec directories", in.APIVersion)
		}
		return pass("cdi: Docker reads %s", strings.Join(in.CDISpecDirs, ", "))
	case "env":
		if in.DefaultRuntime != "nvidia" {
			return fail("set default-runtime to nvidia in /etc/docker/daemon.json, or queue.gpu_passing to auto", "env: NVIDIA_VISIBLE_DEVICES does nothing, the default runtime is %s", in.DefaultRuntime)
		}
		return pass("env: NVIDIA_VISIBLE_DEVICES, read by the default nvidia runtime")
	}
	return fail("set queue.gpu_passing to auto, device_requests, cdi or env", "queue.gpu_passing %q is unknown", setting)
}
