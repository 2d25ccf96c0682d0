package config

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/units"
)

// Bases of queue.fair_share.basis: which GPU-hours count against a user.
const (
	// BasisUsed counts the GPU-seconds a container's processes were busy.
	BasisUsed = "used"
	// BasisAllocated counts a GPU's time split among its holders.
	BasisAllocated = "allocated"
	// BasisHeld counts the whole time a container had a GPU, busy or
	// not, shared or not: holding an idle GPU costs as much as using it.
	BasisHeld = "held"
)

// OverrunAction is queue.memory_overrun_action: what is done to a memory
// job that stayed over the GPU memory it declared for the grace.
type OverrunAction string

// The overrun actions. Stop ends the job, failed; warn only warns.
const (
	OverrunStop OverrunAction = "stop"
	OverrunWarn OverrunAction = "warn"
)

// ParseOverrunAction parses a queue.memory_overrun_action value.
func ParseOverrunAction(s string) (OverrunAction, error) {
	switch a := OverrunAction(s); a {
	case OverrunStop, OverrunWarn:
		return a, nil
	}
	return "", fmt.Errorf("%q is not stop or warn", s)
}

// DefaultTeamCap is the MaxGPUsPerTeam entry that caps every team not
// named on its own.
const DefaultTeamCap = "default"

// SharedAll is the queue.shared_gpus entry that marks every GPU shared.
const SharedAll = "all"

// TeamCap is the most GPUs the jobs of team may hold at once, and whether
// there is such a cap: the team's own entry of MaxGPUsPerTeam, else its
// "default" entry, else none.
func (q Queue) TeamCap(team string) (int, bool) {
	if n, ok := q.MaxGPUsPerTeam[team]; ok {
		return n, true
	}
	n, ok := q.MaxGPUsPerTeam[DefaultTeamCap]
	return n, ok
}

// Share is the share of a user or team name: its queue.shares entry, or 1.
func (q Queue) Share(name string) float64 {
	if s, ok := q.Shares[name]; ok {
		return s
	}
	return 1
}

// parseGPUHours reads a GPU-hour amount: "2000h" or "2000".
func parseGPUHours(s string) (float64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "h")
	f, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number of GPU-hours, such as 2000h", s)
	}
	return f, nil
}

// parseNumber reads any finite number; Validate says which make no sense.
func parseNumber(s string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return f, nil
}

// shareErrors are the errors of the fair-share, priority, budget, memory
// sharing and placement settings, named as Validate names the others.
func (q Queue) shareErrors() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !slices.Contains([]string{BasisUsed, BasisAllocated, BasisHeld}, q.FairShare.Basis) {
		bad("fair_share.basis: %q is not one of used, allocated, held", q.FairShare.Basis)
	}
	if q.FairShare.HalfLife <= 0 {
		bad("fair_share.half_life: %s must be more than 0 (fair share cannot be turned off by a half-life; a long one, such as 10000d, makes all past use count alike)", units.FormatDuration(q.FairShare.HalfLife))
	}
	if q.FairShare.Refresh <= 0 {
		bad("fair_share.refresh: %s must be more than 0", units.FormatDuration(q.FairShare.Refresh))
	}
	for _, name := range slices.Sorted(maps.Keys(q.Shares)) {
		if s := q.Shares[name]; !(s > 0) {
			bad("shares.%s: %v must be more than 0", name, s)
		}
	}
	w := q.Priority.Weights
	for _, x := range []struct {
		name string
		v    float64
	}{{"fair_share", w.FairShare}, {"age", w.Age}, {"class", w.Class}} {
		if x.v < 0 {
			bad("priority.weights.%s: %v is negative", x.name, x.v)
		}
	}
	if w.FairShare == 0 && w.Age == 0 && w.Class == 0 {
		bad("priority.weights.fair_share, queue.priority.weights.age, queue.priority.weights.class: all are 0; give at least one a weight more than 0")
	}
	if q.Priority.AgeMax <= 0 {
		bad("priority.age_max: %s must be more than 0", units.FormatDuration(q.Priority.AgeMax))
	}
	for _, u := range q.Priority.HighUsers {
		if strings.TrimSpace(u) == "" {
			bad("priority.high_users: an empty user name")
		}
	}
	for _, team := range slices.Sorted(maps.Keys(q.MaxGPUsPerTeam)) {
		if n := q.MaxGPUsPerTeam[team]; n < 0 {
			bad("max_gpus_per_team.%s: %d is negative", team, n)
		} else if n == 0 && team == DefaultTeamCap {
			bad("max_gpus_per_team.default: 0 would start no job of any team not named; leave default out for no cap, or give a team 0 by name")
		}
	}
	for _, team := range slices.Sorted(maps.Keys(q.Budgets)) {
		if h := q.Budgets[team]; !(h > 0) {
			bad("budgets.%s: %vh must be more than 0 GPU-hours (a team without an entry has no budget)", team, h)
		}
	}
	errs = append(errs, sharedGPUErrors(q.SharedGPUs)...)
	if f := q.SharedMemoryFraction; !(f > 0 && f <= 1) {
		bad("shared_memory_fraction: %v is outside (0, 1] (a fraction of a shared GPU's memory)", f)
	}
	if q.MemoryOverrunGrace < 0 {
		bad("memory_overrun_grace: %s is negative", units.FormatDuration(q.MemoryOverrunGrace))
	}
	if _, err := ParseOverrunAction(string(q.MemoryOverrunAction)); err != nil {
		bad("memory_overrun_action: %v", err)
	}
	if w := q.PlacementWindow; w <= 0 || w > time.Hour {
		bad("placement_window: %s is outside (0s, 1h] (the agent keeps the last hour of utilisation)", units.FormatDuration(w))
	}
	if t := q.TargetUtilization; !(t > 0 && t <= 1) {
		bad("target_utilization: %v is outside (0, 1] (a fraction of a GPU's SM utilisation)", t)
	}
	return errs
}

// sharedGPUErrors checks queue.shared_gpus: "all" alone, or GPU indices
// and UUIDs (GPU-… or MIG-…, as NVML names them).
func sharedGPUErrors(gpus []string) []error {
	var errs []error
	seen := map[string]bool{}
	for _, g := range gpus {
		switch {
		case g == SharedAll:
			if len(gpus) > 1 {
				errs = append(errs, fmt.Errorf("shared_gpus: %q marks every GPU shared; name no other GPU with it", SharedAll))
			}
		case strings.HasPrefix(g, "GPU-") || strings.HasPrefix(g, "MIG-"):
		default:
			if n, err := strconv.Atoi(g); err != nil || n < 0 {
				errs = append(errs, fmt.Errorf("shared_gpus: %q is not a GPU index, a UUID (GPU-…) or all", g))
			}
		}
		if seen[g] {
			errs = append(errs, fmt.Errorf("shared_gpus: %q is named twice", g))
		}
		seen[g] = true
	}
	return errs
}
