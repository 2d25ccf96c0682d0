package config

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestWasteRulesValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*WasteRules)
		want   []string // substrings of the error; none for valid rules
	}{
		{"defaults", func(*WasteRules) {}, nil},
		{"too old on", func(r *WasteRules) { r.TooOld = TooOldRule{MaxAge: 7 * 24 * time.Hour, Grace: time.Hour} }, nil},
		{"grace equal to window", func(r *WasteRules) { r.Idle.Grace = time.Hour }, nil},
		{"negative SM", func(r *WasteRules) { r.Idle.SMPercent = -1 }, []string{"idle.sm_percent: -1 is negative"}},
		{"SM above 100", func(r *WasteRules) { r.Idle.SMPercent = 101 }, []string{"idle.sm_percent: 101 is above 100"}},
		{"negative CPU", func(r *WasteRules) { r.Idle.CPUCores = -0.1 }, []string{"idle.cpu_cores: -0.1 is negative"}},
		{"NaN threshold", func(r *WasteRules) { r.LowEfficiency.Threshold = math.NaN() }, []string{"low_efficiency.threshold: NaN is not a number"}},
		{"negative min GPU-hours", func(r *WasteRules) { r.LowEfficiency.MinGPUHours = -2 }, []string{"low_efficiency.min_gpu_hours: -2 is negative"}},
		{"grace over window", func(r *WasteRules) { r.Stalled.Grace = 31 * time.Minute }, []string{"stalled.grace: 31m0s is longer than the window, 30m0s"}},
		{"grace over max age", func(r *WasteRules) { r.TooOld = TooOldRule{MaxAge: time.Hour, Grace: 2 * time.Hour} }, []string{"too_old.grace: 2h0m0s is longer than max_age, 1h0m0s"}},
		{"grace with no window", func(r *WasteRules) { r.Outside.Grace = time.Minute }, []string{"outside.grace: 1m0s is longer than the window, 0s"}},
		{"negative window", func(r *WasteRules) { r.Idle.Window = -time.Minute }, []string{"idle.window: -1m0s is negative"}},
		{"no window", func(r *WasteRules) { r.LowEfficiency.Window = 0 }, []string{"low_efficiency.window: must be more than 0"}},
		{"no window, rule off", func(r *WasteRules) { r.LowEfficiency.Window, r.LowEfficiency.Enabled = 0, false }, nil},
		{"several", func(r *WasteRules) {
			r.Idle.SMPercent, r.OverAllocated.Grace = -5, 2*time.Hour
		}, []string{"idle.sm_percent: -5 is negative", "over_allocated.grace: 2h0m0s is longer than the window, 1h0m0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := DefaultWasteRules()
			tt.change(&r)
			err := r.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}
