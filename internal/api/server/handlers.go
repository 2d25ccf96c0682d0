package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/units"
	"github.com/gpumeter/gpumeter/internal/waste"
)

func (s *server) whoami(w http.ResponseWriter, r *http.Request, c *call) {
	if !noParams(w, r) {
		return
	}
	writeJSON(w, apitype.Whoami{User: c.id.User, Role: string(c.id.Role), Method: c.id.Method, Name: c.id.Name})
}

// noParams answers 400 when r has query parameters an endpoint does not
// take, so that a filter the caller believes in is never ignored.
func noParams(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.RawQuery != "" {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, r.URL.Path+" takes no parameters")
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
		writeError(w, http.StatusServiceUnavailable, apitype.CodeNoSample, "no sample taken yet; try again in a second")
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
func filterGPUs(out *apitype.GPUsResponse, t *sampler.Tick, c *call) {
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
	filterContainers(&out, c)
	writeJSON(w, out)
}

// filterContainers keeps the containers and host users that are the
// caller's.
func filterContainers(out *apitype.ContainersResponse, c *call) {
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
	out.Unresolved = []apitype.GPUShare{}
}

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
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, msg)
		return
	}
	var req apitype.StopRequest
	if status, err := decodeJSON(w, r, &req); err != nil {
		s.observe(r, c, "container "+id, status, err.Error())
		return
	}
	grace, err := apitype.ParseStop(req)
	if err != nil {
		s.observe(r, c, "container "+id, http.StatusBadRequest, err.Error())
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
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
		writeError(w, http.StatusNotFound, apitype.CodeNotFound, "no container "+strconv.Quote(id)+" is known to the agent")
		return
	}
	if found == nil {
		s.observe(r, c, "container "+id, http.StatusNotFound, "no such container")
		writeError(w, http.StatusNotFound, apitype.CodeNotFound, "no container "+strconv.Quote(id)+" is known to the agent")
		return
	}
	target := "container " + found.ID + " (" + found.Name + ")"
	if !found.Running {
		s.observe(r, c, target, http.StatusConflict, "not running")
		writeError(w, http.StatusConflict, apitype.CodeConflict, "container "+found.Name+" is not running")
		return
	}
	if s.cfg.Stopper == nil {
		s.observe(r, c, target, http.StatusServiceUnavailable, "docker off")
		writeError(w, http.StatusServiceUnavailable, apitype.CodeDockerOff, "the agent does not manage containers here (docker.enabled: false)")
		return
	}
	// The tick still shows a container running until the next sample: a
	// second stop before then, or while one is under way, is a conflict,
	// not a second success.
	if msg, busy := s.stops.begin(found.ID, t.Time); busy {
		s.observe(r, c, target, http.StatusConflict, msg)
		writeError(w, http.StatusConflict, apitype.CodeConflict, "container "+found.Name+" "+msg)
		return
	}
	stopped := false
	defer func() { s.stops.end(found.ID, stopped, s.cfg.Now()) }()
	// The answer comes when Docker is done, which may be long after the
	// server's write timeout; and once begun, the stop goes on if the
	// client hangs up, so that what the audit log says is what happened.
	if err := allowLong(w, r, grace+apitype.StopMargin); err != nil {
		s.cfg.Logger.Warn("stop container: the answer may be cut off at the server's write timeout", "id", found.ID, "err", err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), grace+apitype.StopMargin)
	defer cancel()
	began := time.Now()
	err = s.cfg.Stopper.Stop(ctx, found.ID, grace)
	took := time.Since(began)
	if err != nil {
		status, code, msg := http.StatusBadGateway, apitype.CodeInternal, "docker could not stop the container; the agent's log says why"
		if errors.Is(err, container.ErrNotFound) {
			status, code, msg = http.StatusNotFound, apitype.CodeNotFound, "container "+found.Name+" no longer exists"
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
	writeJSON(w, apitype.StopResponse{ID: found.ID, Name: found.Name, Stopped: true, Grace: grace.String(), Seconds: took.Seconds()})
}

func (s *server) usage(format string) func(w http.ResponseWriter, r *http.Request, c *call) {
	return func(w http.ResponseWriter, r *http.Request, c *call) {
		if s.cfg.Reports == nil {
			writeError(w, http.StatusServiceUnavailable, apitype.CodeLedgerOff, "the ledger is off (ledger.enabled: false), so there is no usage to report")
			return
		}
		q, err := apitype.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
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
		if err != nil {
			writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
			return
		}
		rep, fault := s.usageReport(r.Context(), c, &req)
		if fault != nil {
			if fault.denied != nil {
				s.forbid(w, r, c, fault.target, fault.denied)
				return
			}
			writeError(w, fault.status, fault.code, fault.msg)
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
			// Indented, as `gpumeter report --format json` prints it.
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(&buf)
			enc.SetIndent("", "  ")
			err = enc.Encode(UsageFromReport(rep))
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "render_error", "could not render the report")
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(buf.Bytes())
	}
}

// usageFault is why a usage report cannot be made as asked: an answer
// with status, code and message, or a denial, which is audited as one.
type usageFault struct {
	status    int
	code, msg string
	// denied is set when the caller may not see what they asked for;
	// target names it for the audit log.
	denied error
	target string
}

// usageReport validates req, holds it to the caller's role (a user sees
// only their own usage) and to the API's limits, and builds the report:
// the checks the API's usage endpoints and the console's usage page
// share, so that neither shows what the other refuses.
func (s *server) usageReport(ctx context.Context, c *call, req *report.Request) (*report.Report, *usageFault) {
	if err := req.Validate(s.cfg.Now()); err != nil {
		return nil, &usageFault{status: http.StatusBadRequest, code: apitype.CodeBadRequest, msg: err.Error()}
	}
	if c.ownOnly {
		if req.User != "" && req.User != c.id.User {
			return nil, &usageFault{status: http.StatusForbidden, code: apitype.CodeForbidden,
				denied: auth.AuthorizeOwner(c.id, c.act, req.User), target: "usage user=" + req.User}
		}
		req.User = c.id.User
	}
	// The window as asked: its ends were rounded out to minutes.
	if span := req.Span(); span > s.cfg.Limits.MaxReportWindow {
		return nil, &usageFault{status: http.StatusBadRequest, code: apitype.CodeWindowTooLong,
			msg: fmt.Sprintf("the window is %s long; the API reports at most %s at once (api.max_report_window): ask for shorter windows",
				units.FormatDuration(span), units.FormatDuration(s.cfg.Limits.MaxReportWindow))}
	}
	rep, err := s.cfg.Reports.Report(ctx, *req)
	if errors.Is(err, cost.ErrInvalidCost) {
		return nil, &usageFault{status: http.StatusInternalServerError, code: "bad_config",
			msg: "the agent's cost settings do not fit the GPUs in the ledger; the agent's log says which"}
	}
	if err != nil {
		return nil, &usageFault{status: http.StatusInternalServerError, code: "ledger_error", msg: "could not read the ledger; the agent's log says why"}
	}
	if n := len(rep.Rows); n > s.cfg.Limits.MaxReportRows {
		return nil, &usageFault{status: http.StatusBadRequest, code: apitype.CodeTooManyRows,
			msg: fmt.Sprintf("the report has %d rows, more than the %d the API returns (api.max_report_rows): filter it or group by a coarser key", n, s.cfg.Limits.MaxReportRows)}
	}
	return rep, nil
}

func (s *server) waste(w http.ResponseWriter, r *http.Request, c *call) {
	if s.cfg.Waste == nil {
		writeError(w, http.StatusServiceUnavailable, apitype.CodeWasteOff, "the live waste rules are off (waste.enabled: false); `gpumeter waste` reads the ledger")
		return
	}
	if r.URL.RawQuery != "" {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, "/api/v1/waste takes no parameters: it lists the live findings")
		return
	}
	writeJSON(w, WasteFromReport(filterWaste(s.cfg.Waste.Report(), c)))
}

// filterWaste keeps the findings that are the caller's: a finding of no
// known owner is nobody's.
func filterWaste(rep *waste.Report, c *call) *waste.Report {
	if !c.ownOnly {
		return rep
	}
	return rep.Only(func(f *waste.Finding) bool { return f.Owner != "" && c.owns(f.Owner) })
}

func (s *server) audit(w http.ResponseWriter, r *http.Request, c *call) {
	if s.cfg.Audit == nil {
		writeError(w, http.StatusServiceUnavailable, apitype.CodeLedgerOff, "the audit log is off")
		return
	}
	raw, err := apitype.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
		return
	}
	q, err := apitype.ParseAuditQuery(raw, s.cfg.Now(), s.cfg.Limits.MaxAuditEvents)
	if err != nil {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
		return
	}
	events, truncated, err := s.cfg.Audit.Events(r.Context(), q.From, q.To, q.Limit)
	if err != nil {
		s.cfg.Logger.Warn("read the audit log", "err", err)
		writeError(w, http.StatusInternalServerError, "audit_error", "could not read the audit log; the agent's log says why")
		return
	}
	writeJSON(w, apitype.AuditResponse{From: q.From.UTC(), To: q.To.UTC(), Events: AuditFromLog(events), Truncated: truncated})
}
