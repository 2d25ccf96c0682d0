package apitype

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/units"
)

// AuditResponse is the body of /api/v1/audit.
type AuditResponse struct {
	From   time.Time     `json:"from"`
	To     time.Time     `json:"to"`
	Events []audit.Event `json:"events"`
	// Truncated says that more events fell in the window than limit: the
	// newest are returned.
	Truncated bool `json:"truncated"`
}

// AuditQuery is what /api/v1/audit is asked: a window and a limit.
type AuditQuery struct {
	From, To time.Time
	Limit    int
}

// ParseAuditQuery reads since (a duration back from to), from, to and
// limit; the default window is the last 24 hours and the default limit
// max.
func ParseAuditQuery(q url.Values, now time.Time, max int) (AuditQuery, error) {
	aq := AuditQuery{To: now, Limit: max}
	for k, v := range q {
		if len(v) != 1 {
			return aq, fmt.Errorf("%s: given %d times", k, len(v))
		}
	}
	var err error
	since := 24 * time.Hour
	for k, vs := range q {
		v := vs[0]
		switch k {
		case "since":
			if since, err = units.ParseDuration(v); err != nil || since == 0 {
				return aq, fmt.Errorf("since: %q is not a duration above 0 like 1h or 7d", v)
			}
		case "from":
			if aq.From, err = report.ParseTime(v); err != nil {
				return aq, fmt.Errorf("from: %w", err)
			}
		case "to":
			if aq.To, err = report.ParseTime(v); err != nil {
				return aq, fmt.Errorf("to: %w", err)
			}
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > max {
				return aq, fmt.Errorf("limit: %q is not a number from 1 to %d", v, max)
			}
			aq.Limit = n
		default:
			return aq, fmt.Errorf("%q is not a parameter of /api/v1/audit (since, from, to, limit)", k)
		}
	}
	if q.Has("since") && q.Has("from") {
		return aq, errors.New("since and from exclude each other")
	}
	if !q.Has("from") {
		aq.From = aq.To.Add(-since)
	}
	if !aq.From.Before(aq.To) {
		return aq, fmt.Errorf("from: %s is not before to %s", aq.From.Format(time.RFC3339), aq.To.Format(time.RFC3339))
	}
	return aq, nil
}
