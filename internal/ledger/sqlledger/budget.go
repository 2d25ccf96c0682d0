package sqlledger

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// LiftBudget records a budget lift and its audit event in one transaction.
func (l Ledger) LiftBudget(ctx context.Context, team, month, by string, ev audit.Event) error {
	if l.b.WriteTx == nil {
		return fmt.Errorf("lift budget in %s: the backend has no job store", l.b.Name)
	}
	if strings.TrimSpace(team) == "" || strings.TrimSpace(by) == "" {
		return fmt.Errorf("lift budget in %s: a lift needs a team and who lifted it (got %q, %q)", l.b.Name, team, by)
	}
	if err := ledger.CheckBudgetMonth(month); err != nil {
		return fmt.Errorf("lift budget of %s in %s: %w", team, l.b.Name, err)
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	err := l.b.WriteTx(ctx, func(tx Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO budget_lifts (team, month, lifted_by, lifted_us) VALUES ($1, $2, $3, $4)
			ON CONFLICT (team, month) DO UPDATE SET lifted_by = excluded.lifted_by, lifted_us = excluded.lifted_us`,
			team, month, by, at.UnixMicro()); err != nil {
			return err
		}
		if ev.Target == "" {
			ev.Target = team
		}
		if ev.Time.IsZero() {
			ev.Time = at
		}
		return insertAudit(ctx, tx, ev)
	})
	if err != nil {
		return fmt.Errorf("lift budget of %s in %s: %w", team, l.b.Name, err)
	}
	return nil
}

// BudgetLifts returns the lifts of month, by team.
func (l Ledger) BudgetLifts(ctx context.Context, month string) ([]ledger.BudgetLift, error) {
	if err := ledger.CheckBudgetMonth(month); err != nil {
		return nil, fmt.Errorf("budget lifts from %s: %w", l.b.Name, err)
	}
	return read(ctx, l, "budget lifts from", func(q Querier) ([]ledger.BudgetLift, error) {
		rows, err := q.Query(ctx, "SELECT team, month, lifted_by, lifted_us FROM budget_lifts WHERE month = $1 ORDER BY team", month)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []ledger.BudgetLift
		for rows.Next() {
			var (
				b  ledger.BudgetLift
				us int64
			)
			if err := rows.Scan(&b.Team, &b.Month, &b.LiftedBy, &us); err != nil {
				return nil, err
			}
			b.LiftedAt = time.UnixMicro(us).UTC()
			out = append(out, b)
		}
		return out, rows.Err()
	})
}
