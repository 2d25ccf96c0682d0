// Package waste finds GPU time that was held and not used: idle
// containers, stalled ones, containers holding more GPUs than they use,
// containers running past a maximum age, containers whose efficiency stays
// low, and GPU use outside any container. The same rules run on the
// agent's live ticks (Live) and over the ledger (Evaluate); both feed
// every owner's use, step by step, to the same trackers, so a ledger
// evaluation finds what the live one found. The package does no I/O
// except reading the ledger through Reader.
//
// # Steps
//
// Rules look at steps: a minute (or an hour) of the ledger, or a bucket of
// live ticks (a minute, shorter when a rule's window is short). In a step
// an owner ran for some seconds s and booked, on each GPU g, allocated,
// present and used GPU-seconds (see the meter), GPU memory byte-seconds
// and, for containers, CPU seconds. Its SM utilisation on g in the step is
// used_g/s·100 %, its CPU use cpu/s cores and its GPU memory mem_g/s. A
// container holds g in a step when it booked allocated time on it.
//
// # Rules
//
// A run is an unbroken sequence of steps in which a rule's condition
// holds; a run that has lasted the rule's window plus its grace is
// reported, from the start of the run. The rules (their settings are
// config.WasteRules), and the GPU-hours each counts as wasted (allocated
// and present GPU-hours as the meter books them, so a GPU shared by two
// holders counts half for each):
//
//   - idle: the container holds at least one GPU, its SM utilisation on
//     every GPU it holds is below Idle.SMPercent and its CPU use below
//     Idle.CPUCores. Wasted: the allocated GPU-hours of the run.
//   - stalled: the container holds GPU memory on the GPUs it holds, its SM
//     utilisation on every one of them rounds to 0 % (below 0.5 %), and it
//     is not idle (its CPU is busy: a job waiting on data loading).
//     Wasted: the allocated GPU-hours of the run.
//   - over_allocated: over the last OverAllocated.Window the container
//     held at least two GPUs, used at least one of them (SM-weighted
//     utilisation over the window at or above Idle.SMPercent) and left at
//     least one unused (below it), and it ran for the whole window. The
//     run starts where the first such window starts; the GPU set of the
//     finding is the unused GPUs. Wasted: the allocated GPU-hours of the
//     unused GPUs from the start of the run.
//   - too_old: the container has run longer than TooOld.MaxAge (off when
//     0). The run starts at start + MaxAge. Wasted: the allocated
//     GPU-hours after that.
//   - low_efficiency: over the last LowEfficiency.Window the container
//     ran all the time, held at least LowEfficiency.MinGPUHours allocated
//     GPU-hours and its efficiency, used / held GPU-hours (held: the
//     whole time it held each GPU, not split among the containers
//     sharing it, so that efficiency stays within 0..1), stayed below
//     LowEfficiency.Threshold, and no step of the window belongs to an
//     idle, stalled or over-allocated finding (those explain the waste
//     more precisely; counting it twice would inflate the totals). Ledger
//     steps without held GPU-seconds (written before gpumeter kept them)
//     are left out of the efficiency; a window with none is not judged.
//     The run starts where the first such window starts. Wasted:
//     allocated − used GPU-hours from the start of the run, per GPU and
//     step where allocated exceeds used.
//   - outside: a process outside any container (a Unix user's, or one
//     whose owner could not be found) is present on a GPU; one finding per
//     user and GPU. Wasted: its present GPU-hours. Live only, also GPU
//     memory that no process accounts for (the device's used memory minus
//     its processes') above Outside.UnaccountedMemory: one finding per
//     GPU, wasting no GPU-hours (memory is not time); the ledger does not
//     keep device memory.
//
// Grace is how long the condition must hold beyond the window before a
// finding is reported: for the window rules, how long after the first
// window in which it held. Cost is the wasted GPU-hours at the price of
// each GPU's model, weighted as a report charges GPU time
// (cost.Model.GPUHourCost).
//
// # Findings
//
// A finding is identified by its rule, node, owner (a container, or a host
// user) and GPU set; its ID is stable across evaluations, restarts and
// live and ledger runs, so that a policy acting on findings can remember
// what it did. Several runs of one identity make one finding: Since is the
// start of the first, Until the end of the last, and the wasted GPU-hours
// add up. FirstSeen is when the finding was first reported (the end of
// the step in which its first run reached window + grace) and Active
// whether the condition held in the latest step; over the ledger, also
// that the owner's node was still writing at the window's end, so that
// the findings of an agent that stopped are never active (see Evaluate).
package waste

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
)

// shortestWindow is the shortest positive window of the enabled rules, 0
// when none has one.
func shortestWindow(r *config.WasteRules) time.Duration {
	var ws []time.Duration
	if r.Idle.Enabled {
		ws = append(ws, r.Idle.Window)
	}
	if r.Stalled.Enabled {
		ws = append(ws, r.Stalled.Window)
	}
	if r.OverAllocated.Enabled {
		ws = append(ws, r.OverAllocated.Window)
	}
	if r.LowEfficiency.Enabled {
		ws = append(ws, r.LowEfficiency.Window)
	}
	if r.Outside.Enabled {
		ws = append(ws, r.Outside.Window)
	}
	ws = append(ws, r.TooOld.MaxAge)
	var m time.Duration
	for _, w := range ws {
		if w > 0 && (m == 0 || w < m) {
			m = w
		}
	}
	return m
}

// longestWindow is the longest window plus grace of any rule.
func longestWindow(r *config.WasteRules) time.Duration {
	return max(r.Idle.Window+r.Idle.Grace, r.Stalled.Window+r.Stalled.Grace,
		r.OverAllocated.Window+r.OverAllocated.Grace, r.LowEfficiency.Window+r.LowEfficiency.Grace,
		r.Outside.Window+r.Outside.Grace, r.TooOld.Grace)
}

// Owner kinds of a finding.
const (
	OwnerContainer = "container"
	OwnerHost      = "host" // a Unix user's processes outside containers
	OwnerNone      = "none" // processes whose owner could not be found, and device memory
)

// GPURef names one GPU of a finding.
type GPURef struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Model string `json:"model,omitempty"`
}

// Finding is one kind of waste by one owner on a set of GPUs. Its JSON
// form is what `gpumeter waste --format json` and /api/v1/waste give.
type Finding struct {
	// ID is stable for the rule, node, owner and GPU set.
	ID        string `json:"id"`
	Rule      string `json:"rule"`
	Node      string `json:"node"`
	OwnerKind string `json:"owner_kind"`
	// ContainerID and Container (its name) are set for containers.
	ContainerID string `json:"container_id,omitempty"`
	Container   string `json:"container,omitempty"`
	Image       string `json:"image,omitempty"`
	// Owner is the container's user, or the host user; "" when unknown.
	Owner   string   `json:"owner"`
	Team    string   `json:"team,omitempty"`
	Project string   `json:"project,omitempty"`
	GPUs    []GPURef `json:"gpus"`
	// Since is when the condition started to hold, FirstSeen when it was
	// first reported and Until the end of the last step it held in.
	Since     time.Time `json:"since"`
	FirstSeen time.Time `json:"first_seen"`
	Until     time.Time `json:"until"`
	// Active says whether the condition holds now: in the latest step,
	// with the node's data reaching the end of the window.
	Active bool `json:"active"`
	// Evidence holds the figures that triggered the finding, by name:
	// see Evidence keys.
	Evidence       map[string]float64 `json:"evidence"`
	WastedGPUHours float64            `json:"wasted_gpu_hours"`
	Cost           float64            `json:"cost"`
}

// Evidence keys. Means are over the finding's latest run (for the window
// rules, over the latest window); durations in seconds.
const (
	EvSMPercent       = "sm_percent"       // mean SM utilisation of the GPUs concerned
	EvSMPercentMax    = "sm_percent_max"   // highest SM utilisation of a GPU in a step
	EvSMPercentUsed   = "sm_percent_used"  // over-allocated: mean SM utilisation of the used GPUs
	EvCPUCores        = "cpu_cores"        // mean CPU use
	EvCPUCoresMax     = "cpu_cores_max"    // highest CPU use in a step
	EvMemoryBytes     = "memory_bytes"     // mean GPU memory held
	EvDuration        = "duration_seconds" // how long the latest run has lasted
	EvWindow          = "window_seconds"   // the rule's window
	EvGPUsHeld        = "gpus_held"        // over-allocated
	EvGPUsUsed        = "gpus_used"        // over-allocated
	EvEfficiency      = "efficiency"       // low efficiency: used / held over the window
	EvHeldHours       = "gpu_hours_held"   // low efficiency: held GPU-hours over the window
	EvAllocatedHours  = "gpu_hours_allocated"
	EvUsedHours       = "gpu_hours_used"
	EvPresentHours    = "gpu_hours_present"
	EvAge             = "age_seconds"     // too old: how long the container has run
	EvMaxAge          = "max_age_seconds" // too old
	EvUnaccounted     = "unaccounted_memory_bytes"
	EvUnaccountedMax  = "unaccounted_memory_bytes_max"
	EvThreshold       = "threshold" // the rule's threshold the figure is compared with
	EvThresholdCPU    = "threshold_cpu_cores"
	EvThresholdMemory = "threshold_memory_bytes"
)

// Report is a list of findings over a window. Its JSON form is the same
// for `gpumeter waste --format json` and /api/v1/waste.
type Report struct {
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Currency string    `json:"currency"`
	// Findings are ordered by wasted GPU-hours, most first, then rule and
	// ID.
	Findings []Finding `json:"findings"`
	Totals   []Total   `json:"totals"`
}

// Total sums the findings of one rule; the last Total, rule "(total)",
// sums them all.
type Total struct {
	Rule           string  `json:"rule"`
	Findings       int     `json:"findings"`
	Active         int     `json:"active"`
	WastedGPUHours float64 `json:"wasted_gpu_hours"`
	Cost           float64 `json:"cost"`
}

// TotalKey is the Rule of the grand total.
const TotalKey = "(total)"

func newReport(from, to time.Time, currency string, fs []Finding) *Report {
	if currency == "" {
		currency = "USD"
	}
	if fs == nil {
		fs = []Finding{}
	}
	slices.SortFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(b.WastedGPUHours, a.WastedGPUHours), cmp.Compare(ruleOrder(a.Rule), ruleOrder(b.Rule)),
			strings.Compare(a.ID, b.ID))
	})
	r := &Report{From: from.UTC(), To: to.UTC(), Currency: currency, Findings: fs}
	all := Total{Rule: TotalKey}
	for _, name := range config.RuleNames() {
		t := Total{Rule: name}
		for _, f := range fs {
			if f.Rule == name {
				t.Findings++
				t.WastedGPUHours += f.WastedGPUHours
				t.Cost += f.Cost
				if f.Active {
					t.Active++
				}
			}
		}
		all.Findings += t.Findings
		all.Active += t.Active
		all.WastedGPUHours += t.WastedGPUHours
		all.Cost += t.Cost
		t.WastedGPUHours, t.Cost = round(t.WastedGPUHours), round(t.Cost)
		r.Totals = append(r.Totals, t)
	}
	all.WastedGPUHours, all.Cost = round(all.WastedGPUHours), round(all.Cost)
	r.Totals = append(r.Totals, all)
	return r
}

func ruleOrder(rule string) int { return slices.Index(config.RuleNames(), rule) }

// findingID is the stable identity of a finding.
func findingID(rule, node, ownerKind, owner string, gpus []GPURef) string {
	h := sha256.New()
	for _, s := range []string{rule, node, ownerKind, owner} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	uuids := make([]string, len(gpus))
	for i, g := range gpus {
		uuids[i] = g.UUID
		if uuids[i] == "" {
			uuids[i] = "index:" + strconv.Itoa(g.Index)
		}
	}
	slices.Sort(uuids)
	for _, u := range uuids {
		h.Write([]byte(u))
		h.Write([]byte{0})
	}
	return rule + "-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// round rounds v to 12 significant digits, as reports do, so that figures
// read as the decimals they are.
func round(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v + 0 // and never -0
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	return r
}

// Only is the report narrowed to the findings keep keeps, with its totals
// summed again.
func (r *Report) Only(keep func(*Finding) bool) *Report {
	var fs []Finding
	for i := range r.Findings {
		if keep(&r.Findings[i]) {
			fs = append(fs, r.Findings[i])
		}
	}
	return newReport(r.From, r.To, r.Currency, fs)
}
