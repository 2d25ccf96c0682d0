package config

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Waste rule names, as the waste.* and policy.rules.* keys, findings and
// metrics carry them.
const (
	RuleIdle          = "idle"
	RuleStalled       = "stalled"
	RuleOverAllocated = "over_allocated"
	RuleTooOld        = "too_old"
	RuleLowEfficiency = "low_efficiency"
	RuleOutside       = "outside"
)

// RuleNames lists the waste rules in the order reports show them.
func RuleNames() []string {
	return []string{RuleIdle, RuleStalled, RuleOverAllocated, RuleTooOld, RuleLowEfficiency, RuleOutside}
}

// WasteRules are the thresholds, windows and graces of every waste rule;
// the waste package says what each rule finds.
type WasteRules struct {
	Idle          IdleRule
	Stalled       StalledRule
	OverAllocated OverAllocatedRule
	TooOld        TooOldRule
	LowEfficiency LowEfficiencyRule
	Outside       OutsideRule
}

// IdleRule finds containers that hold GPUs and do nothing with them.
type IdleRule struct {
	Enabled bool
	// SMPercent is the SM utilisation (percent of the device) below which
	// a held GPU is idle; over-allocated uses it too.
	SMPercent float64
	// CPUCores is the CPU use below which the container is idle.
	CPUCores      float64
	Window, Grace time.Duration
}

// StalledRule finds containers that hold GPU memory and compute nothing
// while their CPU is busy.
type StalledRule struct {
	Enabled       bool
	Window, Grace time.Duration
}

// OverAllocatedRule finds containers that use fewer GPUs than they hold.
type OverAllocatedRule struct {
	Enabled       bool
	Window, Grace time.Duration
}

// TooOldRule finds containers that run longer than MaxAge; 0 turns it off.
type TooOldRule struct {
	MaxAge, Grace time.Duration
}

// LowEfficiencyRule finds containers whose efficiency, used / held
// GPU-hours, stays below Threshold.
type LowEfficiencyRule struct {
	Enabled   bool
	Threshold float64
	// MinGPUHours is the allocated GPU-hours a container must hold over
	// the window to be judged at all.
	MinGPUHours   float64
	Window, Grace time.Duration
}

// OutsideRule finds GPU use outside containers.
type OutsideRule struct {
	Enabled bool
	// UnaccountedMemory is the device memory no process accounts for
	// above which a GPU is reported (live only).
	UnaccountedMemory uint64
	Window, Grace     time.Duration
}

// DefaultWasteRules returns the rules as gpumeter ships them.
func DefaultWasteRules() WasteRules {
	return WasteRules{
		Idle:          IdleRule{Enabled: true, SMPercent: 5, CPUCores: 0.1, Window: time.Hour},
		Stalled:       StalledRule{Enabled: true, Window: 30 * time.Minute},
		OverAllocated: OverAllocatedRule{Enabled: true, Window: time.Hour},
		LowEfficiency: LowEfficiencyRule{Enabled: true, Threshold: 0.3, MinGPUHours: 1, Window: 4 * time.Hour},
		Outside:       OutsideRule{Enabled: true, UnaccountedMemory: 1 << 30},
	}
}

// Validate reports every setting that makes no sense, named as the
// waste.* keys are (without the prefix): negative or non-finite
// thresholds, an SM threshold above 100 %, a window rule without a
// window, and a grace longer than its window.
func (r WasteRules) Validate() error {
	var errs []error
	threshold := func(name string, v float64) {
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			errs = append(errs, fmt.Errorf("%s: %v is not a number", name, v))
		case v < 0:
			errs = append(errs, fmt.Errorf("%s: %v is negative", name, v))
		}
	}
	window := func(rule string, w, g time.Duration, needWindow bool) {
		if w < 0 {
			errs = append(errs, fmt.Errorf("%s.window: %s is negative", rule, w))
		}
		if g < 0 {
			errs = append(errs, fmt.Errorf("%s.grace: %s is negative", rule, g))
		}
		if needWindow && w <= 0 {
			errs = append(errs, fmt.Errorf("%s.window: must be more than 0", rule))
		}
		if g > w && w >= 0 {
			errs = append(errs, fmt.Errorf("%s.grace: %s is longer than the window, %s", rule, g, w))
		}
	}
	threshold("idle.sm_percent", r.Idle.SMPercent)
	if r.Idle.SMPercent > 100 {
		errs = append(errs, fmt.Errorf("idle.sm_percent: %v is above 100", r.Idle.SMPercent))
	}
	threshold("idle.cpu_cores", r.Idle.CPUCores)
	window("idle", r.Idle.Window, r.Idle.Grace, false)
	window("stalled", r.Stalled.Window, r.Stalled.Grace, false)
	window("over_allocated", r.OverAllocated.Window, r.OverAllocated.Grace, r.OverAllocated.Enabled)
	if r.TooOld.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("too_old.max_age: %s is negative", r.TooOld.MaxAge))
	}
	if r.TooOld.Grace < 0 {
		errs = append(errs, fmt.Errorf("too_old.grace: %s is negative", r.TooOld.Grace))
	}
	if r.TooOld.MaxAge > 0 && r.TooOld.Grace > r.TooOld.MaxAge {
		errs = append(errs, fmt.Errorf("too_old.grace: %s is longer than max_age, %s", r.TooOld.Grace, r.TooOld.MaxAge))
	}
	threshold("low_efficiency.threshold", r.LowEfficiency.Threshold)
	threshold("low_efficiency.min_gpu_hours", r.LowEfficiency.MinGPUHours)
	window("low_efficiency", r.LowEfficiency.Window, r.LowEfficiency.Grace, r.LowEfficiency.Enabled)
	window("outside", r.Outside.Window, r.Outside.Grace, false)
	return errors.Join(errs...)
}

// WasteErrors are the errors of the waste rules, named by their keys.
func (c *Config) WasteErrors() []error {
	err := c.Waste.Validate()
	if err == nil {
		return nil
	}
	var errs []error
	for _, line := range strings.Split(err.Error(), "\n") {
		errs = append(errs, errors.New("waste."+line))
	}
	return errs
}
