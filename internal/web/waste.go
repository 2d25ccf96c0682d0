package web

import (
	"strconv"
	"strings"
	"time"
)

// Waste is the page at /waste: the live findings the reader may see.
type Waste struct {
	Frame
	// Note says why there are no findings to show (the rules are off);
	// the rest is then empty.
	Note     string
	From, To time.Time
	Currency string
	Findings []WasteFinding
	// Totals are per rule, the last one ("(total)") over all of them.
	Totals []WasteTotal
	// StopNote says why no finding has a stop button although the reader
	// could stop containers (Docker is off, the reader has no session).
	StopNote string
}

// WasteFinding is one finding as the page shows it.
type WasteFinding struct {
	ID, Rule string
	// Who is the container's name, the host user or what stands for an
	// owner nobody could find; Owner is the user, "" when unknown.
	Who, Owner, Team, Project, Image string
	ContainerID                      string
	GPUs                             []string
	Since, Until                     time.Time
	Active                           bool
	Summary                          string
	Evidence                         []Evidence
	WastedHours, Cost                float64
	// Stop is the button that stops the finding's container; nil when
	// the reader may not, or there is no running container to stop.
	Stop *Button
}

// WasteTotal sums one rule's findings.
type WasteTotal struct {
	Rule              string
	Findings, Active  int
	WastedHours, Cost float64
	Total             bool // the sum over every rule
}

// Button is a button that calls the API: console.js asks Confirm first,
// then sends Method Path with Body (JSON) and the session's CSRF token.
type Button struct {
	Label, Method, Path, Body, Confirm, Doing, Done string
	// Danger marks a button that ends or stops something.
	Danger bool
}

// Evidence is one figure behind a finding, by its key.
type Evidence struct {
	Key   string
	Value float64
	// Rule is the finding's: a threshold's unit depends on it.
	Rule string
}

// evidenceLabels name the waste rules' evidence keys for people.
var evidenceLabels = map[string]string{
	"sm_percent":                   "mean SM utilisation",
	"sm_percent_max":               "highest SM utilisation",
	"sm_percent_used":              "mean SM utilisation of the used GPUs",
	"cpu_cores":                    "mean CPU use",
	"cpu_cores_max":                "highest CPU use",
	"memory_bytes":                 "mean GPU memory held",
	"duration_seconds":             "lasted",
	"window_seconds":               "rule window",
	"gpus_held":                    "GPUs held",
	"gpus_used":                    "GPUs used",
	"efficiency":                   "efficiency (used / held)",
	"gpu_hours_held":               "GPU-hours held",
	"gpu_hours_allocated":          "GPU-hours allocated",
	"gpu_hours_used":               "GPU-hours used",
	"gpu_hours_present":            "GPU-hours present",
	"age_seconds":                  "running for",
	"max_age_seconds":              "longest allowed",
	"unaccounted_memory_bytes":     "GPU memory no process accounts for",
	"unaccounted_memory_bytes_max": "most GPU memory no process accounted for",
	"threshold":                    "rule threshold",
	"threshold_cpu_cores":          "rule threshold of CPU use",
	"threshold_memory_bytes":       "rule threshold of GPU memory",
}

// Label names the figure; a key the console does not know is shown as
// it is.
func (e Evidence) Label() string {
	if l, ok := evidenceLabels[e.Key]; ok {
		return l
	}
	return e.Key
}

// Text is the figure with its unit, where the key says what it is.
func (e Evidence) Text() string {
	v := e.Value
	switch k := e.Key; {
	case k == "threshold":
		switch e.Rule {
		case "idle", "over_allocated":
			return FormatPercent(v) + " SM"
		case "low_efficiency":
			return FormatPercent(100 * v)
		}
		return trim(v, 3)
	case k == "efficiency":
		return trim(100*v, 1) + " %"
	case strings.HasPrefix(k, "sm_percent"):
		return trim(v, 1) + " %"
	case strings.HasSuffix(k, "_bytes") || strings.HasSuffix(k, "_bytes_max"):
		return FormatBytes(v)
	case strings.HasSuffix(k, "_seconds"):
		return FormatSeconds(v)
	case strings.HasPrefix(k, "gpu_hours"):
		return trim(v, 2) + " h"
	case strings.Contains(k, "cpu_cores"):
		return trim(v, 2) + " cores"
	case strings.HasPrefix(k, "gpus_"):
		return strconv.FormatFloat(v, 'f', -1, 64) + " GPUs"
	}
	return trim(v, 3)
}
