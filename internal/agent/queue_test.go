package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// TestResolvePassing: auto passes GPUs as DeviceRequests where Docker has
// the nvidia runtime, by NVIDIA_VISIBLE_DEVICES with the sim source, and
// refuses on a real host without the runtime, pointing at the toolkit.
func TestResolvePassing(t *testing.T) {
	ctx := context.Background()
	has := func(v bool, err error) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) { return v, err }
	}
	for _, tc := range []struct {
		setting   config.GPUPassing
		simulated bool
		support   func(context.Context) (bool, error)
		want      spec.GPUPassing
		wantErr   string
	}{
		{"auto", false, has(true, nil), spec.DeviceRequests, ""},
		{"", false, has(true, nil), spec.DeviceRequests, ""},
		{"auto", true, has(false, nil), spec.Env, ""},
		{"auto", false, has(false, nil), "", "nvidia-ctk runtime configure"},
		{"auto", false, has(false, errors.New("connection refused")), "", "connection refused"},
		{"cdi", false, has(false, nil), spec.CDI, ""},
		{"env", false, has(false, nil), spec.Env, ""},
		{"device_requests", true, has(false, nil), spec.DeviceRequests, ""},
	} {
		got, err := resolvePassing(ctx, tc.setting, tc.simulated, tc.support)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q simulated=%v: err %v, want one saying %q", tc.setting, tc.simulated, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q simulated=%v: %q, %v; want %q", tc.setting, tc.simulated, got, err, tc.want)
		}
	}
}

// TestQueueReloadable: a SIGHUP puts the queue's limits, patterns and
// caps in force; turning it on or off, its network, GPU passing and the
// settings the runtime reads once need a restart, and the agent says so.
func TestQueueReloadable(t *testing.T) {
	for _, k := range []string{"queue.images", "queue.labels", "queue.mount_roots", "queue.max_gpus", "queue.max_time_limit",
		"queue.default_time_limit", "queue.max_gpus_per_user", "queue.placement", "queue.outside_memory_threshold", "queue.publish_ports"} {
		if !reloadable(k) {
			t.Errorf("%s is not reloadable", k)
		}
	}
	for _, k := range []string{"queue.enabled", "queue.network", "queue.gpu_passing", "queue.stop_grace", "queue.notify", "queue.log_retention"} {
		if reloadable(k) {
			t.Errorf("%s is reloadable, but the queue reads it once", k)
		}
	}
}
