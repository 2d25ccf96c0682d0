package report

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/units"
)

// MaxWindow caps a report's window: a ledger keeps hourly rows for about
// 400 days by default, and a longer window only reads more of nothing.
const MaxWindow = 800 * 24 * time.Hour

// Request is what a person asks for: the command line's flags and the
// API's query string parse into the same thing, so both reject the same
// input with the same words.
type Request struct {
	By    string
	Since time.Duration // window ending at To; 0 when not given
	// From and To are nil when not given (the zero time is a time like
	// any other); Validate sets both to the resolved window.
	From   *time.Time
	To     *time.Time
	User   string
	Team   string
	Labels map[string]string // k=v, all must match
	Node   string
	Format string // table, csv, json or focus

	span time.Duration // the window as asked, before rounding to minutes
	now  time.Time     // what Validate resolved the window against
}

// Span is the length of the window as asked, before Validate rounded its
// ends out to whole minutes: what a limit on the window is checked
// against, so that since=400d fits a 400-day limit.
func (r *Request) Span() time.Duration { return r.span }

// RequestError is a request that makes no sense; Param names the query
// parameter (and flag) at fault, "" when it is the combination.
type RequestError struct {
	Param string
	Msg   string
}

func (e *RequestError) Error() string {
	if e.Param == "" {
		return e.Msg
	}
	return e.Param + ": " + e.Msg
}

// Formats are the output formats a report can be written in.
func Formats() []string { return []string{"table", "csv", "json", "focus"} }

// Validate checks the request and resolves its window against now:
// [From, To) in whole minutes, UTC.
func (r *Request) Validate(now time.Time) error {
	if r.By == "" {
		r.By = "user"
	}
	if !slices.Contains(Groupings(), r.By) {
		return &RequestError{"by", fmt.Sprintf("%q is not one of %s", r.By, strings.Join(Groupings(), ", "))}
	}
	if r.Format == "" {
		r.Format = "table"
	}
	if !slices.Contains(Formats(), r.Format) {
		return &RequestError{"format", fmt.Sprintf("%q is not one of %s", r.Format, strings.Join(Formats(), ", "))}
	}
	var from, to time.Time
	switch {
	case r.From != nil && r.Since != 0:
		return &RequestError{"", "since and from exclude each other (--since/--from, or the since/from parameters): give a window's length or its start"}
	case r.To != nil:
		to = *r.To
	default:
		to = now
	}
	switch {
	case r.From != nil:
		from = *r.From
	case r.Since > 0:
		from = to.Add(-r.Since)
	default:
		from = to.Add(-24 * time.Hour)
	}
	if !from.Before(to) {
		return &RequestError{"", fmt.Sprintf("the window is empty: from %s is not before to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))}
	}
	// Compared without subtracting, which saturates for ends centuries
	// apart.
	if from.Before(to.Add(-MaxWindow)) {
		return &RequestError{"", fmt.Sprintf("the window of %s is longer than the %s a report may cover", days(from, to), units.FormatDuration(MaxWindow))}
	}
	r.span, r.now = to.Sub(from), now
	from, to = ledger.Minute(from), ledger.Minute(to.Add(time.Minute-1))
	r.From, r.To = &from, &to
	return nil
}

// days writes the length of [from, to) in days, for windows too long for a
// time.Duration.
func days(from, to time.Time) string {
	return fmt.Sprintf("%.1f days", float64(to.Unix()-from.Unix())/86400)
}

// Filter returns the record filter of the request, or nil when it keeps
// everything.
func (r *Request) Filter() func(*ledger.UsageTotal) bool {
	if r.User == "" && r.Team == "" && len(r.Labels) == 0 {
		return nil
	}
	return func(u *ledger.UsageTotal) bool {
		user, team := "", ""
		var labels map[string]string
		switch {
		case u.Container != nil:
			user, team, labels = u.Container.User, u.Container.Team, u.Container.Labels
		case u.OwnerKind == ledger.KindHost:
			user = u.OwnerID
		}
		if r.User != "" && user != r.User || r.Team != "" && team != r.Team {
			return false
		}
		for k, v := range r.Labels {
			// A container without the label does not match, even k=.
			if got, ok := labels[k]; !ok || got != v {
				return false
			}
		}
		return true
	}
}

// ParseLabel reads k=v.
func ParseLabel(s string) (string, string, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return "", "", fmt.Errorf("want key=value, got %q", s)
	}
	return k, v, nil
}

// RequestFromQuery reads a request from a URL query string, as
// /api/v1/usage takes it: by, since, from, to, user, team, label (k=v,
// repeatable), node and format. Unknown parameters are an error, so a typo
// does not silently widen a report.
func RequestFromQuery(q url.Values, parseDuration func(string) (time.Duration, error)) (Request, error) {
	var r Request
	known := map[string]bool{"by": true, "since": true, "from": true, "to": true, "user": true, "team": true, "label": true, "node": true, "format": true}
	for k, vs := range q {
		if !known[k] {
			return r, fmt.Errorf("unknown parameter %q", k)
		}
		if len(vs) > 1 && k != "label" {
			return r, fmt.Errorf("%s: given %d times", k, len(vs))
		}
	}
	r.By, r.User, r.Team, r.Node, r.Format = q.Get("by"), q.Get("user"), q.Get("team"), q.Get("node"), q.Get("format")
	var err error
	if s := q.Get("since"); s != "" {
		if r.Since, err = parseDuration(s); err != nil {
			return r, fmt.Errorf("since: %w", err)
		}
		if r.Since == 0 {
			return r, errors.New("since: must be more than 0")
		}
	}
	if q.Has("from") {
		t, err := units.ParseTime(q.Get("from"))
		if err != nil {
			return r, fmt.Errorf("from: %w", err)
		}
		r.From = &t
	}
	if q.Has("to") {
		t, err := units.ParseTime(q.Get("to"))
		if err != nil {
			return r, fmt.Errorf("to: %w", err)
		}
		r.To = &t
	}
	for _, l := range q["label"] {
		k, v, err := ParseLabel(l)
		if err != nil {
			return r, fmt.Errorf("label: %w", err)
		}
		if r.Labels == nil {
			r.Labels = map[string]string{}
		}
		r.Labels[k] = v
	}
	return r, nil
}

// Reader is the part of a ledger a report reads.
type Reader interface {
	// Totals reads the owners' rows and the GPUs' totals of a window in
	// one snapshot: read apart while an agent writes, rows plus idle pool
	// would not add up to the GPUs' time.
	Totals(ctx context.Context, f ledger.Filter) ([]ledger.UsageTotal, []ledger.GPUTotal, error)
	GPUs(ctx context.Context, f ledger.Filter) ([]ledger.GPUTotal, error)
}

// Models returns the GPU models the ledger knows, on any node and at any
// time, sorted: what cost.Model.Check checks prices against. It takes
// the ledger's whole inventory rather than a report's window, so that a
// price for a model that merely sat out the window is not taken for a
// misspelling.
func Models(ctx context.Context, store ledger.GPULister) ([]string, error) {
	gpus, err := store.KnownGPUs(ctx)
	if err != nil {
		return nil, fmt.Errorf("read GPU models: %w", err)
	}
	var models []string
	for _, g := range gpus {
		if g.Model != "" && !slices.Contains(models, g.Model) {
			models = append(models, g.Model)
		}
	}
	slices.Sort(models)
	return models, nil
}

// Run reads the ledger for a validated request and builds the report.
// A report by job also reads the queue's jobs from jobs, which other
// groupings do not use (nil is fine for them); a running job's run time
// is measured to the time the request was validated against.
func Run(ctx context.Context, store Reader, jobs JobReader, r Request, m cost.Model) (*Report, error) {
	f := ledger.Filter{From: *r.From, To: *r.To, Node: r.Node}
	usage, gpus, err := store.Totals(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("read usage: %w", err)
	}
	// The jobs after the usage, so that every job with usage is among
	// them.
	var js []queue.Job
	if r.By == ByJob {
		if js, err = readJobs(ctx, jobs); err != nil {
			return nil, err
		}
	}
	rep, err := Build(usage, gpus, Options{By: r.By, From: *r.From, To: *r.To, Cost: m, Filter: r.Filter(), Jobs: js, Now: r.now})
	// The window was rounded out to whole minutes to read the current
	// minute's rows; what they cover ends now, not at the minute to come.
	if err == nil && !r.now.IsZero() && rep.To.After(r.now) {
		rep.To = r.now.UTC().Truncate(time.Second)
	}
	return rep, err
}
