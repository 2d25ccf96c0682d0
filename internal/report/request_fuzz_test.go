package report_test

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/units"
)

// FuzzUsageQuery reads arbitrary query strings as /api/v1/usage does,
// with the config's duration parser: a request that is accepted and
// validated has a window of whole minutes in UTC, not empty and not longer
// than MaxWindow, and a known grouping and format.
func FuzzUsageQuery(f *testing.F) {
	for _, s := range []string{
		"", "since=7d", "by=team&since=1d12h", "from=2026-11-01&to=2026-11-02", "from=2026-11-01T10:00:00%2B02:00&to=2026-11-01T10:00",
		"label=team%3Dml&label=env%3D", "label==x", "since=0s", "since=65535d", "from=0001-01-01", "to=9999-12-31", "from=2026-11-03",
		"since=1h&from=2026-11-01", "by=colour", "format=focus", "user=a&user=b", "x=1", "%zz", "since=801d",
	} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 2, 12, 34, 56, 0, time.UTC)
	known := []string{"by", "since", "from", "to", "user", "team", "label", "node", "format"}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		r, err := report.RequestFromQuery(q, units.ParseDuration)
		if err != nil {
			// The error names the parameter at fault.
			msg := err.Error()
			named := strings.HasPrefix(msg, "unknown parameter ")
			for _, k := range known {
				named = named || strings.HasPrefix(msg, k+": ")
			}
			if !named {
				t.Errorf("RequestFromQuery(%q) = %q, which names no parameter", raw, msg)
			}
			return
		}
		for k := range q {
			if !slices.Contains(known, k) {
				t.Errorf("RequestFromQuery(%q) accepted the unknown parameter %q", raw, k)
			}
		}
		if r.Since < 0 {
			t.Errorf("RequestFromQuery(%q): since %s is negative", raw, r.Since)
		}
		if err := r.Validate(now); err != nil {
			var re *report.RequestError
			if !errors.As(err, &re) {
				t.Errorf("Validate(%q) = %T %v, want a *RequestError", raw, err, err)
			}
			return
		}
		if !r.From.Before(*r.To) {
			t.Errorf("%q: from %s is not before to %s", raw, r.From, r.To)
		}
		if span := r.Span(); span > report.MaxWindow || r.To.Sub(*r.From) > span+2*time.Minute {
			t.Errorf("%q: a window of %s (%s after rounding), longer than %s", raw, span, r.To.Sub(*r.From), report.MaxWindow)
		}
		for _, tm := range []time.Time{*r.From, *r.To} {
			if tm.Location() != time.UTC || !tm.Equal(tm.Truncate(time.Minute)) {
				t.Errorf("%q: %s is not a whole minute in UTC", raw, tm)
			}
		}
		if !slices.Contains(report.Groupings(), r.By) || !slices.Contains(report.Formats(), r.Format) {
			t.Errorf("%q: by %q, format %q", raw, r.By, r.Format)
		}
		if r.User != q.Get("user") || r.Team != q.Get("team") || r.Node != q.Get("node") {
			t.Errorf("%q: user %q team %q node %q are not the query's", raw, r.User, r.Team, r.Node)
		}
		for k, v := range r.Labels {
			if k == "" {
				t.Errorf("%q: a label with an empty key (%q)", raw, v)
			}
		}
	})
}
