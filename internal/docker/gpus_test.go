package docker

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	mcontainer "github.com/moby/moby/api/types/container"

	"github.com/gpumeter/gpumeter/internal/container"
)

func TestGPURequestFrom(t *testing.T) {
	gpuCaps := [][]string{{"gpu"}}
	requests := func(drs ...mcontainer.DeviceRequest) *mcontainer.HostConfig {
		hc := &mcontainer.HostConfig{}
		hc.DeviceRequests = drs
		return hc
	}
	devices := func(paths ...string) *mcontainer.HostConfig {
		hc := &mcontainer.HostConfig{}
		for _, p := range paths {
			hc.Devices = append(hc.Devices, mcontainer.DeviceMapping{PathOnHost: p, PathInContainer: p, CgroupPermissions: "rwm"})
		}
		return hc
	}
	ids := func(ids ...string) container.GPURequest { return container.GPURequest{IDs: ids} }
	all := container.GPURequest{All: true}
	none := container.GPURequest{}

	tests := []struct {
		name string
		hc   *mcontainer.HostConfig
		env  []string
		want container.GPURequest
	}{
		{name: "nothing", want: none},
		{name: "empty host config", hc: &mcontainer.HostConfig{}, env: []string{"PATH=/bin"}, want: none},

		// docker run --gpus ...
		{name: "gpus all", hc: requests(mcontainer.DeviceRequest{Count: -1, Capabilities: gpuCaps}), want: all},
		{name: "gpus 2", hc: requests(mcontainer.DeviceRequest{Count: 2, Capabilities: gpuCaps}), want: ids("0", "1")},
		{name: "gpus device list", hc: requests(mcontainer.DeviceRequest{DeviceIDs: []string{"1", "3"}, Capabilities: gpuCaps}), want: ids("1", "3")},
		{name: "nvidia driver without capabilities", hc: requests(mcontainer.DeviceRequest{Driver: "nvidia", DeviceIDs: []string{"0"}}), want: ids("0")},
		{
			name: "uuids and a comma list kept as given",
			hc:   requests(mcontainer.DeviceRequest{Driver: "nvidia", DeviceIDs: []string{"GPU-aaa, GPU-bbb", "2", "MIG-ccc"}}),
			want: ids("GPU-aaa", "GPU-bbb", "2", "MIG-ccc"),
		},
		{
			name: "device ids win over count",
			hc:   requests(mcontainer.DeviceRequest{Driver: "nvidia", Count: 4, DeviceIDs: []string{"3"}}),
			want: ids("3"),
		},
		{
			name: "gpu in any capability set",
			hc:   requests(mcontainer.DeviceRequest{Count: 1, Capabilities: [][]string{{"utility"}, {"compute", "gpu"}}}),
			want: ids("0"),
		},
		{name: "count zero is no gpu", hc: requests(mcontainer.DeviceRequest{Driver: "nvidia"}), want: none},
		{
			name: "other drivers ignored",
			hc:   requests(mcontainer.DeviceRequest{Driver: "foo", Count: -1, Capabilities: [][]string{{"tpu"}}}),
			want: none,
		},

		// CDI
		{
			name: "cdi device request",
			hc:   requests(mcontainer.DeviceRequest{Driver: "cdi", DeviceIDs: []string{"nvidia.com/gpu=0", "nvidia.com/gpu=GPU-1234"}}),
			want: ids("0", "GPU-1234"),
		},
		{name: "cdi all", hc: requests(mcontainer.DeviceRequest{Driver: "cdi", DeviceIDs: []string{"nvidia.com/gpu=all"}}), want: all},
		{
			name: "cdi other vendors ignored",
			hc:   requests(mcontainer.DeviceRequest{Driver: "cdi", DeviceIDs: []string{"amd.com/gpu=0", "vendor.com/device=x"}}),
			want: none,
		},
		{name: "cdi names in devices", hc: devices("/dev/fuse", "nvidia.com/gpu=1", "nvidia.com/gpu=MIG-abc"), want: ids("1", "MIG-abc")},
		{name: "plain device paths ignored", hc: devices("/dev/nvidia0", "/dev/nvidiactl"), want: none},
		{
			name: "cdi annotations in key order",
			hc: &mcontainer.HostConfig{Annotations: map[string]string{
				"cdi.k8s.io/zz":   "nvidia.com/gpu=2",
				"cdi.k8s.io/aa":   "nvidia.com/gpu=0, nvidia.com/gpu=1",
				"org.example/foo": "nvidia.com/gpu=7",
			}},
			want: ids("0", "1", "2"),
		},

		// NVIDIA_VISIBLE_DEVICES
		{name: "env all", env: []string{"NVIDIA_VISIBLE_DEVICES=all"}, want: all},
		{name: "env ALL", env: []string{"NVIDIA_VISIBLE_DEVICES=ALL"}, want: all},
		{name: "env none", env: []string{"NVIDIA_VISIBLE_DEVICES=none"}, want: none},
		{name: "env void", env: []string{"NVIDIA_VISIBLE_DEVICES=void"}, want: none},
		{name: "env empty", env: []string{"NVIDIA_VISIBLE_DEVICES="}, want: none},
		{name: "env indexes", env: []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0,1"}, want: ids("0", "1")},
		{name: "env uuids trimmed", env: []string{"NVIDIA_VISIBLE_DEVICES= GPU-a , GPU-b ,,GPU-a"}, want: ids("GPU-a", "GPU-b")},
		{name: "env last wins", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=3"}, want: ids("3")},
		{name: "env volume-mount mode", env: []string{"NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"}, want: none},
		{name: "env similar names ignored", env: []string{"NVIDIA_VISIBLE_DEVICES_X=0", "XNVIDIA_VISIBLE_DEVICES=1", "NVIDIA_VISIBLE_DEVICES"}, want: none},
		{
			name: "env counts when requests are not for gpus",
			hc:   requests(mcontainer.DeviceRequest{Driver: "cdi", DeviceIDs: []string{"vendor.com/device=x"}}),
			env:  []string{"NVIDIA_VISIBLE_DEVICES=2"},
			want: ids("2"),
		},

		// Several sources.
		{
			name: "gpus request overrides the cuda image env",
			hc:   requests(mcontainer.DeviceRequest{DeviceIDs: []string{"1"}, Capabilities: gpuCaps}),
			env:  []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"},
			want: ids("1"),
		},
		{
			name: "cdi overrides env",
			hc:   devices("nvidia.com/gpu=1"),
			env:  []string{"NVIDIA_VISIBLE_DEVICES=0"},
			want: ids("1"),
		},
		{
			name: "explicit sources add up without duplicates",
			hc: &mcontainer.HostConfig{
				Resources: mcontainer.Resources{
					DeviceRequests: []mcontainer.DeviceRequest{
						{Count: 2, Capabilities: gpuCaps},
						{Driver: "cdi", DeviceIDs: []string{"nvidia.com/gpu=1", "nvidia.com/gpu=GPU-x"}},
					},
					Devices: []mcontainer.DeviceMapping{{PathOnHost: "nvidia.com/gpu=0"}, {PathOnHost: "nvidia.com/gpu=3"}},
				},
				Annotations: map[string]string{"cdi.k8s.io/a": "nvidia.com/gpu=GPU-x"},
			},
			want: ids("0", "1", "GPU-x", "3"),
		},
		{
			name: "all wins over ids",
			hc: requests(
				mcontainer.DeviceRequest{DeviceIDs: []string{"0"}, Capabilities: gpuCaps},
				mcontainer.DeviceRequest{Driver: "cdi", DeviceIDs: []string{"nvidia.com/gpu=all"}},
			),
			want: all,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := GPURequestFrom(tt.hc, tt.env)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("GPURequestFrom() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
