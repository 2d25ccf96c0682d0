package doctor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

func TestGPUChecks(t *testing.T) {
	srv := h100s()
	d := srv.Devices[3].(*server.Device)
	d.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
	d.GetAccountingModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 2, 1, false, true, nvml.SUCCESS }
	// GPU 5 answers no ECC calls at all, as a mock (or an old driver)
	// without the entry points: the checks skip, they do not crash.
	e := srv.Devices[5].(*server.Device)
	e.GetEccModeFunc, e.GetRemappedRowsFunc, e.GetRetiredPagesPendingStatusFunc = nil, nil, nil
	rs := byID(Run(context.Background(), fixtureEnv("healthy", srv, fakeDocker{info: nvidiaEngine})))
	for id, want := range map[string]struct {
		status      Status
		detail, fix string
	}{
		"gpu.3.persistence": {Warn, "off", "nvidia-persistenced"},
		"gpu.3.accounting":  {Warn, "missed between samples", "-am 1"},
		"gpu.3.mig":         {Warn, "current off, pending on", "-r"},
		"gpu.3.ecc":         {Fail, "row remapping failed; 1 rows remapped", "replaced"},
		"gpu.5.ecc":         {Skip, "not answered", ""},
		"gpu.4.ecc":         {Pass, "ECC on", ""},
	} {
		r := rs[id]
		if r.Status != want.status || !strings.Contains(r.Detail, want.detail) || !strings.Contains(r.Fix, want.fix) {
			t.Errorf("%s = %s %q (fix %q), want %s with %q (fix with %q)", id, r.Status, r.Detail, r.Fix, want.status, want.detail, want.fix)
		}
	}
}

func TestCDIUUIDs(t *testing.T) {
	srv := h100s()
	srv.Devices[0].(*server.Device).UUID = "GPU-00000000-1111-2222-3333-444444444444"
	r := byID(Run(context.Background(), fixtureEnv("healthy", srv, fakeDocker{info: nvidiaEngine})))["cdi.specs"]
	if r.Status != Fail || !strings.Contains(r.Detail, fixtureUUID+" is no GPU NVML sees") {
		t.Errorf("cdi.specs = %s %q, want FAIL naming %s", r.Status, r.Detail, fixtureUUID)
	}
}

func TestGPUPassing(t *testing.T) {
	runcOnly := DockerInfo{APIVersion: "1.41", ServerVersion: "20.10.24", CgroupDriver: "cgroupfs", Runtimes: []string{"runc"}, DefaultRuntime: "runc"}
	tests := []struct {
		setting   string
		simulated bool
		engine    DockerInfo
		status    Status
		detail    string
	}{
		{"auto", false, nvidiaEngine, Pass, "device_requests"},
		{"auto", false, runcOnly, Fail, "no nvidia runtime"},
		{"auto", true, runcOnly, Pass, "env"},
		{"cdi", false, runcOnly, Fail, "no CDI spec directories"},
		{"cdi", false, nvidiaEngine, Pass, "/etc/cdi"},
		{"env", false, nvidiaEngine, Fail, "default runtime is runc"},
	}
	for _, tt := range tests {
		t.Run(tt.setting, func(t *testing.T) {
			env := fixtureEnv("healthy", h100s(), fakeDocker{info: tt.engine})
			env.Self.QueueEnabled, env.Self.GPUPassing, env.Self.Simulated = true, tt.setting, tt.simulated
			r := byID(Run(context.Background(), env))["gpumeter.gpu_passing"]
			if r.Status != tt.status || !strings.Contains(r.Detail, tt.detail) {
				t.Errorf("gpu_passing = %s %q, want %s with %q", r.Status, r.Detail, tt.status, tt.detail)
			}
		})
	}
}

// fakeRunner answers RunGPUs with fixed output.
type fakeRunner struct {
	out string
	err error
}

func (f fakeRunner) RunGPUs(context.Context, string, []string) (string, error) { return f.out, f.err }

func TestRunTest(t *testing.T) {
	srv := h100s()
	var lines []string
	for i, d := range srv.Devices {
		u, _ := d.GetUUID()
		if i < 7 {
			lines = append(lines, "GPU "+string(rune('0'+i))+": NVIDIA H100 80GB HBM3 (UUID: "+u+")")
		}
	}
	tests := []struct {
		name   string
		runner fakeRunner
		status Status
		detail string
	}{
		{"all", fakeRunner{out: strings.Join(lines, "\n") + "\nGPU 7: NVIDIA H100 80GB HBM3 (UUID: " + mustUUID(srv, 7) + ")\n"}, Pass, "saw 8 GPUs"},
		{"one missing", fakeRunner{out: strings.Join(lines, "\n")}, Fail, "not seen inside: " + mustUUID(srv, 7)},
		{"no driver", fakeRunner{err: errors.New(`start: could not select device driver "" with capabilities: [[gpu]]`)}, Fail, "could not select device driver"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := fixtureEnv("healthy", srv, fakeDocker{info: nvidiaEngine})
			env.RunTest = &RunTest{Runner: tt.runner, Image: "nvidia/cuda:12.4.1-base-ubuntu22.04"}
			r := byID(Run(context.Background(), env))["gpu.run_test"]
			if r.Status != tt.status || !strings.Contains(r.Detail, tt.detail) {
				t.Errorf("run_test = %s %q, want %s with %q", r.Status, r.Detail, tt.status, tt.detail)
			}
		})
	}
}

func mustUUID(srv *server.Server, i int) string {
	u, _ := srv.Devices[i].GetUUID()
	return u
}

// TestRunTestFixes: a fix names the image once and a command that
// reproduces the run exactly.
func TestRunTestFixes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		cmd  []string
		want string
	}{
		{errors.New("create a container of my/img:1: No such image: my/img:1"), nil,
			"pull it first (`docker pull my/img:1`), or name one that is here; any CUDA base image has nvidia-smi (nvidia/cuda:12.4.1-base-ubuntu22.04)"},
		// No command is nvidia-smi -L.
		{errors.New("my/img:1 exited 3: boom"), nil, "read the error above; `docker run --rm --gpus all my/img:1 nvidia-smi -L` reproduces it"},
		{errors.New("my/img:1 exited 3: boom"), []string{"sh", "-c", "true"}, "read the error above; `docker run --rm --gpus all my/img:1 sh -c true` reproduces it"},
	} {
		env := fixtureEnv("healthy", h100s(), fakeDocker{info: nvidiaEngine})
		env.RunTest = &RunTest{Runner: fakeRunner{err: tc.err}, Image: "my/img:1", Cmd: tc.cmd}
		if r := byID(Run(context.Background(), env))["gpu.run_test"]; r.Fix != tc.want {
			t.Errorf("fix %q, want %q", r.Fix, tc.want)
		}
	}
}
