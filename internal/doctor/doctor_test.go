package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpumeter/gpumeter/internal/dockertest"
)

// fakeDocker is an engine that answers Info with a fixed value.
type fakeDocker struct {
	info DockerInfo
	err  error
}

func (f fakeDocker) Info(context.Context) (DockerInfo, error) { return f.info, f.err }

var nvidiaEngine = DockerInfo{APIVersion: "1.47", ServerVersion: "27.5.1", CgroupDriver: "systemd",
	Runtimes: []string{"io.containerd.runc.v2", "nvidia", "runc"}, DefaultRuntime: "runc",
	RootDir: "/var/lib/docker", CDISpecDirs: []string{"/etc/cdi", "/var/run/cdi"}}

const fixtureUUID = "GPU-52e23b3c-35a0-4ef5-e3b1-6b5d6c2a3c44"

// h100s is go-nvml's 8-GPU H100 mock (driver 550.54.15) answering the
// calls the per-GPU checks make; GPU 0 has the fixtures' UUID.
func h100s() *server.Server {
	srv := dgxh100.New()
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		if i == 0 {
			dev.UUID = fixtureUUID
		}
		dev.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
		dev.GetAccountingModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
		dev.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
			return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		dev.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
		dev.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
	}
	return srv
}

func fixtureEnv(name string, lib nvml.Interface, d Docker) Env {
	root := filepath.Join("testdata", name)
	return Env{Root: os.DirFS(root), RootPath: root, Docker: d, NVML: lib, Self: &Self{}}
}

func byID(rs []Result) map[string]Result {
	m := map[string]Result{}
	for _, r := range rs {
		m[r.ID] = r
	}
	return m
}

func TestHealthy(t *testing.T) {
	rs := Run(context.Background(), fixtureEnv("healthy", h100s(), fakeDocker{info: nvidiaEngine}))
	for _, r := range rs {
		if r.Status == Fail || r.Status == Warn {
			t.Errorf("%s = %s (%s), want PASS or SKIP", r.ID, r.Status, r.Detail)
		}
	}
	got := byID(rs)
	for _, id := range []string{"gpumeter.pid_namespace", "gpumeter.cgroup_namespace", "driver.kernel", "driver.nvml", "driver.devices", "driver.dev_char", "toolkit.version", "toolkit.config", "docker.nvidia_runtime", "cdi.enabled", "cdi.specs", "gpu.7.persistence", "gpu.0.ecc"} {
		if got[id].Status != Pass {
			t.Errorf("%s = %s (%s), want PASS", id, got[id].Status, got[id].Detail)
		}
	}
}

func TestFailures(t *testing.T) {
	tests := []struct {
		fixture string
		lib     func() nvml.Interface
		engine  DockerInfo
		id      string
		status  Status
		detail  string // in the detail
		fix     string // in the fix
	}{
		{fixture: "no-driver", id: "driver.kernel", status: Fail, detail: "not loaded", fix: "install the NVIDIA driver"},
		{fixture: "no-driver", id: "driver.modules", status: Fail, detail: "nvidia, nvidia_uvm"},
		{fixture: "no-driver", id: "driver.devices", status: Fail, detail: "/dev/nvidiactl", fix: "nvidia-modprobe"},
		{fixture: "nouveau", id: "driver.modules", status: Fail, detail: "nouveau", fix: "blacklist nouveau"},
		{fixture: "version-mismatch", id: "driver.nvml", status: Fail, detail: "kernel module 550.90.07, NVML library 550.54.15", fix: "reboot"},
		{fixture: "version-mismatch", id: "driver.nvml", status: Fail, detail: "version mismatch: kernel module 550.90.07, library 550.54.15", fix: "apt-mark hold",
			lib: func() nvml.Interface {
				s := h100s()
				s.InitFunc = func() nvml.Return { return nvml.ERROR_LIB_RM_VERSION_MISMATCH }
				return s
			}},
		{fixture: "bad-toml", id: "toolkit.config", status: Fail, detail: "config.toml:8: toml:"},
		{fixture: "daemon-json-type", id: "docker.daemon_json", status: Fail, detail: "daemon.json:2: not JSON: json: cannot unmarshal"},
		{fixture: "missing-nodes", id: "driver.devices", status: Fail, detail: "/dev/nvidia-uvm, 1 of 8 /dev/nvidiaN"},
		{fixture: "no-dev-char", id: "driver.dev_char", status: Fail, detail: "daemon-reload", fix: "nvidia-ctk system create-dev-char-symlinks"},
		{fixture: "xid", id: "driver.xid", status: Warn, detail: "XID 79 ×1", fix: "fell off the bus"},
		{fixture: "no-toolkit", id: "toolkit.installed", status: Fail, detail: "nvidia-ctk", fix: "install the NVIDIA Container Toolkit"},
		{fixture: "old-toolkit", id: "toolkit.version", status: Fail, detail: "CVE-2024-0132", fix: "1.17.8 or later"},
		{fixture: "default-runtime", id: "docker.default_runtime", status: Warn, detail: "NVIDIA_VISIBLE_DEVICES=all", fix: "accept-nvidia-visible-devices-envvar-when-unprivileged = false",
			engine: func() DockerInfo { e := nvidiaEngine; e.DefaultRuntime = "nvidia"; return e }()},
		{fixture: "default-runtime-locked", id: "docker.default_runtime", status: Pass, detail: "accept-nvidia-visible-devices-envvar-when-unprivileged = false",
			engine: func() DockerInfo { e := nvidiaEngine; e.DefaultRuntime = "nvidia"; return e }()},
		{fixture: "bad-daemon-json", id: "docker.daemon_json", status: Fail, detail: "etc/docker/daemon.json:5: not JSON"},
		{fixture: "stale-cdi", id: "cdi.specs", status: Fail, detail: "libraries of driver 535.104.05, the driver is 550.54.15", fix: "nvidia-ctk cdi generate"},
		{fixture: "bad-cdi", id: "cdi.specs", status: Fail, detail: "etc/cdi/nvidia.yaml: does not parse: yaml: line 3"},
		{fixture: "toml-unknown-section", id: "toolkit.config", status: Warn, detail: "config.toml:34: unknown section [nvidia-container-runtimes]"},
		{fixture: "bad-ldconfig", id: "toolkit.config", status: Fail, detail: "/sbin/ldconfig does not exist"},
		{fixture: "healthy", id: "docker.nvidia_runtime", status: Fail, detail: "not nvidia", fix: "nvidia-ctk runtime configure",
			engine: DockerInfo{APIVersion: "1.41", ServerVersion: "20.10.24", CgroupDriver: "cgroupfs", Runtimes: []string{"runc"}, DefaultRuntime: "runc"}},
		{fixture: "hook-off-path", id: "docker.nvidia_runtime", status: Fail, detail: "none of dockerd's PATH (/opt/docker/bin)", fix: "systemctl restart docker"},
		{fixture: "container-ns", id: "gpumeter.pid_namespace", status: Fail, detail: "PID 1 is in PID namespace pid:[4026532201]", fix: "--pid=host"},
		{fixture: "hook-off-path", id: "gpumeter.pid_namespace", status: Warn, detail: "its ns/pid link could not be read", fix: "as root"},
		{fixture: "container-ns", id: "gpumeter.cgroup_namespace", status: Warn, fix: "--cgroupns=host"},
		{fixture: "healthy", id: "cdi.enabled", status: Skip, detail: "older than 1.44",
			engine: DockerInfo{APIVersion: "1.41", ServerVersion: "20.10.24", CgroupDriver: "cgroupfs", Runtimes: []string{"runc"}, DefaultRuntime: "runc"}},
	}
	for _, tt := range tests {
		t.Run(tt.fixture+"/"+tt.id, func(t *testing.T) {
			var lib nvml.Interface = h100s()
			if tt.lib != nil {
				lib = tt.lib()
			}
			if tt.fixture == "no-driver" || tt.fixture == "nouveau" {
				s := h100s()
				s.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
				lib = s
			}
			engine := nvidiaEngine
			if tt.engine.APIVersion != "" {
				engine = tt.engine
			}
			r := byID(Run(context.Background(), fixtureEnv(tt.fixture, lib, fakeDocker{info: engine})))[tt.id]
			if r.Status != tt.status || !strings.Contains(r.Detail, tt.detail) || !strings.Contains(r.Fix, tt.fix) {
				t.Errorf("%s = %s %q (fix %q), want %s with %q (fix with %q)", tt.id, r.Status, r.Detail, r.Fix, tt.status, tt.detail, tt.fix)
			}
		})
	}
}

func TestRootNotADirectory(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := byID(Run(context.Background(), Env{Root: os.DirFS(f), RootPath: f, Docker: fakeDocker{err: errors.New("refused")}}))
	if got := r["host.root"]; got.Status != Fail || !strings.Contains(got.Detail, "not a directory") {
		t.Errorf("host.root = %s %q, want FAIL naming not a directory", got.Status, got.Detail)
	}
	if got := r["docker.engine"]; got.Status != Fail {
		t.Errorf("docker.engine = %s, want FAIL", got.Status)
	}
}

func TestJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, Run(context.Background(), fixtureEnv("nouveau", nil, nil))); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Checks  []map[string]any `json:"checks"`
		Summary map[string]int   `json:"summary"`
	}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Checks) == 0 || out.Summary["fail"] == 0 {
		t.Fatalf("got %s, want checks and failures", buf.String())
	}
	for _, k := range []string{"id", "name", "status", "detail", "fix"} {
		if _, ok := out.Checks[0][k]; !ok {
			t.Errorf("check has no %q: %v", k, out.Checks[0])
		}
	}
}

// TestRealEngine runs doctor against this machine's engine and its root:
// without a GPU and with only runc, the driver and the nvidia runtime
// fail, CDI is skipped on an engine before API 1.44, and Docker passes.
func TestRealEngine(t *testing.T) {
	cli := dockertest.Client(t)
	rs := byID(Run(context.Background(), Env{Root: os.DirFS("/"), RootPath: "/", Docker: Engine{Client: cli}}))
	if r := rs["docker.engine"]; r.Status != Pass {
		t.Fatalf("docker.engine = %s %q, want PASS", r.Status, r.Detail)
	}
	if os.Getenv("GPUMETER_TEST_GPU") != "" {
		t.Skip("GPU host: the driver checks are not expected to fail")
	}
	for _, id := range []string{"driver.kernel", "driver.nvml", "docker.nvidia_runtime"} {
		if r := rs[id]; r.Status != Fail || r.Fix == "" {
			t.Errorf("%s = %s %q fix %q, want FAIL with a fix", id, r.Status, r.Detail, r.Fix)
		}
	}
	in, err := Engine{Client: cli}.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !apiAtLeast(in.APIVersion, 1, 44) {
		if r := rs["cdi.enabled"]; r.Status != Skip {
			t.Errorf("cdi.enabled = %s %q, want SKIP on API %s", r.Status, r.Detail, in.APIVersion)
		}
	}
}

// TestRealRunTest asks this machine's engine, which has no GPU driver, to
// run a container with --gpus all: the check fails and says what to do.
func TestRealRunTest(t *testing.T) {
	cli := dockertest.Client(t)
	if os.Getenv("GPUMETER_TEST_GPU") != "" {
		t.Skip("GPU host: --gpus all is expected to work")
	}
	img := dockertest.SleeperImage(t, cli)
	env := Env{Root: os.DirFS("/"), RootPath: "/", Docker: Engine{Client: cli},
		RunTest: &RunTest{Runner: Engine{Client: cli}, Image: img, Cmd: []string{"exit-after", "0s", "0"}}}
	r := byID(Run(context.Background(), env))["gpu.run_test"]
	if r.Status != Fail || !strings.Contains(r.Detail, "could not select device driver") || !strings.Contains(r.Fix, "NVIDIA Container Toolkit") {
		t.Errorf("gpu.run_test = %s %q fix %q, want FAIL: could not select device driver, with the toolkit fix", r.Status, r.Detail, r.Fix)
	}
}

func BenchmarkHealthy(b *testing.B) {
	for b.Loop() {
		Run(context.Background(), fixtureEnv("healthy", h100s(), fakeDocker{info: nvidiaEngine}))
	}
}

// BenchmarkThisHost runs every check against this machine's root, /proc
// and engine, as `gpumeter doctor` does without --run-test.
func BenchmarkThisHost(b *testing.B) {
	cli := dockertest.Client(b)
	env := Env{Root: os.DirFS("/"), RootPath: "/", Docker: Engine{Client: cli}, Proc: os.DirFS("/proc"), Self: &Self{}}
	for b.Loop() {
		Run(context.Background(), env)
	}
}

// TestPIDNamespaceAsRoot: root whose read of /proc/1/ns/pid was refused is
// not told to run as root.
func TestPIDNamespaceAsRoot(t *testing.T) {
	env := fixtureEnv("hook-off-path", h100s(), fakeDocker{info: nvidiaEngine})
	env.Self.Root = true
	r := byID(Run(context.Background(), env))["gpumeter.pid_namespace"]
	if r.Status != Warn || strings.Contains(r.Fix, "as root") || !strings.Contains(r.Fix, "SYS_PTRACE") {
		t.Errorf("pid_namespace as root = %s, fix %q; want WARN with a fix naming SYS_PTRACE, not asking for root", r.Status, r.Fix)
	}
}
