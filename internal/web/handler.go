package web

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// API is the API server as the console sees it. A page lets its reader in
// as the API lets a caller in, and it shows what the API would answer
// them, checked and shaped as the API checks and shapes it, so that no
// page shows what the API refuses. The console does not import the
// server: the server hands itself in as this when it mounts the console.
type API interface {
	// Admit finds who r comes from and spends one request of their rate
	// allowance, the one their API calls spend.
	Admit(r *http.Request) Admission
	// Observe tells the audit log of a page read or a refusal, as the API
	// tells it of a call.
	Observe(r *http.Request, c *Visitor, target string, status int, detail string)
	// ClearSession tells the browser to drop its session cookie.
	ClearSession(w http.ResponseWriter, r *http.Request)
	// UsageReport validates req, holds it to c's role and to the API's
	// limits, and builds the report, as GET /api/v1/usage does.
	UsageReport(ctx context.Context, c *Visitor, req *report.Request) (*report.Report, *UsageFault)
	// Job is the job as GET /api/v1/jobs shows it, with its rank.
	Job(j queue.Job) apitype.Job
	// GPUs is the tick's GPUs as GET /api/v1/gpus shows them to an admin.
	GPUs(t *sampler.Tick) apitype.GPUsResponse
	// UserOf is the user an owner of the tick's GPUs stands for (a
	// container's user, or the host user itself), which decides who may
	// see it.
	UserOf(t *sampler.Tick, ownerKind, owner string) string
	// HistoryWindows are the windows GET /api/v1/gpus/history knows.
	HistoryWindows() []HistoryWindow
	// History reads the GPUs' figures of [from, to) in w's steps. Its
	// error is ErrNoHistory when the agent keeps none, and wraps
	// ErrNoLedger when w reads the ledger and the ledger is off.
	History(ctx context.Context, w HistoryWindow, from, to time.Time) ([]apitype.GPUHistory, error)
}

// Admission is who a request comes from and whether it may go on.
type Admission struct {
	ID      auth.Identity
	Session auth.Session // the session, when a cookie decided
	AuthErr error        // why the request is not authenticated; nil when it is
	Source  string       // the peer address, or the socket peer
	// Limited says that the rate limit turns the request away; Wait is
	// how long until it would not.
	Limited bool
	Wait    time.Duration
	// Who names the requester in a refusal: their name, or their address
	// when they did not prove who they are.
	Who string
}

// Visitor is one reader let in to a page.
type Visitor struct {
	ID      auth.Identity
	OwnOnly bool // the reader may see only their own things
	Source  string
	Act     auth.Action
	// Session is the session that let the reader in, when a cookie did.
	Session auth.Session
}

// Owns says whether c may see something owned by user.
func (c *Visitor) Owns(user string) bool { return !c.OwnOnly || user == c.ID.User }

// UsageFault is why a usage report cannot be made as asked: an answer
// with status and message, or a denial.
type UsageFault struct {
	Status int
	Msg    string
	// Denied is set when the reader may not see what they asked for.
	Denied error
}

// HistoryWindow is one window of the GPU history: how far back, in what
// steps (StepName writes them as 10s, 5m or 1h), and whether memory holds
// it.
type HistoryWindow struct {
	Name     string
	Span     time.Duration
	Step     time.Duration
	StepName string
	Recent   bool
}

// ErrNoHistory is API.History's error when the agent keeps no GPU history.
var ErrNoHistory = errors.New("no GPU history is kept")

// ErrNoLedger is wrapped by API.History when the window reads the
// ledger and the ledger is off.
var ErrNoLedger = errors.New("the ledger is off")

// SignedOutCookie tells the next sign-in page that the browser has just
// signed out: the API's sign-out sets it, and the page drops it as it
// says so, so that what a reload shows does not hang on whether the
// page's script has run: a notice kept in the address, which only the
// script removed, came back on a reload made before it did.
const SignedOutCookie = "gpumeter_signed_out"

// TickSource gives the latest tick; *sampler.Sampler is one.
type TickSource interface {
	Latest() *sampler.Tick
}

// Reports builds usage reports from the ledger.
type Reports interface {
	Report(ctx context.Context, r report.Request) (*report.Report, error)
}

// Findings gives the live waste findings; *waste.Live is one.
type Findings interface {
	Report() *waste.Report
}

// Queue lists the GPU job queue's jobs.
type Queue interface {
	Jobs(ctx context.Context, f ledger.JobFilter) ([]queue.Job, error)
}

// AuditLog reads the audit log.
type AuditLog interface {
	Events(ctx context.Context, from, to time.Time, limit int) ([]audit.Event, bool, error)
}

// UsageSeries reads GPU use per owner and hour, which the usage page
// draws over its window; ledger.OwnerUsageReader is one.
type UsageSeries interface {
	UsageByOwner(ctx context.Context, from, to time.Time) ([]ledger.OwnerHour, error)
}

// Fleet reads the fleet's nodes from the ledger; *run.Nodes is one.
type Fleet interface {
	Nodes(ctx context.Context) ([]queue.NodeView, error)
}

// Config is what the console draws from and who lets its readers in.
type Config struct {
	API   API
	Ticks TickSource
	// Reports is nil when the ledger is off.
	Reports Reports
	// Waste is nil when the live waste rules are off.
	Waste Findings
	// Jobs is nil when the GPU job queue is off.
	Jobs Queue
	// Audit is nil when the audit log is off.
	Audit AuditLog
	// Usage is nil when the ledger is off.
	Usage UsageSeries
	// WhatIf replays the ledger's history and advises from it; nil when
	// the ledger is off.
	WhatIf WhatIfSource
	// Stops says that the agent manages containers (docker.enabled), so
	// that the waste page may offer to stop them.
	Stops bool
	// Nodes reads the fleet's nodes; nil when the agent is not in a
	// fleet (queue.fleet: false), and then the console has no nodes page
	// in its navigation.
	Nodes Fleet
	// MaxAuditEvents is the most audit events the API returns at once
	// (api.max_audit_events); the audit page asks for no more.
	MaxAuditEvents int
	Node           string
	Now            func() time.Time
	Logger         *slog.Logger
}

// handler is the console's pages on the mux they are mounted on.
type handler struct {
	cfg Config
	mux *http.ServeMux
}

// Mount puts the console on mux: the pages at /, /gpus, /usage, /waste,
// /jobs, /audit and /nodes, the sign-in form at /signin and the static files
// under /static/. The API server mounts it on its own mux, so that a
// path or method neither serves is answered as it would be by one. The
// templates are in the binary and a test renders every page, so that an
// error here cannot reach a running agent.
func Mount(mux *http.ServeMux, cfg Config) error {
	console, err := New()
	if err != nil {
		return err
	}
	s := &handler{cfg: cfg, mux: mux}
	s.pageRoutes(console)
	return nil
}
