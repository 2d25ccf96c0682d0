package web

import "time"

// Audit is the page at /audit: the audit log over a window, newest
// first.
type Audit struct {
	Frame
	From, To time.Time
	// Presets are the window links, the current one marked.
	Presets []NavItem
	// FromField and ToField are what the form's fields hold: the query's
	// from and to as given.
	FromField, ToField string
	Events             []AuditRow
	// Truncated says the window holds more events than Limit, the newest
	// of which are shown.
	Truncated bool
	Limit     int
	// Note says why there are no events to show (the log is off).
	Note string
}

// AuditRow is one event of the log.
type AuditRow struct {
	Time                           time.Time
	Kind, Caller, Role, Source     string
	Action, Target, Outcome, Error string
	Rule, Container, Owner         string
	Status                         int
	DryRun                         bool
	// Count is how many calls the row stands for when it sums a window
	// of them; 0 for one.
	Count int64
}
