package web

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

func (s *handler) usagePages() []pageDef {
	return []pageDef{{path: "/usage", name: PageUsage, title: "Usage", act: auth.ActUsageRead, view: s.usagePage}}
}

// The usage page's windows: rolling ones end at the next whole minute,
// months are the reader's.
const (
	windowCustom    = "custom"
	windowMonth     = "month"
	windowLastMonth = "last-month"
)

var usageWindows = []struct{ name, label string }{
	{"24h", "24 h"}, {"7d", "7 days"}, {"30d", "30 days"},
	{windowMonth, "this month"}, {windowLastMonth, "last month"}, {windowCustom, "custom"},
}

// usageParams are the page's query parameters.
var usageParams = []string{"window", "by", "from", "to", "user", "team"}

// usageQuery is the page's state, read from its URL.
type usageQuery struct {
	window, by, user, team string
	// from and to are the days of a custom window, as given.
	from, to string
}

// values is q as a query string, with the changes in set ("" removes a
// parameter).
func (q usageQuery) values(set ...string) string {
	v := url.Values{}
	put := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	put("window", q.window)
	put("by", q.by)
	if q.window == windowCustom {
		put("from", q.from)
		put("to", q.to)
	}
	put("user", q.user)
	put("team", q.team)
	for i := 0; i+1 < len(set); i += 2 {
		if set[i+1] == "" {
			v.Del(set[i])
		} else {
			v.Set(set[i], set[i+1])
		}
	}
	return "/usage?" + v.Encode()
}

func parseUsageQuery(r *http.Request) (usageQuery, error) {
	raw, err := apitype.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return usageQuery{}, badPage("%v", err)
	}
	for k, vs := range raw {
		if !slices.Contains(usageParams, k) {
			return usageQuery{}, badPage("the usage page does not know the parameter %q; it takes %s", k, strings.Join(usageParams, ", "))
		}
		if len(vs) > 1 {
			return usageQuery{}, badPage("%s is given %d times: give it once", k, len(vs))
		}
	}
	q := usageQuery{window: raw.Get("window"), by: raw.Get("by"), user: raw.Get("user"), team: raw.Get("team"),
		from: raw.Get("from"), to: raw.Get("to")}
	if q.window == "" {
		q.window = "24h"
		if raw.Has("from") || raw.Has("to") {
			q.window = windowCustom
		}
	}
	if !slices.ContainsFunc(usageWindows, func(w struct{ name, label string }) bool { return w.name == q.window }) {
		names := make([]string, len(usageWindows))
		for i, w := range usageWindows {
			names[i] = w.name
		}
		return q, badPage("the usage page does not know the window %q; it shows %s (custom with from and to as days, 2026-11-02)", q.window, strings.Join(names, ", "))
	}
	if q.window != windowCustom && (raw.Has("from") || raw.Has("to")) {
		return q, badPage("from and to go with window=custom, not with window=%s", q.window)
	}
	if q.by == "" {
		q.by = report.ByUser
	}
	if !slices.Contains(report.Groupings(), q.by) {
		return q, badPage("the usage page cannot group by %q; it groups by %s", q.by, strings.Join(report.Groupings(), ", "))
	}
	return q, nil
}

// usageWindow resolves q's window in loc at now: [from, to).
func usageWindow(q usageQuery, now time.Time, loc *time.Location) (time.Time, time.Time, error) {
	// Rolling windows end at the next whole minute, as a report's do, so
	// that the downloads, which name the window's ends, cover the same
	// minutes and are no longer than the page's window.
	end := ledger.Minute(now.Add(time.Minute - time.Nanosecond))
	lnow := now.In(loc)
	month := time.Date(lnow.Year(), lnow.Month(), 1, 0, 0, 0, 0, loc)
	switch q.window {
	case "24h":
		return end.Add(-24 * time.Hour), end, nil
	case "7d":
		return end.Add(-7 * 24 * time.Hour), end, nil
	case "30d":
		return end.Add(-30 * 24 * time.Hour), end, nil
	case windowMonth:
		return month, end, nil
	case windowLastMonth:
		return month.AddDate(0, -1, 0), month, nil
	}
	if q.from == "" || q.to == "" {
		return time.Time{}, time.Time{}, badPage("a custom window needs both from and to, as days (2026-11-02)")
	}
	from, err := time.ParseInLocation(time.DateOnly, q.from, loc)
	if err != nil {
		return time.Time{}, time.Time{}, badPage("from: %q is not a day like 2026-11-02", q.from)
	}
	last, err := time.ParseInLocation(time.DateOnly, q.to, loc)
	if err != nil {
		return time.Time{}, time.Time{}, badPage("to: %q is not a day like 2026-11-02", q.to)
	}
	if last.Before(from) {
		return time.Time{}, time.Time{}, badPage("the window ends (to %s) before it starts (from %s): swap them", q.to, q.from)
	}
	// to is the last day shown, whole.
	return from, last.AddDate(0, 0, 1), nil
}

func (s *handler) usagePage(r *http.Request, c *Visitor, f Frame) (any, error) {
	q, err := parseUsageQuery(r)
	if err != nil {
		return nil, err
	}
	loc := f.Loc
	if loc == nil {
		loc = time.UTC
	}
	from, to, err := usageWindow(q, f.Now, loc)
	if err != nil {
		return nil, err
	}
	if s.cfg.Reports == nil {
		return nil, &pageError{http.StatusServiceUnavailable, "the ledger is off (ledger.enabled: false), so there is no usage to show"}
	}
	req := report.Request{By: q.by, From: &from, To: &to, User: q.user, Team: q.team, Format: "json"}
	rep, fault := s.cfg.API.UsageReport(r.Context(), c, &req)
	if fault != nil {
		if fault.Denied != nil {
			return nil, &pageError{http.StatusForbidden, "you may see only your own usage: " + fault.Denied.Error()}
		}
		return nil, &pageError{fault.Status, fault.Msg}
	}
	// The ledger's rows are by minute, and the request's end is rounded
	// up to the current one's: the window shown ends now, not in the
	// minute to come.
	end := *req.To
	if now := s.cfg.Now(); end.After(now) {
		end = now
	}
	v := &Usage{Frame: f, From: *req.From, To: end, Window: q.window, By: q.by, Groupings: report.Groupings(),
		FilterUser: q.user, FilterTeam: q.team, Currency: rep.Currency, Filtered: rep.Filtered, Notes: rep.Notes}
	v.FromDate = from.In(loc).Format(time.DateOnly)
	v.ToDate = to.Add(-time.Nanosecond).In(loc).Format(time.DateOnly)
	if q.window == windowCustom {
		q.from, q.to = v.FromDate, v.ToDate
	}
	for _, w := range usageWindows {
		if w.name == windowCustom {
			continue
		}
		v.Presets = append(v.Presets, Link{Label: w.label, Href: q.values("window", w.name, "from", "", "to", ""), Current: w.name == q.window})
	}
	v.Crumbs = usageCrumbs(q)
	v.Downloads = usageDownloads(req)
	for _, row := range rep.Rows {
		v.Rows = append(v.Rows, usageRow(row, rep.Currency, drillDown(q, row.Key)))
	}
	v.Totals = usageRow(rep.Totals, rep.Currency, "")
	if !c.OwnOnly {
		v.Idle = &UsageIdle{GPUHours: rep.Idle.GPUHours, EnergyKWh: rep.Idle.EnergyKWh, Cost: rep.Idle.Cost, Shared: rep.Idle.Shared}
	}
	v.Chart = s.usageChart(r.Context(), c, req, loc)
	v.Advice, v.AdviceNote = s.usageAdvice(r, c, q, *req.From, *req.To)
	return v, nil
}

// usageAdvice is the advice over the page's window for the users it
// shows: a user's own, else the filter's user or team, else everyone's.
func (s *handler) usageAdvice(r *http.Request, c *Visitor, q usageQuery, from, to time.Time) ([]AdviceRow, string) {
	if s.cfg.WhatIf == nil {
		return nil, "The ledger is off: there is no measured use to advise from."
	}
	wq := whatif.Query{From: &from, To: &to, User: q.user}
	if q.user == "" {
		wq.Team = q.team
	}
	if c.OwnOnly {
		wq.User, wq.Team = c.ID.User, ""
	}
	rep, err := s.cfg.WhatIf.Advice(r.Context(), wq)
	if err != nil {
		s.cfg.Logger.Warn("usage page: advice", "err", err)
		return nil, "The advice could not be read; the agent's log says why."
	}
	var rows []AdviceRow
	for _, a := range rep.Advice {
		keys := slices.Sorted(maps.Keys(a.Evidence))
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			if k == "rule" || k == "pointer" || k == "saves" {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %v", strings.ReplaceAll(k, "_", " "), a.Evidence[k]))
		}
		if p, ok := a.Evidence["pointer"].(string); ok {
			parts = append(parts, p)
		}
		rows = append(rows, AdviceRow{User: a.User, Group: a.Group, Kind: string(a.Kind), Flag: a.Flag, Evidence: strings.Join(parts, "; "),
			SavedGPUHours: a.SavedGPUHours, Saved: a.SavedCost.Amount, Currency: a.SavedCost.Currency})
	}
	return rows, ""
}

func usageRow(row report.Row, currency, href string) UsageRow {
	return UsageRow{Key: row.Key, Href: href, Allocated: row.GPUHoursAllocated, Used: row.GPUHoursUsed, Held: row.GPUHoursHeld,
		Efficiency: row.Efficiency, EnergyKWh: row.EnergyKWh, PeakMemory: row.PeakGPUMemoryBytes, CPUCoreHours: row.CPUCoreHours,
		Cost: row.Cost, Currency: currency, Containers: row.Containers}
}

// drillDown is where a row of the report leads: a team to its users, a
// user to their containers, in the same window. Keys in parentheses
// stand for no name and lead nowhere.
func drillDown(q usageQuery, key string) string {
	if strings.HasPrefix(key, "(") {
		return ""
	}
	switch q.by {
	case report.ByTeam:
		return q.values("by", report.ByUser, "team", key)
	case report.ByUser:
		return q.values("by", report.ByContainer, "user", key)
	}
	return ""
}

// usageCrumbs lead back up from a team's or a user's usage.
func usageCrumbs(q usageQuery) []Link {
	if q.team == "" && q.user == "" {
		return nil
	}
	crumbs := []Link{{Label: "all teams", Href: q.values("by", report.ByTeam, "team", "", "user", "")}}
	if q.team != "" {
		crumbs = append(crumbs, Link{Label: "team " + q.team, Href: q.values("by", report.ByUser, "user", "")})
	}
	if q.user != "" {
		crumbs = append(crumbs, Link{Label: "user " + q.user, Href: q.values("by", report.ByContainer)})
	}
	crumbs[len(crumbs)-1].Current = true
	return crumbs
}

// usageDownloads are the API's reports of the page's window and filters.
// A user's are their own whatever the link says: the API holds them to
// it as it holds the page.
func usageDownloads(req report.Request) []Link {
	v := url.Values{}
	v.Set("by", req.By)
	v.Set("from", req.From.UTC().Format(time.RFC3339))
	v.Set("to", req.To.UTC().Format(time.RFC3339))
	if req.User != "" {
		v.Set("user", req.User)
	}
	if req.Team != "" {
		v.Set("team", req.Team)
	}
	with := func(format string) string {
		w := url.Values{}
		for k, vs := range v {
			w[k] = vs
		}
		w.Set("format", format)
		return w.Encode()
	}
	// usage-by-user-20261101T1100Z-20261102T1100Z: the window in UTC.
	name := "usage-by-" + req.By + "-" + req.From.UTC().Format("20060102T1504Z") + "-" + req.To.UTC().Format("20060102T1504Z")
	return []Link{
		{Label: "CSV", Href: "/api/v1/usage.csv?" + v.Encode(), File: name + ".csv"},
		{Label: "JSON", Href: "/api/v1/usage?" + with("json"), File: name + ".json"},
		{Label: "FOCUS CSV", Href: "/api/v1/usage?" + with("focus"), File: name + "-focus.csv"},
	}
}

// usageChart is the GPU-hours used and held over the window, per hour up
// to two days and per day (the reader's) beyond, from the ledger's hour
// rows, filtered as the report is.
func (s *handler) usageChart(ctx context.Context, c *Visitor, req report.Request, loc *time.Location) Chart {
	from, to := *req.From, *req.To
	var starts []time.Time
	step := time.Hour
	if to.Sub(from) <= 48*time.Hour {
		for t := ledger.Hour(from); t.Before(to); t = t.Add(time.Hour) {
			starts = append(starts, t)
		}
	} else {
		step = 24 * time.Hour
		lf := from.In(loc)
		for t := time.Date(lf.Year(), lf.Month(), lf.Day(), 0, 0, 0, 0, loc); t.Before(to); t = t.AddDate(0, 0, 1) {
			starts = append(starts, t)
		}
	}
	end := starts[len(starts)-1].Add(step)
	if step > time.Hour {
		end = starts[len(starts)-1].AddDate(0, 0, 1)
	}
	empty := func(note string) Chart {
		ch := UsageChart(starts[0], end, nil, step, loc, nil, nil)
		ch.Note = note
		return ch
	}
	if s.cfg.Usage == nil {
		return empty("the ledger's hourly sums are not read by this agent")
	}
	// Whole hours: the last one, begun, is read whole.
	hours, err := s.cfg.Usage.UsageByOwner(ctx, starts[0], ledger.Hour(end.Add(-time.Nanosecond)).Add(time.Hour))
	if err != nil {
		s.cfg.Logger.Warn("console usage: hourly sums", "err", err)
		return empty("could not read the ledger's hourly sums; the agent's log says why")
	}
	used, idle := make([]float64, len(starts)), make([]float64, len(starts))
	for _, h := range hours {
		if req.User != "" && h.User != req.User || req.Team != "" && h.Team != req.Team {
			continue
		}
		i := sort.Search(len(starts), func(i int) bool { return starts[i].After(h.Start) }) - 1
		if i < 0 {
			continue
		}
		used[i] += h.UsedSeconds / 3600
		if h.HeldSeconds > h.UsedSeconds {
			idle[i] += (h.HeldSeconds - h.UsedSeconds) / 3600
		}
	}
	return UsageChart(starts[0], end, starts, step, loc, used, idle)
}
