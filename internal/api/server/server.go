// Package server is the agent's API: the live tick as JSON under
// /api/v1, usage reports, waste findings, container stops and the audit
// log, every call authenticated, rate-limited and audited. It mounts the
// console (internal/web), whose pages it lets in and answers through the
// same checks. The bodies it answers with are apitype's; the command line
// reads them with internal/api/client.
package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/waste"
	"github.com/gpumeter/gpumeter/internal/web"
)

// TickSource gives the latest tick; *sampler.Sampler is one.
type TickSource interface {
	Latest() *sampler.Tick
}

// Reports builds usage reports from the ledger; nil when the ledger is off.
type Reports interface {
	Report(ctx context.Context, r report.Request) (*report.Report, error)
}

// Waste gives the live waste findings; *waste.Live is one.
type Waste interface {
	Report() *waste.Report
}

// Stopper stops a container; *docker.Inventory is one. An error for a
// container that no longer exists wraps container.ErrNotFound.
type Stopper interface {
	Stop(ctx context.Context, id string, grace time.Duration) error
}

// Auditor keeps the audit log; *audit.Log is one. A call that did
// something is an action: Act returns once it is recorded, or with the
// error, and the handler waits for it. Refusals and reads are
// observations: Observe must not block, and may sum them.
type Auditor interface {
	Act(ctx context.Context, e audit.Event) error
	Observe(e audit.Event)
	Events(ctx context.Context, from, to time.Time, limit int) ([]audit.Event, bool, error)
}

// Limits bound what one call may take.
type Limits struct {
	MaxBodyBytes    int64
	MaxReportWindow time.Duration
	MaxReportRows   int
	// MaxAuditEvents is the most audit events one call returns.
	MaxAuditEvents int
}

// Config is what the API serves from and who it lets in.
type Config struct {
	Ticks   TickSource
	Reports Reports // nil: the ledger is off
	Waste   Waste   // nil: the live waste rules are off
	Stopper Stopper // nil: no Docker
	Audit   Auditor // nil: nothing is recorded (tests only)
	// Jobs is the GPU job queue; nil: the queue is off (queue.enabled).
	Jobs Jobs
	// Ranks gives a queued job's priority, position and estimated start;
	// nil: the job JSON shows them as null.
	Ranks Ranks
	// FairShare is the fair share of the queue; nil: it is off
	// (fairshare_off).
	FairShare FairShare
	// Nodes is the fleet's nodes (*run.Nodes); nil: the agent is not in
	// a fleet (fleet_off).
	Nodes Nodes
	// Forward is the client requests about another node's job go to that
	// node's agent with (see forward.go); nil: ForwardClient(nil).
	Forward *http.Client
	// History is the GPUs' figures over time; nil: not kept.
	History History
	// WhatIf replays the ledger's history and advises from it; nil: the
	// ledger is off.
	WhatIf WhatIf
	// Usage is the ledger's use per owner and hour, which the usage page
	// draws; nil: the ledger is off.
	Usage web.UsageSeries
	// Auth gives the current authenticator; it changes on a reload.
	Auth    func() *auth.Authenticator
	Limiter func() *auth.Limiter
	Limits  Limits
	Logger  *slog.Logger
	Now     func() time.Time
	// Node is the node the agent meters, named to callers in NodeHeader.
	Node string
	// SessionLifetime is how long a browser stays signed in
	// (api.session_lifetime); 0 is DefaultSessionLifetime.
	SessionLifetime time.Duration
}

// server is the API's handler.
type server struct {
	cfg Config
	mux *http.ServeMux
	// The whole-node views are the same for every caller until the next
	// tick, so each is encoded once a tick.
	gpusBody, containersBody tickBody
	stops                    stops
	// sessions are the signed-in browsers; they outlive reloads, which
	// change the authenticator they are checked against.
	sessions *auth.Sessions
}

// tickBody is a JSON body made from one tick, kept until the next.
type tickBody struct {
	mu   sync.Mutex
	tick *sampler.Tick
	body []byte
}

// get is the body for t, made by build when t is new. Callers that come
// while it is being made wait for it rather than make it again.
func (b *tickBody) get(t *sampler.Tick, build func() any) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tick != t {
		body, err := json.Marshal(build())
		if err != nil {
			// The views are plain structs: this cannot fail, but an
			// answer must still be JSON.
			body = []byte(`{"code":"internal_error","message":"could not encode the answer"}`)
		}
		b.tick, b.body = t, append(body, '\n')
	}
	return b.body
}

// route is one endpoint: what it does, in auth's terms, and its handler.
// Every /api/ route goes through guard, which authenticates, rate-limits,
// authorises the action and audits denials, so that no handler can forget
// to.
type route struct {
	method, pattern string
	act             auth.Action
	mutating        bool
	// bodyToken: the request may carry its bearer token in a JSON body
	// ({"token": …}) instead of the Authorization header.
	bodyToken bool
	h         func(w http.ResponseWriter, r *http.Request, c *call)
}

// call is one authenticated request on its way through a handler.
type call struct {
	id      auth.Identity
	ownOnly bool // the caller may see or touch only its own things
	source  string
	act     auth.Action
	// session is the session that authenticated the call, when a cookie
	// did.
	session auth.Session
	// observed says that the call's refusal is in the audit log already,
	// so that guard does not count it again as a read.
	observed bool
	// w sees the status a read is answered with.
	w statusWriter
}

// statusWriter remembers the status of the answer. It unwraps, so that
// http.ResponseController reaches the connection through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// New builds the API: /api/v1/*, /healthz, and the console mounted
// beside them.
func New(cfg Config) http.Handler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Limits.MaxBodyBytes <= 0 {
		cfg.Limits.MaxBodyBytes = 64 << 10
	}
	if cfg.Limits.MaxAuditEvents <= 0 {
		cfg.Limits.MaxAuditEvents = 10_000
	}
	// Zero report limits would refuse every report; the defaults are
	// api.max_report_window's and api.max_report_rows'.
	if cfg.Limits.MaxReportWindow <= 0 {
		cfg.Limits.MaxReportWindow = 400 * 24 * time.Hour
	}
	if cfg.Limits.MaxReportRows <= 0 {
		cfg.Limits.MaxReportRows = 10_000
	}
	s := &server{cfg: cfg, mux: http.NewServeMux(), sessions: auth.NewSessions(cmp.Or(cfg.SessionLifetime, DefaultSessionLifetime), cfg.Now)}
	routes := []route{
		{method: "GET", pattern: "/api/v1/whoami", act: auth.ActWhoami, h: s.whoami},
		{method: "GET", pattern: "/api/v1/gpus", act: auth.ActGPUsRead, h: s.gpus},
		{method: "GET", pattern: "/api/v1/containers", act: auth.ActContainersRead, h: s.containers},
		{method: "POST", pattern: "/api/v1/containers/{id}/stop", act: auth.ActContainerStop, mutating: true, h: s.stop},
		{method: "GET", pattern: "/api/v1/usage", act: auth.ActUsageRead, h: s.usage("")},
		{method: "GET", pattern: "/api/v1/usage.csv", act: auth.ActUsageRead, h: s.usage("csv")},
		{method: "GET", pattern: "/api/v1/waste", act: auth.ActWasteRead, h: s.waste},
		{method: "GET", pattern: "/api/v1/audit", act: auth.ActAuditRead, h: s.audit},
		{method: "GET", pattern: "/api/v1/snapshot", act: auth.ActGPUsRead, h: s.snapshot},
	}
	routes = append(routes, s.jobRoutes()...)
	routes = append(routes, s.arrayRoutes()...)
	routes = append(routes, s.fairShareRoutes()...)
	routes = append(routes, s.nodeRoutes()...)
	routes = append(routes, s.historyRoutes()...)
	routes = append(routes, s.whatifRoutes()...)
	routes = append(routes, s.sessionRoutes()...)
	allow := map[string][]string{}
	for _, rt := range routes {
		s.mux.Handle(rt.method+" "+rt.pattern, s.guard(rt))
		allow[rt.pattern] = append(allow[rt.pattern], rt.method)
	}
	s.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		// A path some route serves was asked with the wrong method.
		for _, m := range []string{"GET", "POST", "DELETE"} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := s.mux.Handler(probe); pattern != "/api/" {
				methods := allow[strings.TrimPrefix(pattern, m+" ")]
				if methods[0] == "GET" {
					methods = append(methods, "HEAD")
				}
				w.Header().Set("Allow", strings.Join(methods, ", "))
				writeError(w, http.StatusMethodNotAllowed, apitype.CodeMethodNotAllowed, r.Method+" "+r.URL.Path+" is not allowed: use "+strings.Join(methods, " or "))
				return
			}
		}
		writeError(w, http.StatusNotFound, apitype.CodeNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if cfg.Ticks.Latest() == nil {
			writeError(w, http.StatusServiceUnavailable, apitype.CodeNoSample, "no sample taken yet")
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	// The console's pages, sign-in form and static files.
	s.mountConsole()
	return s
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	s.mux.ServeHTTP(w, r)
}

// guard is the one place a request is let in or turned away.
func (s *server) guard(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{source: source(r), act: rt.act}
		if rt.bodyToken && !s.tokenFromBody(w, r, c) {
			return
		}
		id, ses, authErr := s.authenticate(r)
		c.id, c.session = id, ses
		if ok, wait, _ := s.cfg.Limiter().Allow(limitKey(id, authErr, c.source), s.cfg.Now()); !ok {
			secs := max(1, int((wait+time.Second-1)/time.Second))
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			// Every refusal is observed; the audit log sums them per
			// source and minute, so that a flood does not flood it.
			s.observe(r, c, "", http.StatusTooManyRequests, "rate limited")
			writeError(w, http.StatusTooManyRequests, apitype.CodeRateLimited, fmt.Sprintf("too many requests from %s; try again in %d s", describe(id, authErr, c.source), secs))
			return
		}
		if authErr != nil {
			var ae *auth.Error
			code, msg := apitype.CodeInternal, "authentication failed"
			if errors.As(authErr, &ae) {
				code, msg = ae.Code, ae.Msg
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpumeter"`)
			if code == auth.CodeSessionEnded {
				clearSessionCookie(w, r)
			}
			s.observe(r, c, "", http.StatusUnauthorized, code)
			writeError(w, http.StatusUnauthorized, code, msg)
			return
		}
		if id.Warning != "" {
			w.Header().Add(apitype.WarningHeader, id.Warning)
		}
		if s.cfg.Node != "" {
			w.Header().Set(apitype.NodeHeader, s.cfg.Node)
		}
		if !s.checkCSRF(w, r, c) {
			return
		}
		ownOnly, err := auth.Authorize(id, rt.act)
		if err != nil {
			s.forbid(w, r, c, "", err)
			return
		}
		c.ownOnly = ownOnly
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.Limits.MaxBodyBytes)
		}
		if rt.mutating {
			// A call that changes something audits itself: what it did as
			// an action, a refusal before it did anything as an
			// observation.
			rt.h(w, r, c)
			return
		}
		// A read is observed with the status it was answered with,
		// unless the handler observed its refusal itself.
		c.w.ResponseWriter = w
		// -1 is a body of unknown length, sent chunked.
		if r.ContentLength != 0 {
			writeError(&c.w, http.StatusBadRequest, apitype.CodeBadRequest, r.Method+" "+r.URL.Path+" takes no body")
		} else {
			rt.h(&c.w, r, c)
		}
		if !c.observed {
			target := r.Method + " " + r.URL.Path
			if r.URL.RawQuery != "" {
				target += "?" + r.URL.RawQuery
			}
			s.observe(r, c, target, cmp.Or(c.w.status, http.StatusOK), "")
		}
	})
}

// limitKey is whose allowance a request spends. Callers who did not
// prove who they are share nothing but their address, so they are
// limited by it; a session shares its token's allowance.
func limitKey(id auth.Identity, authErr error, src string) string {
	switch {
	case authErr != nil || id.Method == auth.MethodAnonymous:
		return "addr:" + hostOf(src)
	case id.Method == auth.MethodSession:
		return auth.MethodToken + ":" + id.Name
	}
	return id.Method + ":" + id.Name
}

// forbid refuses c with 403 and audits it.
func (s *server) forbid(w http.ResponseWriter, r *http.Request, c *call, target string, err error) {
	s.observe(r, c, target, http.StatusForbidden, err.Error())
	writeError(w, http.StatusForbidden, apitype.CodeForbidden, err.Error())
}

// event is the audit event of c answered with status.
func (s *server) event(r *http.Request, c *call, target string, status int, detail string) audit.Event {
	outcome := audit.OutcomeAllowed
	switch status {
	case http.StatusOK:
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests:
		outcome = audit.OutcomeDenied
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		outcome = apitype.OutcomeRejected
	default:
		outcome = apitype.OutcomeFailed
	}
	if target == "" {
		target = r.Method + " " + r.URL.Path
	}
	return audit.Event{
		Time: s.cfg.Now(), Kind: audit.KindAPI, Caller: c.id.Caller(), Role: string(c.id.Role),
		Source: c.source, Action: string(c.act), Target: target, Status: status, Outcome: outcome, Error: detail,
	}
}

// observe tells the audit log of a refusal, or of a call that read
// something or did nothing: it may be summed with others like it, and
// never holds up the answer.
func (s *server) observe(r *http.Request, c *call, target string, status int, detail string) {
	c.observed = true
	if s.cfg.Audit != nil {
		s.cfg.Audit.Observe(s.event(r, c, target, status, detail))
	}
}

// actTimeout bounds the audit write of an action.
const actTimeout = 30 * time.Second

// act records what a call did, and returns once it is recorded: the
// answer waits for its audit line. The write outlives a client that hangs
// up, since what was done was done.
func (s *server) act(r *http.Request, c *call, target string, status int, detail string) error {
	c.observed = true
	if s.cfg.Audit == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), actTimeout)
	defer cancel()
	err := s.cfg.Audit.Act(ctx, s.event(r, c, target, status, detail))
	if err != nil {
		s.cfg.Logger.Error("audit an action", "action", string(c.act), "target", target, "caller", c.id.Caller(), "err", err)
	}
	return err
}

// source is where r came from: the peer address, or the socket peer.
func source(r *http.Request) string {
	if uid, ok := auth.PeerUID(r.Context()); ok {
		return "unix uid " + strconv.Itoa(uid)
	}
	return r.RemoteAddr
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

func describe(id auth.Identity, authErr error, src string) string {
	if authErr == nil {
		return id.Caller()
	}
	return hostOf(src)
}

// owns says whether the caller of c may see something owned by user.
func (c *call) owns(user string) bool { return !c.ownOnly || user == c.id.User }

// ownerUser is the user an owner stands for: a container's user, or the
// host user itself.
func ownerUser(t *sampler.Tick, o container.Owner) string {
	switch o.Kind {
	case container.OwnerContainer:
		for i := range t.Containers {
			if t.Containers[i].ID == o.ID {
				return t.Containers[i].User
			}
		}
	case container.OwnerHost:
		return o.ID
	}
	return ""
}
