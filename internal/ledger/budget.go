package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
)

// BudgetLift is an admin's lift of a team's GPU-hour budget for one
// calendar month: the team's jobs no longer wait with reason budget
// until the month ends.
type BudgetLift struct {
	Team     string
	Month    string // YYYY-MM, UTC
	LiftedBy string
	LiftedAt time.Time // kept to the microsecond
}

// BudgetStore keeps budget lifts. Both backends implement it.
type BudgetStore interface {
	// LiftBudget records that by lifted team's budget for month
	// (YYYY-MM), with the audit event ev, in one transaction: both are
	// written, or neither. Lifting a month again records the latest lift.
	LiftBudget(ctx context.Context, team, month, by string, ev audit.Event) error
	// BudgetLifts returns the lifts of month, by team.
	BudgetLifts(ctx context.Context, month string) ([]BudgetLift, error)
}

// BudgetMonth is the month of t as BudgetStore names it: 2026-03, UTC.
func BudgetMonth(t time.Time) string { return t.UTC().Format("2006-01") }

// CheckBudgetMonth reports a month that is not YYYY-MM.
func CheckBudgetMonth(month string) error {
	if t, err := time.Parse("2006-01", month); err != nil || t.Format("2006-01") != month {
		return fmt.Errorf("month %q is not YYYY-MM, such as 2026-03", month)
	}
	return nil
}
