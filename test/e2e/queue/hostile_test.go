package queue

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// TestQueueHostileRequests: what a user may not ask of the agent, which
// holds the Docker socket, is refused at submit with the rule it breaks;
// and the container of an accepted job is the agent's safe spec, as the
// engine reports it.
func TestQueueHostileRequests(t *testing.T) {
	t.Parallel()
	h := newHost(t, "")
	a := h.start(t)
	data := filepath.Join(h.mountRoot, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	escape := filepath.Join(h.mountRoot, "escape")
	if err := os.Symlink("/etc", escape); err != nil {
		t.Fatal(err)
	}
	base := func() map[string]any {
		return map[string]any{"gpus": 1, "time_limit": "5m", "image": h.image, "command": long}
	}
	with := func(k string, v any) map[string]any {
		m := base()
		m[k] = v
		return m
	}

	// Docker's own fields are no fields of a job request.
	for _, field := range []string{"privileged", "pid_mode", "ipc_mode", "uts_mode", "network_mode", "host_config", "cap_add", "devices", "user"} {
		var v any = "host"
		switch field {
		case "privileged":
			v = true
		case "host_config":
			v = map[string]any{"Privileged": true, "PidMode": "host"}
		case "cap_add", "devices":
			v = []string{"ALL"}
		case "user":
			v = "0:0"
		}
		e := a.refused(t, h.alice, with(field, v), apitype.CodeBadRequest, "")
		if !strings.Contains(e.Message, field) {
			t.Errorf("unknown field %s: message %q does not name it", field, e.Message)
		}
	}

	for _, c := range []struct {
		what   string
		body   map[string]any
		reason string
	}{
		{"a mount of /", with("mounts", []string{"/:/host"}), "mount_not_allowed"},
		{"a symlink out of the mount root", with("mounts", []string{escape + ":/x:ro"}), "mount_not_allowed"},
		{"a path through the symlink", with("mounts", []string{escape + "/ssl:/x:ro"}), "mount_not_allowed"},
		{"a .. out of the mount root", with("mounts", []string{data + "/../../..:/x:ro"}), "mount_not_allowed"},
		{"NVIDIA_VISIBLE_DEVICES=all", with("env", []string{"NVIDIA_VISIBLE_DEVICES=all"}), "env_not_allowed"},
		{"CUDA_VISIBLE_DEVICES", with("env", []string{"CUDA_VISIBLE_DEVICES=0,1,2,3"}), "env_not_allowed"},
		{"an image outside the patterns", with("image", "alpine:3.20"), "image_not_allowed"},
		{"a port outside the range", with("publish", []string{"2222:22"}), "port_not_allowed"},
		{"more GPUs than queue.max_gpus", with("gpus", 9), "too_big"},
		{"a time limit over the most", with("time_limit", "30d"), "time_limit_too_long"},
	} {
		e := a.refused(t, h.alice, c.body, apitype.CodeRefused, c.reason)
		t.Logf("%s: %s", c.what, e.Message)
	}
	// A user whose passwd entry is uid 0 runs as root: refused for an
	// image not in queue.run_as_root_images.
	a.refused(t, h.rooty, base(), apitype.CodeRefused, "image_not_allowed")
	// as_user is for root on the socket, never for a token.
	if status, body := a.call(t, http.MethodPost, "/api/v1/jobs", h.alice, with("as_user", "root")); status != http.StatusForbidden {
		t.Errorf("as_user root with alice's token: %d %s, want 403", status, body)
	}
	if status, body := a.call(t, http.MethodPost, "/api/v1/jobs", h.alice, with("as_user", "bob")); status != http.StatusForbidden {
		t.Errorf("as_user bob with alice's token: %d %s, want 403", status, body)
	}
	// Nothing refused was queued.
	var list apitype.JobsResponse
	status, body := a.call(t, http.MethodGet, "/api/v1/jobs?all_users=1&all=1", h.admin, nil)
	if err := json.Unmarshal(body, &list); status != http.StatusOK || err != nil || len(list.Jobs) != 0 {
		t.Errorf("jobs after the refusals: %d %s, want none", status, body)
	}

	// An accepted job's container, as the engine has it.
	req := h.request(1, "5m", long...)
	req.Env = []string{"TOKEN=s3cret-value"}
	req.Mounts = []string{data + ":/data:ro"}
	req.Publish = []string{strconv.Itoa(h.port) + ":8888"}
	req.ShmSize = "1GiB"
	j := a.submit(t, h.alice, req)
	j = a.await(t, j.ID, 30*time.Second, "running")
	if !slices.Equal(j.EnvKeys, []string{"TOKEN"}) {
		t.Errorf("env_keys %v, want [TOKEN]", j.EnvKeys)
	}
	if _, body := a.call(t, http.MethodGet, "/api/v1/jobs/"+j.ID, h.alice, nil); strings.Contains(string(body), "s3cret") {
		t.Errorf("the job's JSON shows an env value: %s", body)
	}
	c := dockertest.Inspect(t, h.cli, j.ContainerID)
	hc := c.HostConfig
	if hc.Privileged || hc.PidMode.IsHost() || hc.IpcMode.IsHost() || hc.UTSMode.IsHost() || hc.NetworkMode.IsHost() || hc.UsernsMode.IsHost() || hc.CgroupnsMode.IsHost() {
		t.Errorf("privileged %v, pid %q, ipc %q, uts %q, network %q, userns %q, cgroupns %q: want none of the host's",
			hc.Privileged, hc.PidMode, hc.IpcMode, hc.UTSMode, hc.NetworkMode, hc.UsernsMode, hc.CgroupnsMode)
	}
	if want := spec.NetworkName(h.node); string(hc.NetworkMode) != want {
		t.Errorf("network %q, want the node's isolated %s", hc.NetworkMode, want)
	}
	if hc.PidsLimit == nil || *hc.PidsLimit != spec.DefaultMaxPids || len(hc.Ulimits) != 1 || hc.Ulimits[0].Name != "nofile" {
		t.Errorf("pids limit %v, ulimits %v; want queue.max_pids' default and a nofile limit", hc.PidsLimit, hc.Ulimits)
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || len(hc.CapAdd) != 0 {
		t.Errorf("cap_drop %v, cap_add %v, want ALL dropped and none added", hc.CapDrop, hc.CapAdd)
	}
	if !slices.ContainsFunc(hc.SecurityOpt, func(s string) bool { return strings.HasPrefix(s, "no-new-privileges") }) ||
		slices.ContainsFunc(hc.SecurityOpt, func(s string) bool { return strings.Contains(s, "unconfined") }) {
		t.Errorf("security_opt %v, want no-new-privileges and the default seccomp profile", hc.SecurityOpt)
	}
	if len(hc.Devices) != 0 || len(hc.DeviceRequests) != 0 {
		t.Errorf("devices %v, device requests %v, want none with gpu_passing env", hc.Devices, hc.DeviceRequests)
	}
	if c.Config.User != "2001:2001" || !slices.Contains(hc.GroupAdd, "3000") {
		t.Errorf("user %q, groups %v, want alice's 2001:2001 with her group 3000", c.Config.User, hc.GroupAdd)
	}
	if hc.ShmSize != 1<<30 {
		t.Errorf("shm size %d, want 1GiB", hc.ShmSize)
	}
	env := map[string]string{}
	for _, kv := range c.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if env["NVIDIA_VISIBLE_DEVICES"] != strings.Join(j.GPUs, ",") || env["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID" || env["TOKEN"] != "s3cret-value" {
		t.Errorf("env %v, want NVIDIA_VISIBLE_DEVICES=%s, CUDA_DEVICE_ORDER=PCI_BUS_ID and TOKEN", c.Config.Env, strings.Join(j.GPUs, ","))
	}
	if c.Config.Labels["gpumeter.job"] != j.ID || c.Config.Labels["gpumeter.user"] != "alice" || c.Config.Labels["gpumeter.node"] != h.node {
		t.Errorf("labels %v, want gpumeter.job=%s, gpumeter.user=alice, gpumeter.node=%s", c.Config.Labels, j.ID, h.node)
	}
	// Docker is handed the agent's staging bind of the source, never the
	// user's path.
	staged := filepath.Join(h.dataDir, "stage", j.ID, "0")
	if len(c.Mounts) != 1 || c.Mounts[0].Source != staged || c.Mounts[0].Destination != "/data" || c.Mounts[0].RW {
		t.Errorf("mounts %+v, want %s (the staged %s) read-only at /data alone", c.Mounts, staged, data)
	}
	for port, bs := range hc.PortBindings {
		for _, b := range bs {
			if b.HostIP.String() != "127.0.0.1" || b.HostPort != strconv.Itoa(h.port) {
				t.Errorf("port %s bound to %s:%s, want 127.0.0.1:%d", port, b.HostIP, b.HostPort, h.port)
			}
		}
	}
	if len(hc.PortBindings) != 1 {
		t.Errorf("port bindings %v, want one", hc.PortBindings)
	}
}
