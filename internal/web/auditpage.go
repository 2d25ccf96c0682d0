package web

import (
	"maps"
	"net/http"
	"slices"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
)

// auditPages is the page of the audit log, for admins: pageGuard turns
// the other roles away as the API does.
func (s *handler) auditPages() []pageDef {
	return []pageDef{
		{path: "/audit", name: PageAudit, title: "Audit log", act: auth.ActAuditRead, view: s.auditPage},
	}
}

// auditWindows are the page's window presets: the API's since.
var auditWindows = []string{"1h", "24h", "7d"}

// auditPageLimit is how many events the page shows unless limit asks
// for more (up to the API's api.max_audit_events): a page of ten thousand
// rows is 3 MB that nobody reads through.
const auditPageLimit = 500

// auditPage reads the window as GET /api/v1/audit does, with window for
// its since limited to the presets, and shows the events newest first.
func (s *handler) auditPage(r *http.Request, c *Visitor, f Frame) (any, error) {
	raw, err := apitype.ParseQuery(r.URL.RawQuery)
	if err == nil {
		err = apitype.OnlyParams(raw, "window", "from", "to", "limit")
	}
	if err != nil {
		return nil, badPage("the audit page cannot show that: %v", err)
	}
	// The page's form sends the fields left empty: those are not given.
	for _, k := range []string{"to", "limit"} {
		if vs, ok := raw[k]; ok && len(vs) == 1 && vs[0] == "" {
			delete(raw, k)
		}
	}
	window := raw.Get("window")
	if raw.Has("window") && !slices.Contains(auditWindows, window) {
		return nil, badPage("the audit page does not know the window %q: it shows 1h, 24h or 7d, or from=…&to=… (RFC 3339 or a date)", window)
	}
	q := raw
	if raw.Has("window") {
		q = maps.Clone(raw)
		q["since"] = q["window"]
		delete(q, "window")
	}
	aq, err := apitype.ParseAuditQueryNamed(q, s.cfg.Now(), s.cfg.MaxAuditEvents, func(p string) string {
		if p == "since" {
			return "window"
		}
		return p
	})
	if err != nil {
		return nil, badPage("the audit page cannot show that: %v", err)
	}
	if !raw.Has("limit") {
		aq.Limit = min(aq.Limit, auditPageLimit)
	}
	v := &Audit{Frame: f, From: aq.From, To: aq.To, Limit: aq.Limit, FromField: raw.Get("from"), ToField: raw.Get("to")}
	current := window
	if current == "" && !raw.Has("from") {
		current = "24h"
	}
	for _, w := range auditWindows {
		v.Presets = append(v.Presets, NavItem{Path: "/audit?window=" + w, Label: "last " + w, Current: w == current && !raw.Has("to")})
	}
	if s.cfg.Audit == nil {
		v.Note = "The audit log is off on this agent."
		return v, nil
	}
	events, truncated, err := s.cfg.Audit.Events(r.Context(), aq.From, aq.To, aq.Limit)
	if err != nil {
		return nil, err
	}
	v.Truncated = truncated
	v.Events = make([]AuditRow, 0, len(events))
	// Events come oldest first; the page shows the newest first.
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		v.Events = append(v.Events, AuditRow{
			Time: e.Time, Kind: e.Kind, Caller: e.Caller, Role: e.Role, Source: e.Source,
			Action: e.Action, Target: e.Target, Outcome: e.Outcome, Error: e.Error,
			Rule: e.Rule, Container: e.Container, Owner: e.Owner, Status: e.Status, DryRun: e.DryRun, Count: e.Count,
		})
	}
	// The log is in the order events were written: a minute's total of
	// calls, stamped with its minute, is written when the minute is over,
	// after calls made since. The page is by time, newest first.
	slices.SortStableFunc(v.Events, func(a, b AuditRow) int { return b.Time.Compare(a.Time) })
	return v, nil
}
