// The fair share as a service: the background cache of decayed usage,
// the budget lifts, the API's view of both, and the numbers each
// scheduling pass takes from them.

package fairshare

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Service is the fair share as the API and the queue read it. It never
// computes on a call: the cache refreshes in the background, and the lifts
// of the month are kept here, read at the start and on each lift.
type Service struct {
	cache   *Cache
	budgets ledger.BudgetStore
	now     func() time.Time

	mu     sync.Mutex
	month  string          // the month lifted is of
	lifted map[string]bool // teams whose budget an admin lifted this month
}

// NewService is the fair share of cache, with the budget lifts of
// budgets.
func NewService(cache *Cache, budgets ledger.BudgetStore) *Service {
	return &Service{cache: cache, budgets: budgets, now: time.Now}
}

// Cache is the cache the service reads, which the agent runs and
// reloads.
func (f *Service) Cache() *Cache { return f.cache }

// lifts returns this month's lifts, reading them again when the month
// turned (or never was read).
func (f *Service) lifts(ctx context.Context) (map[string]bool, error) {
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
	l := Lifted(ls)
	f.mu.Lock()
	f.month, f.lifted = month, l
	f.mu.Unlock()
	return l, nil
}

// errNotYet is Service.FairShare's error before the first computation.
var errNotYet = errors.New("the fair-share factors are still being computed from the ledger; try again in a moment")

// FairShare is the fair share as the API reports it (server.FairShare):
// the last computation with this month's lifts, or errNotYet before the
// first.
func (f *Service) FairShare(ctx context.Context) (Report, error) {
	u := f.cache.Get()
	if u == nil {
		return Report{}, errNotYet
	}
	lifted, err := f.lifts(ctx)
	if err != nil {
		return Report{}, err
	}
	return u.Report(f.cache.Settings(), lifted), nil
}

// LiftBudget lifts team's budget for this month (server.FairShare),
// writing ev with it: the team must have a budget, or the error is a
// *NoBudgetError.
func (f *Service) LiftBudget(ctx context.Context, team string, ev audit.Event) error {
	s := f.cache.Settings()
	if _, ok := s.Budgets[team]; !ok {
		names := make([]string, 0, len(s.Budgets))
		for n := range s.Budgets {
			names = append(names, n)
		}
		sort.Strings(names)
		return &NoBudgetError{Team: team, Teams: names}
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

// Standing is what a scheduling pass takes from the fair share: every
// user's factor and expected share of a GPU (their efficiency), and the
// teams over budget. Before the first computation every user stands
// equal and no team is over.
func (f *Service) Standing(ctx context.Context, users, teams []string) (factor, expected map[string]float64, overBudget map[string]bool) {
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
