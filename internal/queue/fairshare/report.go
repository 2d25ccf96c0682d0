package fairshare

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Factor is Slurm's classic fair-share factor 2^(−(u/U)/(s/S)): 1 for no
// use, 0.5 for use exactly in proportion to the share, towards 0 beyond.
// usage and totalUsage are decayed GPU-hours, share and totalShares the
// shares. No use at all (u or U 0) is 1; no share is 0.
//
// It is the formula of queue.FairShareFactor, kept here behind one
// function until this package can call that one.
func Factor(usage, share, totalUsage, totalShares float64) float64 {
	if usage <= 0 || totalUsage <= 0 {
		return 1
	}
	if share <= 0 || totalShares <= 0 {
		return 0
	}
	return math.Exp2(-(usage / totalUsage) / (share / totalShares))
}

// Kinds of a Row.
const (
	KindUser  = "user"
	KindTeam  = "team"
	KindTotal = "total"
)

// Row is one user's or team's fair-share standing, as `gpumeter
// fairshare` shows it (Slurm's sshare).
type Row struct {
	Name string
	Kind string // KindUser, KindTeam, or KindTotal for Report.Totals
	// Team is a user's team (see Owner.Team).
	Team string
	// Share is the configured share (1 when not set); NormShare is it
	// over the shares of all users (or all teams) with use, itself
	// included.
	Share, NormShare float64
	// Usage is decayed GPU-hours on the basis; NormUsage is it over all
	// users' (or teams').
	Usage, NormUsage float64
	// Factor is Factor(Usage, Share, total usage, total shares).
	Factor float64
	// Budget is the team's GPU-hours this month, 0 for none; BudgetUsed
	// its GPU-hours on the basis so far this month (for users, theirs).
	Budget, BudgetUsed float64
	// Lifted says an admin lifted the team's budget for this month.
	Lifted bool
}

// Report is every user's and team's standing at one time.
type Report struct {
	Basis    string
	HalfLife time.Duration
	Users    []Row
	Teams    []Row
	// Totals sums the users: Share and Usage over all users with use,
	// BudgetUsed their GPU-hours this month, Budget the teams' budgets
	// added up; its Factor is 0, it has none.
	Totals Row
	At     time.Time
}

// totalShares is the sum of the shares of the owners in m, plus that of
// name when it is not among them (a user who has not used a GPU yet).
func totalShares(s Settings, m map[string]*Owner, name string) float64 {
	var sum float64
	for n := range m {
		sum += s.Share(n)
	}
	if _, ok := m[name]; !ok && name != "" {
		sum += s.Share(name)
	}
	return sum
}

// UserFactor is user's fair-share factor: their decayed use against all
// users', their share against the shares of the users with use. A user
// with no use has 1.
func (u *Usage) UserFactor(s Settings, user string) float64 {
	var usage float64
	if o := u.Users[user]; o != nil {
		usage = o.Decayed
	}
	return Factor(usage, s.Share(user), u.Total, totalShares(s, u.Users, user))
}

// TeamFactor is team's fair-share factor, as UserFactor among teams.
func (u *Usage) TeamFactor(s Settings, team string) float64 {
	var usage, total float64
	if o := u.Teams[team]; o != nil {
		usage = o.Decayed
	}
	for _, o := range u.Teams {
		total += o.Decayed
	}
	return Factor(usage, s.Share(team), total, totalShares(s, u.Teams, team))
}

// OverBudget says whether team has used its budget this month: it has
// one, has reached it, and no admin lifted it (lifted).
func (u *Usage) OverBudget(s Settings, team string, lifted bool) bool {
	b, ok := s.Budgets[team]
	if !ok || lifted {
		return false
	}
	o := u.Teams[team]
	return o != nil && o.Month >= b
}

// Lifted is the set of teams lifts names, as Report and OverBudget take
// it: the lifts of one month, from ledger.BudgetStore.BudgetLifts.
func Lifted(lifts []ledger.BudgetLift) map[string]bool {
	out := make(map[string]bool, len(lifts))
	for _, l := range lifts {
		out[l.Team] = true
	}
	return out
}

// Report is u as `gpumeter fairshare` shows it; lifted names the teams
// whose budget an admin lifted for u's month. Rows are by name.
func (u *Usage) Report(s Settings, lifted map[string]bool) Report {
	r := Report{Basis: u.Basis, HalfLife: u.HalfLife, At: u.At}
	userShares := totalShares(s, u.Users, "")
	teamShares := totalShares(s, u.Teams, "")
	var teamTotal float64
	for _, o := range u.Teams {
		teamTotal += o.Decayed
	}
	norm := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	for _, o := range u.Users {
		sh := s.Share(o.Name)
		r.Users = append(r.Users, Row{Name: o.Name, Kind: KindUser, Team: o.Team,
			Share: sh, NormShare: norm(sh, userShares), Usage: o.Decayed, NormUsage: norm(o.Decayed, u.Total),
			Factor: Factor(o.Decayed, sh, u.Total, userShares), BudgetUsed: o.Month})
	}
	for _, o := range u.Teams {
		sh := s.Share(o.Name)
		r.Teams = append(r.Teams, Row{Name: o.Name, Kind: KindTeam,
			Share: sh, NormShare: norm(sh, teamShares), Usage: o.Decayed, NormUsage: norm(o.Decayed, teamTotal),
			Factor: Factor(o.Decayed, sh, teamTotal, teamShares), Budget: s.Budgets[o.Name], BudgetUsed: o.Month,
			Lifted: lifted[o.Name]})
	}
	// A team with a budget and no use yet still has a row, so that its
	// budget shows.
	for team, b := range s.Budgets {
		if _, ok := u.Teams[team]; !ok {
			sh := s.Share(team)
			r.Teams = append(r.Teams, Row{Name: team, Kind: KindTeam, Share: sh, NormShare: norm(sh, teamShares+sh),
				Factor: 1, Budget: b, Lifted: lifted[team]})
		}
	}
	byName := func(a, b Row) int { return cmp.Compare(a.Name, b.Name) }
	slices.SortFunc(r.Users, byName)
	slices.SortFunc(r.Teams, byName)
	r.Totals = Row{Kind: KindTotal, Share: userShares, NormShare: 1, Usage: u.Total, NormUsage: 1, BudgetUsed: u.Month}
	if u.Total == 0 {
		r.Totals.NormUsage = 0
	}
	for _, b := range s.Budgets {
		r.Totals.Budget += b
	}
	return r
}
