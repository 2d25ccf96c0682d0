package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

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
		setting   string
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
		{"magic", true, has(false, nil), "", "not auto, device_requests, cdi or env"},
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
