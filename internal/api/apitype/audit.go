package apitype

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/gpumeter/gpumeter/internal/units"
)

// AuditResponse is the body of /api/v1/audit.
type AuditResponse struct {
	From   time.Time    `json:"from"`
	To     time.Time    `json:"to"`
	Events []AuditEvent `json:"events"`
	// Truncated says that more events fell in the window than limit: the
	// newest are returned.
	Truncated bool `json:"truncated"`
}

// AuditEvent is one event of the audit log. The waste policy's events
// (kinds notify, warn, stop) fill Rule through Attempts; API calls (kind
// api) fill Caller through Status.
type AuditEvent struct {
	Time        time.Time          `json:"time"`
	Kind        string             `json:"kind"`
	Rule        string             `json:"rule"`
	FindingID   string             `json:"finding_id"`
	Node        string             `json:"node,omitempty"`
	ContainerID string             `json:"container_id,omitempty"`
	Container   string             `json:"container,omitempty"`
	Owner       string             `json:"owner"`
	Evidence    map[string]float64 `json:"evidence,omitempty"`
	DryRun      bool               `json:"dry_run"`
	Outcome     string             `json:"outcome"`
	// Attempts is how many times the webhook was tried.
	Attempts int    `json:"attempts,omitempty"`
	Error    string `json:"error,omitempty"`
	// Caller is who made the call: a user and the token they used
	// ("alice (token alice-laptop)"), "anonymous", or "policy".
	Caller string `json:"caller,omitempty"`
	Role   string `json:"role,omitempty"`
	// Source is the remote address, or "unix uid N" on the local socket.
	Source string `json:"source,omitempty"`
	Action string `json:"action,omitempty"` // e.g. containers.stop, usage.read
	Target string `json:"target,omitempty"` // e.g. a container id, user=bob
	Status int    `json:"status,omitempty"` // the HTTP status
	// Count, when it is not 0, is how many calls the event stands for:
	// refusals or reads of one source, caller, action and reason summed
	// over the window that begins at Time. An event without one stands
	// for itself.
	Count int64 `json:"count,omitempty"`
}

// AuditKindAPI is the Kind of an API call's event.
const AuditKindAPI = "api"

// AuditQuery is what /api/v1/audit is asked: a window and a limit.
type AuditQuery struct {
	From, To time.Time
	Limit    int
}

// ParseAuditQuery reads since (a duration back from to), from, to and
// limit; the default window is the last 24 hours and the default limit
// max. An error starts with the parameter at fault.
func ParseAuditQuery(q url.Values, now time.Time, max int) (AuditQuery, error) {
	return ParseAuditQueryNamed(q, now, max, func(param string) string { return param })
}

// ParseAuditQueryNamed is ParseAuditQuery for a caller that took the
// parameters under names of its own, a command line's flags say: its
// errors call the parameter p name(p).
func ParseAuditQueryNamed(q url.Values, now time.Time, max int, name func(param string) string) (AuditQuery, error) {
	aq := AuditQuery{To: now, Limit: max}
	for k, v := range q {
		if len(v) != 1 {
			return aq, fmt.Errorf("%s: given %d times", name(k), len(v))
		}
	}
	var err error
	since := 24 * time.Hour
	for k, vs := range q {
		v := vs[0]
		switch k {
		case "since":
			if since, err = units.ParseDuration(v); err != nil || since == 0 {
				return aq, fmt.Errorf("%s: %q is not a duration above 0 like 1h or 7d", name(k), v)
			}
		case "from":
			if aq.From, err = units.ParseTime(v); err != nil {
				return aq, fmt.Errorf("%s: %w", name(k), err)
			}
		case "to":
			if aq.To, err = units.ParseTime(v); err != nil {
				return aq, fmt.Errorf("%s: %w", name(k), err)
			}
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > max {
				return aq, fmt.Errorf("%s: %q is not a number from 1 to %d", name(k), v, max)
			}
			aq.Limit = n
		default:
			return aq, fmt.Errorf("%q is not a parameter of /api/v1/audit (since, from, to, limit)", k)
		}
	}
	if q.Has("since") && q.Has("from") {
		return aq, fmt.Errorf("%s and %s exclude each other", name("since"), name("from"))
	}
	if !q.Has("from") {
		aq.From = aq.To.Add(-since)
	}
	if !aq.From.Before(aq.To) {
		return aq, fmt.Errorf("%s: %s is not before %s %s", name("from"), aq.From.Format(time.RFC3339), name("to"), aq.To.Format(time.RFC3339))
	}
	return aq, nil
}
