package ledger

import (
	"context"
	"time"
)

// AuditEvent is one thing the policy did, or would have done in a dry
// run (a notification, a warning or a stop), or one API call that changed
// something or was denied.
type AuditEvent struct {
	Time        time.Time // kept to the microsecond
	Node        string
	Kind        string // notify, warn, stop, api
	Rule        string
	FindingID   string
	ContainerID string
	Container   string
	Owner       string
	Evidence    map[string]float64
	DryRun      bool
	Outcome     string
	Attempts    int
	Error       string
	// Caller, Role, Source, Action, Target and Status describe an API
	// call; policy events leave them empty.
	Caller string
	Role   string
	Source string // the remote address, or "unix uid N"
	Action string // e.g. containers.stop
	Target string
	Status int // the HTTP status
	// Count, when it is not 0, is how many calls the event sums.
	Count int64
}

// AuditStore keeps audit events. Both backends implement it.
type AuditStore interface {
	// Audit adds events atomically.
	Audit(ctx context.Context, events []AuditEvent) error
	// AuditEvents returns the events in the filter's window, by the
	// exact time (not truncated to the minute), oldest first.
	AuditEvents(ctx context.Context, f Filter) ([]AuditEvent, error)
	// AuditNewest returns the newest n (n > 0) events in the filter's
	// window, oldest first, and whether the window holds more, without
	// reading the rest of it.
	AuditNewest(ctx context.Context, f Filter, n int) ([]AuditEvent, bool, error)
}
