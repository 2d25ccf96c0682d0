package whatif

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/units"
)

// Query is what GET /api/v1/whatif and GET /api/v1/advice take: a
// window, a node, and the replay's options or whose advice.
type Query struct {
	Since    time.Duration
	From, To *time.Time
	Node     string
	// User and Team select advice (advice only).
	User, Team string
	Options    Options
	// MemoryFraction, Target are set when the query gave them.
	memoryFraction, target *float64
}

// QueryError is a query parameter that does not parse or fit.
type QueryError struct {
	Param, Msg string
}

func (e *QueryError) Error() string {
	if e.Param == "" {
		return e.Msg
	}
	return e.Param + ": " + e.Msg
}

var (
	whatifParams = []string{"since", "from", "to", "node", "mode", "fleet_gpus", "share", "memory_fraction", "switch_overhead", "target", "search"}
	adviceParams = []string{"since", "from", "to", "node", "user", "team"}
)

// ParseWhatifQuery reads /api/v1/whatif's parameters (as the flags of
// `gpumeter whatif`, with _ for -, and search=0 for --no-search).
func ParseWhatifQuery(q url.Values) (Query, error) {
	r, err := parseQuery(q, whatifParams)
	if err != nil {
		return r, err
	}
	o := &r.Options
	o.Params.SwitchOverhead = DefaultSwitchOverhead
	if s := q.Get("mode"); q.Has("mode") {
		if o.Modes, err = ParseModes(s); err != nil {
			return r, &QueryError{"mode", err.Error()}
		}
	}
	if o.Fleet, err = ParseFleet(q.Get("fleet_gpus")); err != nil {
		return r, &QueryError{"fleet_gpus", err.Error()}
	}
	if q.Has("share") {
		n, err := strconv.Atoi(q.Get("share"))
		if err != nil || n < 1 || n > 64 {
			return r, &QueryError{"share", fmt.Sprintf("%q is not a whole number between 1 and 64", q.Get("share"))}
		}
		o.Params.Share = n
	}
	for _, p := range []struct {
		name     string
		set      func(float64)
		ok       func(float64) bool
		interval string
	}{
		{"memory_fraction", func(f float64) { r.memoryFraction = &f }, func(f float64) bool { return f > 0 && f <= 1 }, "(0, 1]"},
		{"switch_overhead", func(f float64) { o.Params.SwitchOverhead = f }, func(f float64) bool { return f >= 0 && f < 1 }, "[0, 1)"},
		{"target", func(f float64) { r.target = &f }, func(f float64) bool { return f > 0 && f <= 1 }, "(0, 1]"},
	} {
		if !q.Has(p.name) {
			continue
		}
		f, err := strconv.ParseFloat(q.Get(p.name), 64)
		if err != nil || !p.ok(f) {
			return r, &QueryError{p.name, fmt.Sprintf("%q is not a number in %s", q.Get(p.name), p.interval)}
		}
		p.set(f)
	}
	switch q.Get("search") {
	case "", "1", "true":
	case "0", "false":
		o.NoSearch = true
	default:
		return r, &QueryError{"search", fmt.Sprintf("%q is not 1 or 0", q.Get("search"))}
	}
	return r, nil
}

// ParseAdviceQuery reads /api/v1/advice's parameters.
func ParseAdviceQuery(q url.Values) (Query, error) {
	r, err := parseQuery(q, adviceParams)
	if err != nil {
		return r, err
	}
	r.User, r.Team = q.Get("user"), q.Get("team")
	if r.User != "" && r.Team != "" {
		return r, &QueryError{"", "user and team exclude each other: give one"}
	}
	return r, nil
}

func parseQuery(q url.Values, known []string) (Query, error) {
	var r Query
	for k, vs := range q {
		found := false
		for _, n := range known {
			found = found || n == k
		}
		if !found {
			return r, &QueryError{k, fmt.Sprintf("not a parameter of this endpoint (it takes %s)", strings.Join(known, ", "))}
		}
		if len(vs) > 1 {
			return r, &QueryError{k, fmt.Sprintf("given %d times", len(vs))}
		}
	}
	r.Node = q.Get("node")
	var err error
	if s := q.Get("since"); q.Has("since") {
		if r.Since, err = units.ParseDuration(s); err != nil {
			return r, &QueryError{"since", err.Error()}
		}
		if r.Since <= 0 {
			return r, &QueryError{"since", "must be more than 0"}
		}
	}
	for _, p := range []struct {
		name string
		t    **time.Time
	}{{"from", &r.From}, {"to", &r.To}} {
		if !q.Has(p.name) {
			continue
		}
		t, err := units.ParseTime(q.Get(p.name))
		if err != nil {
			return r, &QueryError{p.name, err.Error()}
		}
		*p.t = &t
	}
	return r, nil
}

// Window resolves the query's window against now: since before to (now
// by default), else from and to; 30 days when none is given. It is at
// most maxSpan long (0: no bound).
func (q *Query) Window(now time.Time, maxSpan time.Duration) (from, to time.Time, err error) {
	if q.Since > 0 && q.From != nil {
		return from, to, &QueryError{"", "since and from exclude each other: give a window's length or its start"}
	}
	to = now
	if q.To != nil {
		to = *q.To
	}
	switch {
	case q.From != nil:
		from = *q.From
	case q.Since > 0:
		from = to.Add(-q.Since)
	default:
		from = to.Add(-30 * 24 * time.Hour)
	}
	if !from.Before(to) {
		return from, to, &QueryError{"", fmt.Sprintf("the window is empty: from %s is not before to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))}
	}
	if maxSpan > 0 && to.Sub(from) > maxSpan {
		return from, to, &QueryError{"", fmt.Sprintf("the window of %s is longer than the %s one replay may cover", units.FormatDuration(to.Sub(from).Round(time.Minute)), units.FormatDuration(maxSpan))}
	}
	// As a report's: the window's ends are rounded out to whole minutes,
	// so that a window that ends now holds the minute under way.
	return from.UTC().Truncate(time.Minute), to.UTC().Add(time.Minute - 1).Truncate(time.Minute), nil
}

// DefaultSwitchOverhead is --switch-overhead's default.
const DefaultSwitchOverhead = 0.05

// Service answers what-if and advice queries from a ledger with the
// agent's settings.
type Service struct {
	Ledger Reader
	Prices cost.Model
	// Sched is the queue's settings (SchedConfig).
	Sched queue.Config
	// IdleWindow and IdleGrace are the idle rule's.
	IdleWindow, IdleGrace time.Duration
	// MaxWindow bounds a query's window; 0: none.
	MaxWindow time.Duration
	Now       func() time.Time
}

// ErrQuery is what the Service's errors that are the query's fault are
// (errors.Is); the others are the ledger's.
var ErrQuery = errors.New("bad query")

// badQuery is a query's fault, said as it is.
type badQuery struct{ err error }

func (e badQuery) Error() string        { return e.err.Error() }
func (e badQuery) Unwrap() error        { return e.err }
func (e badQuery) Is(target error) bool { return target == ErrQuery }

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// WhatIf replays the query's window.
func (s *Service) WhatIf(ctx context.Context, q Query) (*Result, error) {
	from, to, err := q.Window(s.now(), s.MaxWindow)
	if err != nil {
		return nil, badQuery{err}
	}
	o := q.Options
	o.Params.Sched = s.Sched
	o.Prices = s.Prices
	if q.target != nil {
		o.Params.Sched.TargetUtilization = *q.target
	}
	if q.memoryFraction != nil {
		o.Params.MemoryFraction = *q.memoryFraction
	}
	if err := o.Validate(); err != nil {
		return nil, badQuery{err}
	}
	h, err := Load(ctx, s.Ledger, from, to, q.Node)
	if err != nil {
		return nil, err
	}
	return Run(h, o)
}

// Advice reads the query's window for advice.
func (s *Service) Advice(ctx context.Context, q Query) (*AdviceReport, error) {
	from, to, err := q.Window(s.now(), s.MaxWindow)
	if err != nil {
		return nil, badQuery{err}
	}
	h, err := Load(ctx, s.Ledger, from, to, q.Node)
	if err != nil {
		return nil, err
	}
	return Advise(h, AdviseOptions{User: q.User, Team: q.Team, Prices: s.Prices, MemoryFraction: s.Sched.SharedMemoryFraction,
		IdleWindow: s.IdleWindow, IdleGrace: s.IdleGrace}), nil
}

// GPUUse is how many of the GPUs a container held it computed on.
type GPUUse struct {
	// Used is the GPUs computing at p95 of its minutes (SM above 5 % of
	// the time held), at least 1; Held the GPUs it held.
	Used, Held int
}

// GPUUse reads the containers' use of their GPUs over [from, to) (at
// most a week back from to), by container ID.
func (s *Service) GPUUse(ctx context.Context, from, to time.Time) (map[string]GPUUse, error) {
	if week := to.Add(-7 * 24 * time.Hour); from.Before(week) {
		from = week
	}
	h, err := Load(ctx, s.Ledger, from.Truncate(time.Minute), to.Add(time.Minute-1).Truncate(time.Minute), "")
	if err != nil {
		return nil, err
	}
	out := make(map[string]GPUUse, len(h.Holders))
	for _, hd := range h.Holders {
		if len(hd.Busy) == 0 {
			continue
		}
		busy := make([]int, len(hd.Busy))
		for i, b := range hd.Busy {
			busy[i] = int(b)
		}
		out[hd.ID] = GPUUse{Used: max(1, rankInt(busy, 0.95)), Held: hd.GPUs}
	}
	return out, nil
}
