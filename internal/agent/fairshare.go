// The queue's fair share in the agent: the background cache of decayed
// usage, the budget lifts, the API's view of both, and the numbers each
// scheduling pass takes from them.

package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue/fairshare"
)

// fairShare is the fair share as the API and the queue read it. It never
// computes on a call: the cache refreshes in the background, and the lifts
// of the month are kept here, read at the start and on each lift.
type fairShare struct {
	cache   *fairshare.Cache
	budgets ledger.BudgetStore
	now     func() time.Time

	mu     sync.Mutex
	month  string          // the month lifted is of
	lifted map[string]bool // teams whose budget an admin lifted this month
}

func newFairShare(cache *fairshare.Cache, budgets ledger.BudgetStore) *fairShare {
	return &fairShare{cache: cache, budgets: budgets, now: time.Now}
}

// lifts returns this month's lifts, reading them again when the month
// turned (or never was read).
func (f *fairShare) lifts(ctx context.Context) (map[string]bool, error) {
	month := ledger.BudgetMonth(f.now())
	f.mu.Lock()
	if f.month == month {
		l := f.lifted
		f.mu.Unlock()
		return l, nil
	}
	f.mu.Unlock()
	ls, err := f.budgets.BudgetLifts(ctx, month)
	if err != nil {
		return nil, fmt.Errorf("budget lifts of %s: %w", month, err)
	}
	l := fairshare.Lifted(ls)
	f.mu.Lock()
	f.month, f.lifted = month, l
	f.mu.Unlock()
	return l, nil
}

// errNotYet is FairShare's error before the first computation.
var errNotYet = errors.New("the fair-share factors are still being computed from the ledger; try again in a moment")

// FairShare implements server.FairShare.
func (f *fairShare) FairShare(ctx context.Context) (fairshare.Report, error) {
	u := f.cache.Get()
	if u == nil {
		return fairshare.Report{}, errNotYet
	}
	lifted, err := f.lifts(ctx)
	if err != nil {
		return fairshare.Report{}, err
	}
	return u.Report(f.cache.Settings(), lifted), nil
}

// LiftBudget implements server.FairShare: the team must have a budget.
func (f *fairShare) LiftBudget(ctx context.Context, team string, ev ledger.AuditEvent) error {
	s := f.cache.Settings()
	if _, ok := s.Budgets[team]; !ok {
		names := make([]string, 0, len(s.Budgets))
		for n := range s.Budgets {
			names = append(names, n)
		}
		sort.Strings(names)
		return &fairshare.NoBudgetError{Team: team, Teams: names}
	}
	month := ledger.BudgetMonth(f.now())
	if err := f.budgets.LiftBudget(ctx, team, month, ev.Caller, ev); err != nil {
		return err
	}
	f.mu.Lock()
	if f.month == month {
		l := make(map[string]bool, len(f.lifted)+1)
		for k, v := range f.lifted {
			l[k] = v
		}
		l[team] = true
		f.lifted = l
	}
	f.mu.Unlock()
	return nil
}

// standing is what a scheduling pass takes from the fair share: every
// user's factor and expected share of a GPU (their efficiency), and the
// teams over budget. Before the first computation every user stands
// equal and no team is over.
func (f *fairShare) standing(ctx context.Context, users, teams []string) (factor, expected map[string]float64, overBudget map[string]bool) {
	factor, expected, overBudget = map[string]float64{}, map[string]float64{}, map[string]bool{}
	u := f.cache.Get()
	if u == nil {
		return factor, expected, overBudget
	}
	s := f.cache.Settings()
	for _, name := range users {
		factor[name] = u.UserFactor(s, name)
		expected[name] = u.Efficiency(name)
	}
	lifted, err := f.lifts(ctx)
	if err != nil {
		lifted = nil // a ledger that does not answer lifts nothing, and blocks nobody more than before
	}
	for _, t := range teams {
		if t != "" && u.OverBudget(s, t, lifted[t]) {
			overBudget[t] = true
		}
	}
	return factor, expected, overBudget
}
