package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/docker"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/units"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// Whoami is the body of /api/v1/whoami.
type Whoami struct {
	User   string `json:"user"`
	Role   string `json:"role"`
	Method string `json:"method"`
	Name   string `json:"name"`
}

func (s *server) whoami(w http.ResponseWriter, r *http.Request, c *call) {
	if !noParams(w, r) {
		return
	}
	writeJSON(w, Whoami{User: c.id.User, Role: string(c.id.Role), Method: c.id.Method, Name: c.id.Name})
}

// noParams answers 400 when r has query parameters an endpoint does not
// take, so that a filter the caller believes in is never ignored.
func noParams(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.RawQuery != "" {
		writeError(w, http.StatusBadRequest, CodeBadRequest, r.URL.Path+" takes no parameters")
		return false
	}
	return true
}

func (s *server) latest(w http.ResponseWriter, r *http.Request) *sampler.Tick {
	if !noParams(w, r) {
		return nil
	}
	t := s.cfg.Ticks.Latest()
	if t == nil {
		writeError(w, http.StatusServiceUnavailable, CodeNoSample, "no sample taken yet; try again in a second")
	}
	return t
}

func (s *server) gpus(w http.ResponseWriter, r *http.Request, c *call) {
	t := s.latest(w, r)
	if t == nil {
		return
	}
	if !c.ownOnly {
		writeBody(w, s.gpusBody.get(t, func() any { return GPUsFromTick(t) }))
		return
	}
	out := GPUsFromTick(t)
	filterGPUs(&out, t, c)
	writeJSON(w, out)
}

// filterGPUs keeps the GPUs' own figures, which say nothing of anyone,
// and the processes and owners that are the caller's.
func filterGPUs(out *GPUsResponse, t *sampler.Tick, c *call) {
	for i := range out.GPUs {
		g := &out.GPUs[i]
		procs := g.Processes[:0]
		for _, p := range g.Processes {
			if c.owns(ownerUser(t, container.Owner{Kind: kindOf(p.OwnerKind), ID: p.Owner})) {
				procs = append(procs, p)
			}
		}
		g.Processes = procs
		owners := g.Owners[:0]
		for _, o := range g.Owners {
			if c.owns(ownerUser(t, container.Owner{Kind: kindOf(o.OwnerKind), ID: o.Owner})) {
				owners = append(owners, o)
			}
		}
		g.Owners = owners
	}
}

func kindOf(s string) container.OwnerKind {
	for _, k := range []container.OwnerKind{container.OwnerContainer, container.OwnerHost} {
		if k.String() == s {
			return k
		}
	}
	return container.OwnerNone
}

func (s *server) containers(w http.ResponseWriter, r *http.Request, c *call) {
	t := s.latest(w, r)
	if t == nil {
		return
	}
	if !c.ownOnly {
		writeBody(w, s.containersBody.get(t, func() any { return ContainersFromTick(t) }))
		return
	}
	out := ContainersFromTick(t)
	{
		kept := out.Containers[:0]
		for _, ct := range out.Containers {
			// A container the inventory does not know is listed with the
			// placeholder user "unresolved": it is nobody's, even for a
			// user who happens to be called that.
			if ct.Resolved && c.owns(ct.User) {
				kept = append(kept, ct)
			}
		}
		out.Containers = kept
		users := out.HostUsers[:0]
		for _, h := range out.HostUsers {
			if c.owns(h.User) {
				users = append(users, h)
			}
		}
		out.HostUsers = users
		// Nobody owns an unresolved process, so no user sees it.
		out.Unresolved = []GPUShare{}
	}
	writeJSON(w, out)
}

// StopRequest is the body of POST /api/v1/containers/{id}/stop.
type StopRequest struct {
	// Timeout is how long Docker waits before it kills the container,
	// as a duration ("30s"); "" means 10s, as docker stop.
	Timeout string `json:"timeout"`
	// Reason is kept in the audit log.
	Reason string `json:"reason"`
}

// StopResponse is the answer to a stop.
type StopResponse struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Stopped bool   `json:"stopped"`
	// Grace is the timeout Docker was given; Seconds is how long the
	// stop took. A stop that took the whole grace found the container
	// still running when it ended, and Docker killed it.
	Grace   string  `json:"grace,omitempty"`
	Seconds float64 `json:"seconds"`
}

// Killed says whether the container outlived the grace period, so that
// Docker sent it SIGKILL: Docker answers as soon as the container has
// exited.
func (r StopResponse) Killed() bool {
	grace, err := time.ParseDuration(r.Grace)
	return err == nil && r.Seconds >= grace.Seconds()
}

// stopMargin is how much longer than its grace a stop's answer may take:
// after the grace Docker kills the container and waits for it to exit.
const stopMargin = time.Minute

// stops are the stops under way and the recent ones, until a tick taken
// after them shows the container as it is.
type stops struct {
	mu sync.Mutex
	m  map[string]stopState
}

type stopState struct {
	running bool      // a stop is under way
	at      time.Time // when it ended
}

// begin says why a stop of id may not start now, given the time of the
// tick that shows id running, or marks a stop of id under way.
func (s *stops) begin(id string, tick time.Time) (msg string, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]stopState{}
	}
	for k, st := range s.m {
		if !st.running && tick.After(st.at) { // the tick knows better now
			delete(s.m, k)
		}
	}
	if st, ok := s.m[id]; ok {
		if st.running {
			return "is being stopped by another call", true
		}
		return "was stopped at " + st.at.UTC().Format(time.RFC3339), true
	}
	s.m[id] = stopState{running: true}
	return "", false
}

// end records how a stop of id that begin let start ended.
func (s *stops) end(id string, stopped bool, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if stopped {
		s.m[id] = stopState{at: at}
	} else {
		delete(s.m, id)
	}
}

// ParseStop checks a stop request and gives its grace period.
func ParseStop(req StopRequest) (time.Duration, error) {
	grace := 10 * time.Second
	if req.Timeout != "" {
		d, err := units.ParseDuration(req.Timeout)
		if err != nil {
			return 0, fmt.Errorf("timeout: %w", err)
		}
		if d > 10*time.Minute {
			return 0, fmt.Errorf("timeout: %s is longer than 10m", units.FormatDuration(d))
		}
		grace = d
	}
	if n := utf8.RuneCountInString(req.Reason); n > 500 {
		return 0, fmt.Errorf("reason: %d characters, more than 500", n)
	}
	return grace, nil
}

// allowLong lets the answer to r take up to d from now, past the server's
// write timeout (api.read_timeout + 1m), for a call known to take longer:
// a stop with a long grace, and whatever else waits on something slow.
// Without it net/http closes the connection at the timeout and the client
// gets no answer at all, while the handler goes on. It never shortens the
// server's timeout.
func allowLong(w http.ResponseWriter, r *http.Request, d time.Duration) error {
	srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server)
	if !ok || srv.WriteTimeout <= 0 || srv.WriteTimeout >= d {
		return nil
	}
	return http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
}

func (s *server) stop(w http.ResponseWriter, r *http.Request, c *call) {
	// Until Docker is asked, nothing is done: a call turned away before
	// that is observed, as refusals are; what Docker did is an action.
	id := r.PathValue("id")
	if r.URL.RawQuery != "" {
		msg := r.URL.Path + " takes its options in a JSON body, not as parameters"
		s.observe(r, c, "container "+id, http.StatusBadRequest, msg)
		writeError(w, http.StatusBadRequest, CodeBadRequest, msg)
		return
	}
	var req StopRequest
	if status, err := decodeJSON(w, r, &req); err != nil {
		s.observe(r, c, "container "+id, status, err.Error())
		return
	}
	grace, err := ParseStop(req)
	if err != nil {
		s.observe(r, c, "container "+id, http.StatusBadRequest, err.Error())
		writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	t := s.cfg.Ticks.Latest()
	var found *container.Container
	if t != nil {
		for i := range t.Containers {
			ct := &t.Containers[i]
			if ct.ID == id || (len(id) >= 12 && len(ct.ID) > len(id) && ct.ID[:len(id)] == id) || ct.Name == id {
				found = &ct.Container
				break
			}
		}
	}
	// Another user's container is answered as a name nobody has: a 403
	// would tell the caller which names exist. The audit log keeps the
	// refusal for what it is.
	if found != nil && !c.owns(found.User) {
		s.observe(r, c, "container "+found.ID, http.StatusForbidden, auth.AuthorizeOwner(c.id, c.act, found.User).Error())
		writeError(w, http.StatusNotFound, CodeNotFound, "no container "+strconv.Quote(id)+" is known to the agent")
		return
	}
	if found == nil {
		s.observe(r, c, "container "+id, http.StatusNotFound, "no such container")
		writeError(w, http.StatusNotFound, CodeNotFound, "no container "+strconv.Quote(id)+" is known to the agent")
		return
	}
	target := "container " + found.ID + " (" + found.Name + ")"
	if !found.Running {
		s.observe(r, c, target, http.StatusConflict, "not running")
		writeError(w, http.StatusConflict, CodeConflict, "container "+found.Name+" is not running")
		return
	}
	if s.cfg.Stopper == nil {
		s.observe(r, c, target, http.StatusServiceUnavailable, "docker off")
		writeError(w, http.StatusServiceUnavailable, CodeDockerOff, "the agent does not manage containers here (docker.enabled: false)")
		return
	}
	// The tick still shows a container running until the next sample: a
	// second stop before then, or while one is under way, is a conflict,
	// not a second success.
	if msg, busy := s.stops.begin(found.ID, t.Time); busy {
		s.observe(r, c, target, http.StatusConflict, msg)
		writeError(w, http.StatusConflict, CodeConflict, "container "+found.Name+" "+msg)
		return
	}
	stopped := false
	defer func() { s.stops.end(found.ID, stopped, s.cfg.Now()) }()
	// The answer comes when Docker is done, which may be long after the
	// server's write timeout; and once begun, the stop goes on if the
	// client hangs up, so that what the audit log says is what happened.
	if err := allowLong(w, r, grace+stopMargin); err != nil {
		s.cfg.Logger.Warn("stop container: the answer may be cut off at the server's write timeout", "id", found.ID, "err", err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), grace+stopMargin)
	defer cancel()
	began := time.Now()
	err = s.cfg.Stopper.Stop(ctx, found.ID, grace)
	took := time.Since(began)
	if err != nil {
		status, code, msg := http.StatusBadGateway, CodeInternal, "docker could not stop the container; the agent's log says why"
		if errors.Is(err, docker.ErrNotFound) {
			status, code, msg = http.StatusNotFound, CodeNotFound, "container "+found.Name+" no longer exists"
		}
		s.cfg.Logger.Warn("stop container", "id", found.ID, "caller", c.id.Caller(), "err", err)
		_ = s.act(r, c, target, status, err.Error())
		writeError(w, status, code, msg)
		return
	}
	detail := ""
	if req.Reason != "" {
		detail = "reason: " + req.Reason
	}
	stopped = true
	// The container is stopped whether or not the line is written: the
	// answer says so, and a failed write is logged and counted.
	_ = s.act(r, c, target, http.StatusOK, detail)
	writeJSON(w, StopResponse{ID: found.ID, Name: found.Name, Stopped: true, Grace: grace.String(), Seconds: took.Seconds()})
}

func (s *server) usage(format string) func(w http.ResponseWriter, r *http.Request, c *call) {
	return func(w http.ResponseWriter, r *http.Request, c *call) {
		if s.cfg.Reports == nil {
			writeError(w, http.StatusServiceUnavailable, CodeLedgerOff, "the ledger is off (ledger.enabled: false), so there is no usage to report")
			return
		}
		q, err := query(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
			return
		}
		req, err := report.RequestFromQuery(q, units.ParseDuration)
		if err == nil {
			if format != "" {
				if req.Format != "" && req.Format != format {
					err = fmt.Errorf("format: %s serves %s only", r.URL.Path, format)
				}
				req.Format = format
			} else if req.Format == "" {
				req.Format = "json"
			}
		}
		now := s.cfg.Now()
		if err == nil {
			err = req.Validate(now)
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
			return
		}
		if c.ownOnly {
			if req.User != "" && req.User != c.id.User {
				s.forbid(w, r, c, "usage user="+req.User, auth.AuthorizeOwner(c.id, c.act, req.User))
				return
			}
			req.User = c.id.User
		}
		// The window as asked: its ends were rounded out to minutes.
		if span := req.Span(); span > s.cfg.Limits.MaxReportWindow {
			writeError(w, http.StatusBadRequest, CodeWindowTooLong, fmt.Sprintf("the window is %s long; the API reports at most %s at once (api.max_report_window): ask for shorter windows",
				units.FormatDuration(span), units.FormatDuration(s.cfg.Limits.MaxReportWindow)))
			return
		}
		rep, err := s.cfg.Reports.Report(r.Context(), req)
		if errors.Is(err, report.ErrInvalidCost) {
			writeError(w, http.StatusInternalServerError, "bad_config", "the agent's cost settings do not fit the GPUs in the ledger; the agent's log says which")
			return
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "ledger_error", "could not read the ledger; the agent's log says why")
			return
		}
		if n := len(rep.Rows); n > s.cfg.Limits.MaxReportRows {
			writeError(w, http.StatusBadRequest, CodeTooManyRows, fmt.Sprintf("the report has %d rows, more than the %d the API returns (api.max_report_rows): filter it or group by a coarser key", n, s.cfg.Limits.MaxReportRows))
			return
		}
		var buf bytes.Buffer
		switch req.Format {
		case "csv":
			w.Header().Set("Content-Type", "text/csv; charset=utf-8")
			err = rep.WriteCSV(&buf)
		case "focus":
			w.Header().Set("Content-Type", "text/csv; charset=utf-8")
			err = rep.WriteFOCUS(&buf)
		case "table":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			err = rep.WriteTable(&buf)
		default:
			w.Header().Set("Content-Type", "application/json")
			err = rep.WriteJSON(&buf)
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "render_error", "could not render the report")
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(buf.Bytes())
	}
}

func (s *server) waste(w http.ResponseWriter, r *http.Request, c *call) {
	if s.cfg.Waste == nil {
		writeError(w, http.StatusServiceUnavailable, CodeWasteOff, "the live waste rules are off (waste.enabled: false); `gpumeter waste` reads the ledger")
		return
	}
	if r.URL.RawQuery != "" {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "/api/v1/waste takes no parameters: it lists the live findings")
		return
	}
	rep := s.cfg.Waste.Report()
	if c.ownOnly {
		rep = rep.Only(func(f *waste.Finding) bool { return f.Owner != "" && c.owns(f.Owner) })
	}
	writeJSON(w, rep)
}

// AuditResponse is the body of /api/v1/audit.
type AuditResponse struct {
	From   time.Time     `json:"from"`
	To     time.Time     `json:"to"`
	Events []audit.Event `json:"events"`
	// Truncated says that more events fell in the window than limit: the
	// newest are returned.
	Truncated bool `json:"truncated"`
}

// AuditQuery is what /api/v1/audit is asked: a window and a limit.
type AuditQuery struct {
	From, To time.Time
	Limit    int
}

// ParseAuditQuery reads since (a duration back from to), from, to and
// limit; the default window is the last 24 hours and the default limit
// max.
func ParseAuditQuery(q url.Values, now time.Time, max int) (AuditQuery, error) {
	aq := AuditQuery{To: now, Limit: max}
	for k, v := range q {
		if len(v) != 1 {
			return aq, fmt.Errorf("%s: given %d times", k, len(v))
		}
	}
	var err error
	since := 24 * time.Hour
	for k, vs := range q {
		v := vs[0]
		switch k {
		case "since":
			if since, err = units.ParseDuration(v); err != nil || since == 0 {
				return aq, fmt.Errorf("since: %q is not a duration above 0 like 1h or 7d", v)
			}
		case "from":
			if aq.From, err = report.ParseTime(v); err != nil {
				return aq, fmt.Errorf("from: %w", err)
			}
		case "to":
			if aq.To, err = report.ParseTime(v); err != nil {
				return aq, fmt.Errorf("to: %w", err)
			}
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > max {
				return aq, fmt.Errorf("limit: %q is not a number from 1 to %d", v, max)
			}
			aq.Limit = n
		default:
			return aq, fmt.Errorf("%q is not a parameter of /api/v1/audit (since, from, to, limit)", k)
		}
	}
	if q.Has("since") && q.Has("from") {
		return aq, errors.New("since and from exclude each other")
	}
	if !q.Has("from") {
		aq.From = aq.To.Add(-since)
	}
	if !aq.From.Before(aq.To) {
		return aq, fmt.Errorf("from: %s is not before to %s", aq.From.Format(time.RFC3339), aq.To.Format(time.RFC3339))
	}
	return aq, nil
}

func (s *server) audit(w http.ResponseWriter, r *http.Request, c *call) {
	if s.cfg.Audit == nil {
		writeError(w, http.StatusServiceUnavailable, CodeLedgerOff, "the audit log is off")
		return
	}
	raw, err := query(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	q, err := ParseAuditQuery(raw, s.cfg.Now(), s.cfg.Limits.MaxAuditEvents)
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	events, truncated, err := s.cfg.Audit.Events(r.Context(), q.From, q.To, q.Limit)
	if err != nil {
		s.cfg.Logger.Warn("read the audit log", "err", err)
		writeError(w, http.StatusInternalServerError, "audit_error", "could not read the audit log; the agent's log says why")
		return
	}
	if events == nil {
		events = []audit.Event{}
	}
	writeJSON(w, AuditResponse{From: q.From.UTC(), To: q.To.UTC(), Events: events, Truncated: truncated})
}
