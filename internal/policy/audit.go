package policy

import "github.com/gpumeter/gpumeter/internal/audit"

// Audit event kinds.
const (
	EventNotify = "notify" // a notify rule's notification
	EventWarn   = "warn"   // the warning before a stop
	EventStop   = "stop"
)

// Outcomes of an audit event.
const (
	OutcomeSent     = "sent"      // the webhook took the notification
	OutcomeFailed   = "failed"    // the webhook or docker stop failed
	OutcomeNoHook   = "logged"    // no webhook is set: the log line is the notification
	OutcomeDryRun   = "dry_run"   // nothing was done; the log says what would have been
	OutcomeStopped  = "stopped"   // the container was stopped
	OutcomeInactive = "cancelled" // the finding no longer held, or the container stopped, at the re-check
	OutcomeGone     = "gone"      // the container disappeared before it could be stopped
	OutcomeExempt   = "exempt"    // the container became exempt before the stop
)

// Event is one line of the audit log.
type Event = audit.Event

// Auditor records events.
type Auditor = audit.Auditor

// File appends events as JSON lines to a file.
type File = audit.File

// OpenFile opens (or creates) the audit file at path for appending.
func OpenFile(path string) (*File, error) { return audit.OpenFile(path) }
