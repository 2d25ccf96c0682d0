package policy

import (
	"context"

	"github.com/gpumeter/gpumeter/internal/audit"
)

// Audit event kinds.
const (
	EventNotify = "notify" // a notify rule's notification
	EventWarn   = "warn"   // the warning before a stop
	EventStop   = "stop"
)

// Outcomes of an audit event.
const (
	OutcomeSent      = "sent"      // the webhook took the notification
	OutcomeFailed    = "failed"    // the webhook or docker stop failed
	OutcomeLogged    = "logged"    // no webhook is set: the log line is the notification
	OutcomeDryRun    = "dry_run"   // nothing was done; the log says what would have been
	OutcomeStopped   = "stopped"   // the container was stopped
	OutcomeCancelled = "cancelled" // the finding no longer held, or the container stopped, at the re-check
	OutcomeGone      = "gone"      // the container disappeared before it could be stopped
	OutcomeExempt    = "exempt"    // the container became exempt before the stop
)

// Auditor records what the engine did; *audit.Log is one. Act returns
// once the event is written, or with the error that kept it from being
// written: the engine's events are actions, which nothing may drop.
type Auditor interface {
	Act(ctx context.Context, e audit.Event) error
}
