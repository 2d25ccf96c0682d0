package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

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
type Event struct {
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
}

// Auditor records events.
type Auditor interface {
	Audit(ctx context.Context, e Event) error
}

// File appends events as JSON lines to a file, one write per event, so
// that a crash loses at most the event being written.
type File struct {
	mu sync.Mutex
	f  *os.File
}

var _ Auditor = (*File)(nil)

// OpenFile opens (or creates) the audit file at path for appending.
func OpenFile(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open the audit log: %w", err)
	}
	return &File{f: f}, nil
}

// Audit appends e.
func (a *File) Audit(_ context.Context, e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write the audit log: %w", err)
	}
	return nil
}

// Close closes the file.
func (a *File) Close() error { return a.f.Close() }
