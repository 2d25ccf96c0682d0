// Package fairshare turns the ledger's measured GPU use into the queue's
// fair-share numbers: each user's and team's GPU-hours on a basis (used,
// allocated or held), decayed with a half-life, over every node of the
// ledger and every container, jobs and containers started by hand alike;
// this calendar month's GPU-hours for budgets; and the fair-share factor
// 2^(−(u/U)/(s/S)) of each. Compute reads the ledger once; Cache keeps
// the last result fresh in the background, so that the scheduler never
// waits on the ledger.
package fairshare

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Reader is what Compute reads of the ledger: use per owner and hour
// (both backends' stores have it).
type Reader interface {
	UsageByOwner(ctx context.Context, from, to time.Time) ([]ledger.OwnerHour, error)
}

// Settings are the fair-share settings Compute and the factors use.
type Settings struct {
	// Basis is config.BasisUsed, BasisAllocated or BasisHeld.
	Basis string
	// HalfLife is the age at which a GPU-hour counts half; more than 0.
	HalfLife time.Duration
	// Refresh is how often Cache recomputes.
	Refresh time.Duration
	// Shares by user or team name; a name not here has share 1.
	Shares map[string]float64
	// Budgets are GPU-hours per calendar month by team.
	Budgets map[string]float64
}

// SettingsOf takes the fair-share settings out of the queue's.
func SettingsOf(q config.Queue) Settings {
	return Settings{Basis: q.FairShare.Basis, HalfLife: q.FairShare.HalfLife, Refresh: q.FairShare.Refresh,
		Shares: q.Shares, Budgets: q.Budgets}
}

// NoBudgetError is a budget lift asked for a team that has none in
// queue.budgets; Teams are the teams that have one, sorted.
type NoBudgetError struct {
	Team  string
	Teams []string
}

func (e *NoBudgetError) Error() string {
	msg := fmt.Sprintf("team %q has no budget in queue.budgets", e.Team)
	if len(e.Teams) > 0 {
		msg += fmt.Sprintf(" (teams with one: %v)", e.Teams)
	}
	return msg
}

// Share is the share of a user or team name: its entry, or 1.
func (s Settings) Share(name string) float64 {
	if v, ok := s.Shares[name]; ok {
		return v
	}
	return 1
}

// Horizon is how many half-lives back Compute reads: older use weighs
// less than 2^−10 (a thousandth) and is left out.
const Horizon = 10

// Owner is one user's or team's use.
type Owner struct {
	Name string
	// Team is a user's team: the team its most GPU-hours (undecayed,
	// over the horizon) were under; "" for a team and for a user seen
	// only in host processes.
	Team string
	// Decayed is GPU-hours on the basis, each hour weighed by
	// 2^(−age/half-life), age from the middle of the hour to the time
	// of Compute.
	Decayed float64
	// Month is GPU-hours on the basis since the start of this calendar
	// month (UTC), not decayed.
	Month float64
}

// Usage is what Compute found: the decayed and monthly GPU-hours of
// every user and team.
type Usage struct {
	At       time.Time
	Basis    string
	HalfLife time.Duration
	// MonthStart is the start of the calendar month (UTC) Month counts.
	MonthStart time.Time
	Users      map[string]*Owner
	Teams      map[string]*Owner
	// Total is the decayed GPU-hours of all users, Month theirs this
	// month. Use no user owns (a container without a user, GPU time
	// nobody held) is in neither.
	Total, Month float64

	// efficiency is each user's decayed used over decayed held
	// GPU-hours, whatever the basis, for users who held a GPU.
	efficiency map[string]float64
}

// Efficiency is user's recent efficiency: used over held GPU-hours,
// decayed as the fair-share usage is, at most 1; 1 for a user who held
// no GPU in the horizon (a new user is trusted to use what they ask for).
// Placement target adds it to a GPU's utilisation as the job's expected
// share.
func (u *Usage) Efficiency(user string) float64 {
	if e, ok := u.efficiency[user]; ok {
		return e
	}
	return 1
}

// MonthStart is the first instant of t's calendar month in UTC.
func MonthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// Compute reads the ledger's hourly use per owner back Horizon
// half-lives (and at least to the start of the month) and sums it per
// user and team on s.Basis. The hour rows are written with every flush,
// as the minute rows are, so the current hour counts what was flushed of
// it so far.
//
// A container's use counts to its user and team, a host process's to
// its Unix user; every node of the ledger counts. On the held basis an
// hour written before the ledger kept held time (schema 4 and older)
// counts its allocated time instead.
func Compute(ctx context.Context, r Reader, s Settings, now time.Time) (*Usage, error) {
	if s.HalfLife <= 0 {
		return nil, fmt.Errorf("fair share: half-life %s must be more than 0", s.HalfLife)
	}
	pick, err := basis(s.Basis)
	if err != nil {
		return nil, err
	}
	now = now.UTC()
	month := MonthStart(now)
	var from time.Time // the oldest row, for a half-life too long to multiply
	if s.HalfLife <= math.MaxInt64/Horizon {
		from = ledger.Hour(now.Add(-Horizon * s.HalfLife))
	}
	if month.Before(from) {
		from = month
	}
	hours, err := r.UsageByOwner(ctx, from, ledger.Hour(now).Add(time.Hour))
	if err != nil {
		return nil, fmt.Errorf("fair share: %w", err)
	}
	u := &Usage{At: now, Basis: s.Basis, HalfLife: s.HalfLife, MonthStart: month,
		Users: map[string]*Owner{}, Teams: map[string]*Owner{}, efficiency: map[string]float64{}}
	// Weights of an hour are the same for every row of it: rows come by
	// start, so each is worked out once.
	var (
		start  time.Time
		weight float64
		// teamHours is each user's undecayed hours by team, for Owner.Team.
		teamHours = map[string]map[string]float64{}
		// effs are each user's decayed used and held hours.
		effs = map[string][2]float64{}
	)
	ln2 := math.Ln2 / s.HalfLife.Hours()
	for i := range hours {
		h := &hours[i]
		if h.User == "" {
			continue
		}
		if !h.Start.Equal(start) {
			start = h.Start
			age := now.Sub(start.Add(30 * time.Minute)).Hours()
			if age < 0 {
				age = 0 // the current hour, less than half gone
			}
			weight = math.Exp(-age * ln2)
		}
		eff := effs[h.User]
		eff[0] += h.UsedSeconds / 3600 * weight
		eff[1] += (h.HeldSeconds + h.UnheldAllocatedSeconds) / 3600 * weight
		effs[h.User] = eff
		gpuHours := pick(h) / 3600
		if gpuHours <= 0 {
			continue
		}
		inMonth := !h.Start.Before(month)
		d := gpuHours * weight
		add(u.Users, h.User, d, gpuHours, inMonth)
		u.Total += d
		if inMonth {
			u.Month += gpuHours
		}
		if h.Team != "" {
			add(u.Teams, h.Team, d, gpuHours, inMonth)
			th := teamHours[h.User]
			if th == nil {
				th = map[string]float64{}
				teamHours[h.User] = th
			}
			th[h.Team] += gpuHours
		}
	}
	for user, e := range effs {
		if e[1] > 0 {
			u.efficiency[user] = min(e[0]/e[1], 1)
		}
	}
	for user, th := range teamHours {
		best, most := "", -1.0
		for team, h := range th {
			if h > most || h == most && team < best {
				best, most = team, h
			}
		}
		u.Users[user].Team = best
	}
	return u, nil
}

func add(m map[string]*Owner, name string, decayed, hours float64, inMonth bool) {
	o := m[name]
	if o == nil {
		o = &Owner{Name: name}
		m[name] = o
	}
	o.Decayed += decayed
	if inMonth {
		o.Month += hours
	}
}

func basis(name string) (func(*ledger.OwnerHour) float64, error) {
	switch name {
	case config.BasisUsed:
		return func(h *ledger.OwnerHour) float64 { return h.UsedSeconds }, nil
	case config.BasisAllocated:
		return func(h *ledger.OwnerHour) float64 { return h.AllocatedSeconds }, nil
	case config.BasisHeld:
		return func(h *ledger.OwnerHour) float64 { return h.HeldSeconds + h.UnheldAllocatedSeconds }, nil
	}
	return nil, errors.New("fair share: basis " + fmt.Sprintf("%q", name) + " is not one of used, allocated, held")
}
