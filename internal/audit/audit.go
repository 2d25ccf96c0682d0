// Package audit is the audit log: what the waste policy did to containers
// and which API calls changed something or were turned away, with who
// asked, from where and what came of it. Events go to a JSON lines file
// and, when there is one, to a Store (the ledger, which imports this
// package for the event type; this package imports nothing of ours).
package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Kinds of event besides the policy's (notify, warn, stop), which are
// defined in internal/policy.
const (
	KindAPI    = "api"    // an API call
	KindConfig = "config" // the config reloaded, or a reload refused
)

// Outcomes of an API call.
const (
	OutcomeAllowed = "allowed"
	OutcomeDenied  = "denied"
	// OutcomeRejected is a malformed call; OutcomeFailed one that was
	// allowed but could not be done.
	OutcomeRejected = "rejected"
	OutcomeFailed   = "failed"
	// OutcomeDropped marks the summary written in place of events the
	// queue had no room for; its Action is ActionDropped.
	OutcomeDropped = "dropped"
)

// ActionDropped is the action of the summary of dropped events.
const ActionDropped = "audit.dropped"

// Event is one line of the audit log. Policy events fill Rule through
// Attempts; API events fill Caller through Status.
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
	// over the window that begins at Time (see Log.Observe). An event
	// without one stands for itself, so that the calls of a window are
	// the events plus the counts. The one event of a bulk cancel (action
	// job.cancel_bulk) is one call, and its Count the jobs it cancelled.
	Count int64 `json:"count,omitempty"`
}

// Filter selects the events with From <= Time < To, by the exact time
// (not truncated to the minute, as the ledger's usage filter is); a zero
// From or To leaves that end open. A Node other than "" keeps that node's
// events only.
type Filter struct {
	From, To time.Time
	Node     string
}

// Store keeps audit events besides the file: the ledger, whose backends
// implement it (see ledger.Ledger).
type Store interface {
	// Audit adds events atomically.
	Audit(ctx context.Context, events []Event) error
	// AuditEvents returns the events f selects, oldest first.
	AuditEvents(ctx context.Context, f Filter) ([]Event, error)
	// AuditNewest returns the newest n (n > 0) events f selects, oldest
	// first, and whether f selects more, without reading the rest.
	AuditNewest(ctx context.Context, f Filter, n int) ([]Event, bool, error)
}

// File appends events as JSON lines to a file, one write per event, so
// that a crash loses at most the event being written.
type File struct {
	path   string
	mu     sync.Mutex
	f      *os.File
	secure func(*os.File, string) error // see Secure
}

// OpenFile opens the audit file at path for appending, creating it
// readable by its owner only, since events name users. An existing file
// keeps the mode it has.
func OpenFile(path string) (*File, error) {
	f, err := openAppend(path)
	if err != nil {
		return nil, fmt.Errorf("open the audit log: %w", err)
	}
	return &File{path: path, f: f}, nil
}

// openAppend opens path for appending without following a symbolic link:
// with write access to the directory, anyone could otherwise have a root
// agent append to any file.
func openAppend(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: refusing to follow it (whoever made it could have the agent write to any file); remove it", path)
	}
	return f, err
}

// Secure calls fn on the open file, for the caller to give it the mode and
// group it should have; Reopen does it again for each new file.
func (a *File) Secure(fn func(*os.File, string) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.secure = fn
	return fn(a.f, a.path)
}

// Path is the file's path.
func (a *File) Path() string { return a.path }

// Audit appends e.
func (a *File) Audit(_ context.Context, e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("audit event: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write the audit log: %w", err)
	}
	return nil
}

// Sync flushes what was appended to the disk.
func (a *File) Sync() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.f.Sync(); err != nil {
		return fmt.Errorf("sync the audit log: %w", err)
	}
	return nil
}

// Reopen opens the path again and writes there from now on, so that a
// log rotated by renaming (logrotate without copytruncate) is followed
// after a SIGHUP. When the path cannot be opened the old file is kept.
func (a *File) Reopen() error {
	f, err := openAppend(a.path)
	if err != nil {
		return fmt.Errorf("reopen the audit log: %w", err)
	}
	a.mu.Lock()
	if a.secure != nil {
		if err := a.secure(f, a.path); err != nil {
			a.mu.Unlock()
			f.Close()
			return fmt.Errorf("reopen the audit log: %w", err)
		}
	}
	old := a.f
	a.f = f
	a.mu.Unlock()
	return old.Close()
}

// Close closes the file.
func (a *File) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.f.Close()
}

// maxLine bounds one line of an audit file; File writes lines of a few
// hundred bytes.
const maxLine = 1 << 20

// ReadFile reads the events of the audit file at path with from <= Time <
// to, oldest first; a zero from or to leaves that end open. Every line must
// be one event: a line that is not is an error naming the file and the
// line, since an audit log that skips what it cannot read hides things.
func ReadFile(path string, from, to time.Time) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the audit log: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var out []Event
	n := 0
	for sc.Scan() {
		n++
		e, err := parseLine(sc.Bytes())
		if err != nil {
			return nil, fmt.Errorf("read the audit log %s: line %d: %w", path, n, err)
		}
		if (from.IsZero() || !e.Time.Before(from)) && (to.IsZero() || e.Time.Before(to)) {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("longer than %d bytes", maxLine)
		}
		return nil, fmt.Errorf("read the audit log %s: line %d: %w", path, n+1, err)
	}
	// Writers append concurrently, so the file is in time order only
	// nearly.
	slices.SortStableFunc(out, func(a, b Event) int { return a.Time.Compare(b.Time) })
	return out, nil
}

func parseLine(line []byte) (Event, error) {
	var e Event
	// A JSON null would decode to the zero Event without complaint.
	if t := bytes.TrimSpace(line); len(t) == 0 || t[0] != '{' {
		return e, errors.New("not a JSON object")
	}
	if err := json.Unmarshal(line, &e); err != nil {
		return e, err
	}
	if e.Time.IsZero() {
		return e, errors.New("no time")
	}
	return e, nil
}
