package spec

import (
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
)

var gpuPair = []string{"GPU-5f3c2a7e-0b1d-4c2e-9a8f-1e2d3c4b5a60", "GPU-8a9b0c1d-2e3f-4a5b-6c7d-8e9f0a1b2c3d"}

// cmpNet compares the moby types whose fields are unexported.
var cmpNet = cmp.Options{
	cmp.Comparer(func(a, b network.Port) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
}

func TestBuildWholeSpec(t *testing.T) {
	h := newHostTree(t)
	req := testRequest()
	req.Env = []string{"WANDB_MODE=offline"}
	req.Mounts = []string{filepath.Join(h.root, "models") + ":/models:ro", filepath.Join(h.root, "scratch") + ":/scratch"}
	req.Workdir = "/scratch"
	req.CPUs, req.ShmSize = 8, 4<<30
	req.Publish = []string{"8088:8888"}
	spec, err := Build(req, testRules(h.root), alice, "j-000123", gpuPair, DeviceRequests)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Name != "gpumeter-job-j-000123" {
		t.Errorf("name %q, want gpumeter-job-j-000123", spec.Name)
	}
	port := network.MustParsePort("8888/tcp")
	wantCfg := &container.Config{
		Image:        "nvcr.io/nvidia/pytorch:24.05-py3",
		Cmd:          []string{"python", "train.py"},
		WorkingDir:   "/scratch",
		User:         "4242:4242",
		Env:          []string{"WANDB_MODE=offline", "NVIDIA_VISIBLE_DEVICES=" + gpuPair[0] + "," + gpuPair[1], "CUDA_DEVICE_ORDER=PCI_BUS_ID"},
		ExposedPorts: network.PortSet{port: {}},
		Labels:       map[string]string{"gpumeter.job": "j-000123", "gpumeter.user": "alice", "gpumeter.team": "ml"},
	}
	if diff := cmp.Diff(wantCfg, spec.Config, cmpNet); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	wantHost := &container.HostConfig{
		NetworkMode:   "bridge",
		PortBindings:  network.PortMap{port: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: "8088"}}},
		RestartPolicy: container.RestartPolicy{Name: "no"},
		CapDrop:       []string{"ALL"},
		CapAdd:        []string{"SYS_NICE"},
		SecurityOpt:   []string{"no-new-privileges:true"},
		IpcMode:       "private",
		CgroupnsMode:  "private",
		GroupAdd:      []string{"2000"},
		ShmSize:       4 << 30,
		Resources: container.Resources{
			NanoCPUs:  8e9,
			Memory:    64 << 30,
			PidsLimit: ptr(int64(DefaultMaxPids)),
			Ulimits:   []*container.Ulimit{{Name: "nofile", Soft: int64(DefaultOpenFiles()), Hard: int64(DefaultOpenFiles())}},
			DeviceRequests: []container.DeviceRequest{{
				Driver:       "nvidia",
				DeviceIDs:    gpuPair,
				Capabilities: [][]string{{"gpu"}},
			}},
		},
		Mounts: []mount.Mount{
			{Type: "bind", Source: filepath.Join(h.root, "shared"), Target: "/models", ReadOnly: true, BindOptions: &mount.BindOptions{Propagation: "rprivate"}},
			{Type: "bind", Source: filepath.Join(h.root, "scratch"), Target: "/scratch", BindOptions: &mount.BindOptions{Propagation: "rprivate"}},
		},
	}
	if diff := cmp.Diff(wantHost, spec.HostConfig, cmpNet); diff != "" {
		t.Errorf("host config (-want +got):\n%s", diff)
	}
}

func TestBuildGPUPassing(t *testing.T) {
	tests := []struct {
		passing GPUPassing
		want    []container.DeviceRequest
	}{
		{DeviceRequests, []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: gpuPair, Capabilities: [][]string{{"gpu"}}}}},
		{CDI, []container.DeviceRequest{{Driver: "cdi", DeviceIDs: []string{"nvidia.com/gpu=" + gpuPair[0], "nvidia.com/gpu=" + gpuPair[1]}}}},
		{Env, nil},
	}
	for _, tt := range tests {
		t.Run(string(tt.passing), func(t *testing.T) {
			spec, err := Build(testRequest(), testRules("/srv"), alice, "j-000001", gpuPair, tt.passing)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, spec.HostConfig.DeviceRequests); diff != "" {
				t.Errorf("device requests (-want +got):\n%s", diff)
			}
			if got := envValues(spec.Config.Env, "NVIDIA_VISIBLE_DEVICES"); !slices.Equal(got, []string{strings.Join(gpuPair, ",")}) {
				t.Errorf("NVIDIA_VISIBLE_DEVICES %q, want the job's UUIDs once", got)
			}
			if spec.HostConfig.Devices != nil || spec.HostConfig.Runtime != "" {
				t.Errorf("devices %v, runtime %q, want none", spec.HostConfig.Devices, spec.HostConfig.Runtime)
			}
		})
	}
	if got := visibleDevices(nil); got != "void" {
		t.Errorf("visibleDevices(nil) = %q, want void", got)
	}
}

func TestBuildUser(t *testing.T) {
	req := testRequest()
	spec, err := Build(req, testRules("/srv"), Identity{UID: 1000, GID: 1000, Groups: []uint32{1000, 44, 44, 27}}, "j-1", gpuPair, Env)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Config.User != "1000:1000" || !slices.Equal(spec.HostConfig.GroupAdd, []string{"44", "27"}) {
		t.Errorf("user %q groups %q, want 1000:1000 with 44 and 27", spec.Config.User, spec.HostConfig.GroupAdd)
	}
	req.Image = "localhost/job:root"
	spec, err = Build(req, testRules("/srv"), Identity{}, "j-2", gpuPair, Env)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Config.User != "0:0" {
		t.Errorf("user %q, want 0:0 for a run_as_root image", spec.Config.User)
	}
	req.Image = "localhost/job:latest"
	var r *Refusal
	if _, err := Build(req, testRules("/srv"), Identity{}, "j-3", gpuPair, Env); !errors.As(err, &r) || r.Reason != ImageNotAllowed {
		t.Errorf("Build as uid 0: %v, want image_not_allowed", err)
	}
}

func TestBuildLimits(t *testing.T) {
	rules := testRules("/srv")
	rules.Network, rules.PublishAddress = "jobs", "10.0.0.1"
	req := testRequest()
	req.Memory, req.Publish = 8<<30, []string{"8000"}
	spec, err := Build(req, rules, alice, "j-1", gpuPair, Env)
	if err != nil {
		t.Fatal(err)
	}
	h := spec.HostConfig
	if h.NanoCPUs != 16e9 || h.Memory != 8<<30 || h.ShmSize != 0 {
		t.Errorf("cpus %d memory %d shm %d, want the maximum CPUs, the memory asked and Docker's shm", h.NanoCPUs, h.Memory, h.ShmSize)
	}
	if h.NetworkMode != "jobs" {
		t.Errorf("network %q, want jobs", h.NetworkMode)
	}
	b := h.PortBindings[network.MustParsePort("8000/tcp")]
	if len(b) != 1 || b[0].HostIP != netip.MustParseAddr("10.0.0.1") || b[0].HostPort != "8000" {
		t.Errorf("binding %v, want 10.0.0.1:8000", b)
	}
	spec, err = Build(testRequest(), Rules{Images: []string{"*/*/*"}}, alice, "j-2", gpuPair, Env)
	if err != nil {
		t.Fatal(err)
	}
	if spec.HostConfig.NanoCPUs != 0 || spec.HostConfig.Memory != 0 {
		t.Errorf("cpus %d memory %d, want no limit without a request or a maximum", spec.HostConfig.NanoCPUs, spec.HostConfig.Memory)
	}
}

func TestBuildErrors(t *testing.T) {
	tests := []struct {
		name    string
		id      string
		gpus    []string
		passing GPUPassing
		want    string
	}{
		{"fewer GPUs than asked", "j-1", gpuPair[:1], Env, "asks for 2 GPUs and was given 1"},
		{"a UUID that names two", "j-1", []string{gpuPair[0], "GPU-1,GPU-2"}, Env, "not a GPU UUID"},
		{"all", "j-1", []string{gpuPair[0], "all"}, Env, "not a GPU UUID"},
		{"auto is the agent's to resolve", "j-1", gpuPair, "auto", "not device_requests, cdi or env"},
		{"job id not a name", "../x", gpuPair, Env, "not a container name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(testRequest(), testRules("/srv"), alice, tt.id, tt.gpus, tt.passing)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Build: %v, want %q", err, tt.want)
			}
		})
	}
}

// TestBuildMemoryJob: a memory job holds its one shared GPU as a 1-GPU
// job does, and carries its declared memory for the meter.
func TestBuildMemoryJob(t *testing.T) {
	req := testRequest()
	req.GPUs, req.GPUMemory = 0, 20<<30
	spec, err := Build(req, testRules("/srv"), alice, "j-000007", gpuPair[:1], DeviceRequests)
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Config.Labels[GPUMemoryLabel]; got != "21474836480" {
		t.Errorf("label %s = %q, want 21474836480", GPUMemoryLabel, got)
	}
	if got := envValues(spec.Config.Env, "NVIDIA_VISIBLE_DEVICES"); !slices.Equal(got, gpuPair[:1]) {
		t.Errorf("NVIDIA_VISIBLE_DEVICES %q, want the one shared GPU", got)
	}
	if _, err := Build(req, testRules("/srv"), alice, "j-000007", gpuPair, DeviceRequests); err == nil || !strings.Contains(err.Error(), "asks for 1 GPUs and was given 2") {
		t.Errorf("Build with two GPUs: %v, want one GPU for a memory job", err)
	}
	whole, err := Build(testRequest(), testRules("/srv"), alice, "j-000008", gpuPair, DeviceRequests)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := whole.Config.Labels[GPUMemoryLabel]; ok {
		t.Errorf("a whole-GPU job has %s=%q, want none", GPUMemoryLabel, v)
	}
}

// TestBuildIsolates builds every request the checker accepts in the other
// tests and finds none of the ways out of a container: the request has
// no field for them, so nothing it says can turn them on.
// TestBuildProcessLimits: every job has a PID limit and a nofile ulimit,
// whatever the rules leave unset; a request may ask for fewer processes
// than the maximum, and gets what it asked for.
func TestBuildProcessLimits(t *testing.T) {
	for _, tc := range []struct {
		name              string
		maxPids, maxFiles int
		pids              int
		wantPids          int64
		wantFiles         int64
	}{
		{"defaults", 0, 0, 0, DefaultMaxPids, int64(DefaultOpenFiles())},
		{"the rules' maximum", 512, 1024, 0, 512, 1024},
		{"fewer asked for", 512, 1024, 64, 64, 1024},
		{"the maximum asked for", 512, 1024, 512, 512, 1024},
		{"fewer than the default", 0, 0, 100, 100, int64(DefaultOpenFiles())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules := testRules("/srv")
			rules.MaxPids, rules.MaxOpenFiles = tc.maxPids, tc.maxFiles
			req := testRequest()
			req.Pids = tc.pids
			s, err := Build(req, rules, alice, "j-1", gpuPair, Env)
			if err != nil {
				t.Fatal(err)
			}
			h := s.HostConfig
			if h.PidsLimit == nil || *h.PidsLimit != tc.wantPids {
				t.Errorf("PidsLimit %v, want %d", h.PidsLimit, tc.wantPids)
			}
			want := []*container.Ulimit{{Name: "nofile", Soft: tc.wantFiles, Hard: tc.wantFiles}}
			if diff := cmp.Diff(want, h.Ulimits); diff != "" {
				t.Errorf("ulimits (-want +got):\n%s", diff)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestDefaultOpenFiles: the default nofile limit is never above this
// process's own hard limit, which runc could not raise a job's to.
func TestDefaultOpenFiles(t *testing.T) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
	want := min(DefaultMaxOpenFiles, int(min(r.Max, MostOpenFiles+1)))
	if r.Max > MostOpenFiles {
		want = DefaultMaxOpenFiles
	}
	if got := DefaultOpenFiles(); got != want {
		t.Errorf("DefaultOpenFiles() = %d with a hard limit of %d, want %d", got, r.Max, want)
	}
	if got := OpenFilesFor(64); got != 64 {
		t.Errorf("OpenFilesFor(64) = %d, want 64", got)
	}
}

func TestBuildIsolates(t *testing.T) {
	h := newHostTree(t)
	reqs := []Request{testRequest()}
	r := testRequest()
	r.Mounts = []string{filepath.Join(h.root, "scratch") + ":/host"}
	r.Env = []string{"DOCKER_HOST=unix:///var/run/docker.sock", "LD_PRELOAD=/x.so"}
	r.Command = []string{"--privileged", "--pid=host", "--network=host", "--ipc=host", "--uts=host", "--device=/dev/mem"}
	r.Name = "privileged"
	r.Publish = []string{"8000:22"}
	reqs = append(reqs, r)
	for _, passing := range []GPUPassing{DeviceRequests, CDI, Env} {
		for _, req := range reqs {
			spec, err := Build(req, testRules(h.root), alice, "j-1", gpuPair, passing)
			if err != nil {
				t.Fatal(err)
			}
			assertIsolated(t, spec, testRules(h.root))
		}
	}
}

// assertIsolated fails t where spec leaves the job a way to the host.
func assertIsolated(t testing.TB, spec *Spec, rules Rules) {
	t.Helper()
	h := spec.HostConfig
	var bad []string
	check := func(ok bool, what string) {
		if !ok {
			bad = append(bad, what)
		}
	}
	check(!h.Privileged, "privileged")
	check(h.PidMode == "", "pid mode "+string(h.PidMode))
	check(h.IpcMode == container.IPCModePrivate, "ipc mode "+string(h.IpcMode))
	check(h.UTSMode == "", "uts mode "+string(h.UTSMode))
	check(h.UsernsMode == "", "userns mode "+string(h.UsernsMode))
	check(h.CgroupnsMode == container.CgroupnsModePrivate, "cgroupns mode "+string(h.CgroupnsMode))
	check(string(h.NetworkMode) == rules.network() && !h.NetworkMode.IsHost() && !h.NetworkMode.IsContainer(), "network "+string(h.NetworkMode))
	check(slices.Equal(h.CapDrop, []string{"ALL"}), "capabilities not all dropped")
	check(slices.Equal(h.CapAdd, rules.CapAdd), "capabilities beyond the allowlist")
	check(slices.Equal(h.SecurityOpt, []string{"no-new-privileges:true"}), "security options "+strings.Join(h.SecurityOpt, ","))
	check(len(h.Devices) == 0 && len(h.DeviceCgroupRules) == 0, "devices")
	check(len(h.Binds) == 0 && len(h.VolumesFrom) == 0 && len(h.Tmpfs) == 0, "binds, volumes-from or tmpfs")
	check(len(h.Sysctls) == 0 && len(h.Links) == 0 && len(h.ExtraHosts) == 0, "sysctls, links or extra hosts")
	check(!h.PublishAllPorts, "publish all ports")
	check(h.Runtime == "" && h.CgroupParent == "" && h.Cgroup == "", "runtime or cgroup")
	check(h.OomKillDisable == nil && h.OomScoreAdj == 0, "oom settings")
	check(h.RestartPolicy.IsNone(), "restart policy")
	check(h.MaskedPaths == nil && h.ReadonlyPaths == nil, "masked or read-only paths overridden")
	check(rules.MaxShmSize == 0 || uint64(h.ShmSize) <= rules.MaxShmSize, "shm over the maximum")
	check(rules.MaxMemory == 0 || uint64(h.Memory) <= rules.MaxMemory && h.Memory > 0, "memory over the maximum")
	check(rules.MaxCPUs == 0 || float64(h.NanoCPUs) <= rules.MaxCPUs*1e9 && h.NanoCPUs > 0, "cpus over the maximum")
	check(h.PidsLimit != nil && *h.PidsLimit > 0 && *h.PidsLimit <= int64(rules.maxPids()), "no PID limit, or one over the maximum")
	check(len(h.Ulimits) == 1 && h.Ulimits[0].Name == "nofile" && h.Ulimits[0].Soft == h.Ulimits[0].Hard &&
		h.Ulimits[0].Hard == int64(rules.maxOpenFiles()), "no nofile ulimit of queue.max_open_files")
	for _, m := range h.Mounts {
		check(m.Type == mount.TypeBind && m.BindOptions != nil && m.BindOptions.Propagation == mount.PropagationRPrivate, "mount "+m.Source)
		in := false
		for _, root := range rules.MountRoots {
			if r, err := filepath.EvalSymlinks(root); err == nil && within(m.Source, r) {
				in = true
			}
		}
		check(in, "mount source "+m.Source+" outside the roots")
	}
	for _, b := range h.PortBindings {
		for _, pb := range b {
			check(pb.HostIP.String() == rules.publishAddress(), "port bound to "+pb.HostIP.String())
		}
	}
	for _, dr := range h.DeviceRequests {
		check(dr.Count == 0 && dr.Options == nil, "device request for a count or with options")
	}
	check(spec.Config.Labels[JobLabel] != "", "no job label")
	_, exempt := spec.Config.Labels[ExemptLabel]
	check(!exempt, "exempt label")
	for k := range spec.Config.Labels {
		check(slices.Contains(rules.reservedLabels(), k) || matchAny(rules.Labels, k), "label "+k+" outside queue.labels")
	}
	check(len(envValues(spec.Config.Env, "NVIDIA_VISIBLE_DEVICES")) == 1, "NVIDIA_VISIBLE_DEVICES not set once")
	for _, kv := range spec.Config.Env {
		k, _, _ := strings.Cut(kv, "=")
		check(k == "NVIDIA_VISIBLE_DEVICES" || !strings.HasPrefix(strings.ToUpper(k), "NVIDIA_"), "request sets "+k)
		check(k != "CUDA_VISIBLE_DEVICES", "request sets "+k)
	}
	if len(bad) > 0 {
		t.Errorf("spec %s is not isolated: %s", spec.Name, strings.Join(bad, "; "))
	}
}

func envValues(env []string, key string) []string {
	var out []string
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			out = append(out, v)
		}
	}
	return out
}

// TestForNode: a job's container is named for its node and job and
// labelled with the node, so that agents sharing an engine keep apart;
// a node name Docker would refuse in a name is made safe.
func TestForNode(t *testing.T) {
	for _, tc := range []struct{ node, want string }{
		{"", "gpumeter-job-j-000007"},
		{"lab-1", "gpumeter-job-lab-1-j-000007"},
		{"gpu box/2", "gpumeter-job-gpu-box-2-j-000007"},
	} {
		s, err := Build(testRequest(), testRules(t.TempDir()), alice, "j-000007", gpuPair, Env)
		if err != nil {
			t.Fatal(err)
		}
		s.ForNode(tc.node)
		if s.Name != tc.want {
			t.Errorf("node %q: name %q, want %q", tc.node, s.Name, tc.want)
		}
		if got := s.Config.Labels[NodeLabel]; got != tc.node {
			t.Errorf("node %q: label %q", tc.node, got)
		}
		if s.Config.Labels[JobLabel] != "j-000007" {
			t.Errorf("node %q: job label %q", tc.node, s.Config.Labels[JobLabel])
		}
	}
}

// TestNetworkName: a node's isolated network is named for the node, made
// safe as a container name is.
func TestNetworkName(t *testing.T) {
	for _, tc := range []struct{ node, want string }{
		{"", "gpumeter-jobs"},
		{"lab-1", "gpumeter-jobs-lab-1"},
		{"gpu box/2", "gpumeter-jobs-gpu-box-2"},
	} {
		if got := NetworkName(tc.node); got != tc.want {
			t.Errorf("NetworkName(%q) = %q, want %q", tc.node, got, tc.want)
		}
	}
}

func TestSetPreemptGrace(t *testing.T) {
	s := &Spec{Config: &container.Config{Env: []string{"A=1", PreemptGraceEnv + "=7"}}}
	s.SetPreemptGrace(2*time.Minute + 500*time.Millisecond)
	if want := []string{"A=1", PreemptGraceEnv + "=120"}; !slices.Equal(s.Config.Env, want) {
		t.Errorf("env %q, want %q", s.Config.Env, want)
	}
	s.SetPreemptGrace(time.Millisecond)
	if want := []string{"A=1", PreemptGraceEnv + "=1"}; !slices.Equal(s.Config.Env, want) {
		t.Errorf("env %q, want %q", s.Config.Env, want)
	}
}
