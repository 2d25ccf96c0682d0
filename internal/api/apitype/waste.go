package apitype

import "time"

// Owner kinds of a GPU process, a share and a waste finding.
const (
	OwnerContainer = "container"
	OwnerHost      = "host" // a Unix user's processes outside containers
	OwnerNone      = "none" // processes whose owner could not be found
)

// WasteReport is the body of GET /api/v1/waste and the waste part of a
// snapshot: the live waste findings, in the form `gpumeter waste --format
// json` prints too. It is a contract: fields may be added, never changed.
type WasteReport struct {
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Currency string    `json:"currency"`
	// Findings are ordered by wasted GPU-hours, most first, then rule and
	// ID.
	Findings []WasteFinding `json:"findings"`
	// Totals sum the findings of each rule; the last, rule "(total)",
	// sums them all.
	Totals []WasteTotal `json:"totals"`
}

// WasteFinding is one kind of waste by one owner on a set of GPUs.
type WasteFinding struct {
	// ID is stable for the rule, node, owner and GPU set.
	ID   string `json:"id"`
	Rule string `json:"rule"`
	Node string `json:"node"`
	// OwnerKind is OwnerContainer, OwnerHost or OwnerNone.
	OwnerKind string `json:"owner_kind"`
	// ContainerID and Container (its name) are set for containers.
	ContainerID string `json:"container_id,omitempty"`
	Container   string `json:"container,omitempty"`
	Image       string `json:"image,omitempty"`
	// Owner is the container's user, or the host user; "" when unknown.
	Owner   string     `json:"owner"`
	Team    string     `json:"team,omitempty"`
	Project string     `json:"project,omitempty"`
	GPUs    []WasteGPU `json:"gpus"`
	// Since is when the condition started to hold, FirstSeen when it was
	// first reported and Until the end of the last step it held in.
	Since     time.Time `json:"since"`
	FirstSeen time.Time `json:"first_seen"`
	Until     time.Time `json:"until"`
	// Active says whether the condition holds now.
	Active bool `json:"active"`
	// Evidence holds the figures that triggered the finding, by name
	// (sm_percent, cpu_cores, duration_seconds and the like).
	Evidence       map[string]float64 `json:"evidence"`
	WastedGPUHours float64            `json:"wasted_gpu_hours"`
	Cost           float64            `json:"cost"`
}

// WasteGPU names one GPU of a finding.
type WasteGPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Model string `json:"model,omitempty"`
}

// WasteTotal sums the findings of one rule.
type WasteTotal struct {
	Rule           string  `json:"rule"`
	Findings       int     `json:"findings"`
	Active         int     `json:"active"`
	WastedGPUHours float64 `json:"wasted_gpu_hours"`
	Cost           float64 `json:"cost"`
}

// WasteTotalKey is the Rule of the grand total.
const WasteTotalKey = "(total)"
