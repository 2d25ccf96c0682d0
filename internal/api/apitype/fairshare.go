package apitype

import "time"

// FairShare is the body of GET /api/v1/fairshare: each user's and team's
// share, decayed usage and fair-share factor, as Slurm's sshare shows
// them, and each team's budget for the calendar month. A user is shown
// their own row, their team's and the totals; viewers and admins every
// row. It is a contract: fields may be added, never changed.
type FairShare struct {
	// Basis is queue.fair_share.basis: used, allocated or held.
	Basis string `json:"basis"`
	// HalfLife is queue.fair_share.half_life, a duration such as "7d".
	HalfLife string `json:"half_life"`
	// At is when the factors were computed, in UTC.
	At     time.Time      `json:"at"`
	Users  []FairShareRow `json:"users"`
	Teams  []FairShareRow `json:"teams"`
	Totals FairShareRow   `json:"totals"`
}

// The kinds of a FairShareRow.
const (
	FairShareUser  = "user"
	FairShareTeam  = "team"
	FairShareTotal = "total"
)

// FairShareRow is one user, one team or the totals.
type FairShareRow struct {
	Name string `json:"name"`
	// Kind is user, team or total.
	Kind string `json:"kind"`
	// Team is a user's team; "" on a team's row and the totals.
	Team string `json:"team"`
	// Share is queue.shares' value for the row, NormShare it divided by
	// the sum of its kind's shares.
	Share     float64 `json:"share"`
	NormShare float64 `json:"norm_share"`
	// UsageGPUHours is the decayed GPU-hours on the basis, NormUsage it
	// divided by the sum of its kind's.
	UsageGPUHours float64 `json:"usage_gpu_hours"`
	NormUsage     float64 `json:"norm_usage"`
	// Factor is the fair-share factor, 2^(-norm_usage/norm_share): 1 for
	// no use, 0.5 for use equal to the share.
	Factor float64 `json:"factor"`
	// BudgetGPUHours is the team's queue.budgets for the month; null
	// when it has none (and on a user's row).
	BudgetGPUHours *float64 `json:"budget_gpu_hours"`
	// BudgetUsedGPUHours is what the row used this calendar month, on the
	// basis and undecayed.
	BudgetUsedGPUHours float64 `json:"budget_used_gpu_hours"`
	// BudgetLifted says an admin lifted the team's budget for the month.
	BudgetLifted bool `json:"budget_lifted"`
}

// BudgetLift is the answer to POST /api/v1/fairshare/budgets/{team}/lift:
// the team whose budget is lifted for the rest of the calendar month.
// The team's row in FairShare shows it once the factors are next
// refreshed.
type BudgetLift struct {
	Team   string `json:"team"`
	Lifted bool   `json:"lifted"`
}
