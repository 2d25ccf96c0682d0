package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/run"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/units"
)

// Jobs is the GPU job queue; *run.Queue is one. Its errors say what the
// API answers: a *spec.Refusal or a *run.BadRequest is a 400, an error
// wrapping ledger.ErrJobNotFound a 404, a *run.StateError a 409. Every
// action writes the audit event it is given in the job's own transaction.
type Jobs interface {
	Submit(ctx context.Context, s run.Submission) (queue.Job, error)
	Job(ctx context.Context, id string) (queue.Job, error)
	Jobs(ctx context.Context, f ledger.JobFilter) ([]queue.Job, error)
	CountJobs(ctx context.Context, f ledger.JobFilter) (int, error)
	Cancel(ctx context.Context, id string, ev audit.Event) (queue.Job, error)
	CancelWait(ctx context.Context, id string, ev audit.Event) (queue.Job, error)
	CancelMatching(ctx context.Context, f run.CancelFilter, ev audit.Event) (run.BulkCancel, error)
	Hold(ctx context.Context, id string, ev audit.Event) (queue.Job, error)
	Release(ctx context.Context, id string, ev audit.Event) (queue.Job, error)
	// Requeue makes a new job from ended job id; admin says the caller
	// is an admin (for the new job's class and dependencies).
	Requeue(ctx context.Context, id string, admin bool, ev audit.Event) (queue.Job, error)
	Logs(ctx context.Context, id string, follow bool, w io.Writer) error
	// Array returns an array job's tasks; CancelArray, HoldArray and
	// ReleaseArray act on each that can take it (see arrays.go).
	Array(ctx context.Context, id string) ([]queue.Job, error)
	CancelArray(ctx context.Context, id string, ev audit.Event) ([]queue.Job, error)
	HoldArray(ctx context.Context, id string, ev audit.Event) ([]queue.Job, error)
	ReleaseArray(ctx context.Context, id string, ev audit.Event) ([]queue.Job, error)
}

var _ Jobs = (*run.Queue)(nil)

// Ranks is the scheduler's view of the queued jobs: a job's priority, its
// position among the queued (1 first) and when it is expected to start
// (zero when that is not known). ok is false for a job the scheduler has
// not ranked. It must not block: the job JSON asks it for every job.
type Ranks interface {
	Rank(id string) (priority float64, position int, estimated time.Time, ok bool)
}

// jobActionTimeout bounds a cancel with wait=1, which returns once the
// job's container has stopped: queue.stop_grace and then a kill.
const jobActionTimeout = 15 * time.Minute

// jobRoutes are the queue's endpoints.
func (s *server) jobRoutes() []route {
	return []route{
		{method: "POST", pattern: "/api/v1/jobs", act: auth.ActJobSubmit, mutating: true, h: s.submitJob},
		{method: "GET", pattern: "/api/v1/jobs", act: auth.ActJobRead, h: s.listJobs},
		{method: "GET", pattern: "/api/v1/jobs/{id}", act: auth.ActJobRead, h: s.getJob},
		{method: "POST", pattern: "/api/v1/jobs/cancel", act: auth.ActJobCancel, mutating: true, h: s.cancelJobs},
		{method: "POST", pattern: "/api/v1/jobs/{id}/cancel", act: auth.ActJobCancel, mutating: true, h: s.jobAction("cancel")},
		{method: "POST", pattern: "/api/v1/jobs/{id}/hold", act: auth.ActJobHold, mutating: true, h: s.jobAction("hold")},
		{method: "POST", pattern: "/api/v1/jobs/{id}/release", act: auth.ActJobHold, mutating: true, h: s.jobAction("release")},
		{method: "GET", pattern: "/api/v1/jobs/{id}/logs", act: auth.ActJobLogs, h: s.jobLogs},
		{method: "POST", pattern: "/api/v1/jobs/{id}/requeue", act: auth.ActJobRequeue, mutating: true, h: s.jobAction("requeue")},
	}
}

// queueOff answers a call to the queue on an agent that runs none.
func (s *server) queueOff(w http.ResponseWriter, r *http.Request, c *call, mutating bool) bool {
	if s.cfg.Jobs != nil {
		return false
	}
	if mutating {
		s.observe(r, c, "", http.StatusServiceUnavailable, "queue off")
	}
	writeError(w, http.StatusServiceUnavailable, apitype.CodeQueueOff, "the GPU job queue is off on this agent; an admin turns it on with queue.enabled: true")
	return true
}

func (s *server) submitJob(w http.ResponseWriter, r *http.Request, c *call) {
	if s.queueOff(w, r, c, true) {
		return
	}
	if r.URL.RawQuery != "" {
		msg := r.URL.Path + " takes the job in a JSON body, not as parameters"
		s.observe(r, c, "", http.StatusBadRequest, msg)
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, msg)
		return
	}
	var body apitype.JobRequest
	if status, err := decodeJSON(w, r, &body); err != nil {
		s.observe(r, c, "", status, err.Error())
		return
	}
	req, err := specRequest(body)
	if err != nil {
		s.observe(r, c, "", http.StatusBadRequest, err.Error())
		writeFieldError(w, err)
		return
	}
	array, err := arraySpec(body)
	if err != nil {
		s.observe(r, c, "", http.StatusBadRequest, err.Error())
		writeFieldError(w, err)
		return
	}
	user := c.id.User
	if body.AsUser != "" {
		// The kernel vouches for root on the socket; a token's holder
		// could name anyone.
		if uid, ok := auth.PeerUID(r.Context()); !ok || uid != 0 || c.id.Method != auth.MethodSocket {
			s.forbid(w, r, c, "", errors.New("as_user: only root on the agent's socket may submit for another user (sudo gpumeter submit --as USER); submit as yourself"))
			return
		}
		user = body.AsUser
	}
	ev := s.event(r, c, "", http.StatusOK, "")
	ev.Target = ""  // the job's id, once the store gives it one
	ev.Owner = user // the caller's, or as_user's
	// An admin may ask for the high class; the runtime adds the users of
	// queue.priority.high_users.
	high := c.id.Role == config.RoleAdmin
	job, err := s.cfg.Jobs.Submit(r.Context(), run.Submission{Request: req, User: user, Notify: body.Notify, High: high, Audit: ev,
		Admin: high, After: dependencies(body.After), RequeueFailed: body.Requeue, Array: array, Node: body.Node, Model: body.Model})
	if err != nil {
		s.jobError(w, r, c, "", err)
		return
	}
	c.observed = true
	if array != nil {
		s.writeSubmittedArray(w, r, c, job)
		return
	}
	writeJSON(w, s.jobJSON(job))
}

// specRequest turns the wire request into the queue's, parsing its sizes
// and durations; an error is an *apitype.FieldError.
func specRequest(b apitype.JobRequest) (spec.Request, error) {
	v, err := apitype.ParseJobRequest(b)
	if err != nil {
		return spec.Request{}, err
	}
	return spec.Request{
		GPUs: b.GPUs, GPUMemory: v.GPUMemory, Class: b.Priority,
		TimeLimit: v.TimeLimit, Image: b.Image, Name: b.Name,
		Env: b.Env, Mounts: b.Mounts, Workdir: b.Workdir,
		CPUs: b.CPUs, Memory: v.Memory, ShmSize: v.ShmSize, Pids: b.Pids,
		Publish: b.Publish, Labels: b.Labels, Command: b.Command,
		Preemptible: b.Preemptible,
	}, nil
}

// dependencies are the wire's dependencies as the queue's, unchecked:
// the queue checks their types and ids at submit.
func dependencies(in []apitype.Dependency) []queue.Dependency {
	var out []queue.Dependency
	for _, d := range in {
		out = append(out, queue.Dependency{Type: queue.DependencyType(d.Type), ID: d.ID})
	}
	return out
}

// writeErrorBody answers with an error that carries more than its code
// and message.
func writeErrorBody(w http.ResponseWriter, status int, e apitype.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(e)
}

func writeFieldError(w http.ResponseWriter, err error) {
	var fe *apitype.FieldError
	field := ""
	if errors.As(err, &fe) {
		field = fe.Field
	}
	writeErrorBody(w, http.StatusBadRequest, apitype.Error{Code: apitype.CodeBadRequest, Message: err.Error(), Field: field})
}

func (s *server) listJobs(w http.ResponseWriter, r *http.Request, c *call) {
	if s.queueOff(w, r, c, false) {
		return
	}
	q, err := apitype.ParseQuery(r.URL.RawQuery)
	if err == nil {
		err = apitype.OnlyParams(q, "all", "all_users", "state", "limit", "after", "array")
	}
	var page jobsPage
	if err == nil {
		page, err = parseJobsPage(q)
	}
	var arrayID string
	if err == nil {
		arrayID, err = arrayParam(q.Get("array"))
	}
	var all, allUsers bool
	if err == nil {
		all, err = apitype.FlagParam(q.Get("all"), "all")
	}
	if err == nil {
		allUsers, err = apitype.FlagParam(q.Get("all_users"), "all_users")
	}
	var states []queue.State
	if err == nil {
		states, err = parseJobStates(q["state"])
	}
	if err != nil {
		writeFieldError(w, err)
		return
	}
	user, err := jobsUser(c, allUsers)
	if err != nil {
		s.forbid(w, r, c, "jobs all_users=1", err)
		return
	}
	// An array's tasks are listed whatever their state, unless asked.
	f := ledger.JobFilter{User: user, States: states, IncludeEnded: all || arrayID != "", ArrayID: arrayID}
	jobs, pg, err := s.pageJobs(r.Context(), c, f, page)
	if err != nil {
		s.jobError(w, r, c, "", err)
		return
	}
	out := apitype.JobsResponse{Jobs: make([]apitype.Job, 0, len(jobs)), Page: &pg}
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, s.jobJSON(j))
	}
	writeJSON(w, out)
}

// jobsUser is the user whose jobs a listing for c shows: c's own, or
// with allUsers everyone's (""), which a user may not ask for.
func jobsUser(c *call, allUsers bool) (string, error) {
	if !allUsers {
		return c.id.User, nil
	}
	if c.ownOnly {
		return "", fmt.Errorf("all_users: %s, a %s, sees only their own jobs; admins and viewers list everyone's", c.id.User, c.id.Role)
	}
	return "", nil
}

func (s *server) getJob(w http.ResponseWriter, r *http.Request, c *call) {
	if s.queueOff(w, r, c, false) {
		return
	}
	if r.URL.RawQuery != "" {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, r.URL.Path+" takes no parameters")
		return
	}
	job, ok := s.ownJob(w, r, c)
	if ok {
		writeJSON(w, s.jobJSON(job))
	}
}

// ownJob finds the job the path names, as the caller may see it: another
// user's job is answered as one that does not exist, as containers are,
// so that nobody learns which ids are whose. The audit log keeps the
// refusal for what it is.
func (s *server) ownJob(w http.ResponseWriter, r *http.Request, c *call) (queue.Job, bool) {
	id := r.PathValue("id")
	job, err := s.cfg.Jobs.Job(r.Context(), id)
	if err != nil {
		if s.arrayNotJob(w, r, c, id, err) {
			return queue.Job{}, false
		}
		s.jobError(w, r, c, "job "+id, err)
		return queue.Job{}, false
	}
	if !c.owns(job.User) {
		s.observe(r, c, "job "+job.ID, http.StatusForbidden, auth.AuthorizeOwner(c.id, c.act, job.User).Error())
		writeError(w, http.StatusNotFound, apitype.CodeNotFound, "no job "+strconv.Quote(id)+" is known to the queue")
		return queue.Job{}, false
	}
	return job, true
}

// jobAction is cancel, hold or release of the job the path names.
func (s *server) jobAction(verb string) func(w http.ResponseWriter, r *http.Request, c *call) {
	return func(w http.ResponseWriter, r *http.Request, c *call) {
		if s.queueOff(w, r, c, true) {
			return
		}
		id := r.PathValue("id")
		wait, err := actionWait(verb, r.URL.RawQuery)
		if err != nil {
			msg := r.URL.Path + ": " + err.Error()
			s.observe(r, c, "job "+id, http.StatusBadRequest, msg)
			writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, msg)
			return
		}
		// The body, when there is one, is an empty object: room for
		// options later, and a typo in one is not silently dropped.
		var none struct{}
		if status, err := decodeJSON(w, r, &none); err != nil {
			s.observe(r, c, "job "+id, status, err.Error())
			return
		}
		job, ok := s.ownJob(w, r, c)
		if !ok {
			return
		}
		if verb == "cancel" && (job.State == queue.Starting || job.State == queue.Running) && s.forwards(r, job) {
			// Its container is on another node: that node's agent stops it.
			s.forward(w, r, c, job, []byte("{}"))
			return
		}
		ev := s.event(r, c, job.ID, http.StatusOK, "")
		ev.Owner = job.User
		// What is asked is done even if the caller hangs up; a cancel
		// with wait=1 waits for the container to stop, past the write
		// timeout.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), jobActionTimeout)
		defer cancel()
		switch {
		case verb == "cancel" && wait:
			if err := allowLong(w, r, jobActionTimeout); err != nil {
				s.cfg.Logger.Warn("cancel job: the answer may be cut off at the server's write timeout", "job", job.ID, "err", err)
			}
			job, err = s.cfg.Jobs.CancelWait(ctx, job.ID, ev)
		case verb == "cancel":
			job, err = s.cfg.Jobs.Cancel(ctx, job.ID, ev)
		case verb == "hold":
			job, err = s.cfg.Jobs.Hold(ctx, job.ID, ev)
		case verb == "requeue":
			job, err = s.cfg.Jobs.Requeue(ctx, job.ID, c.id.Role == config.RoleAdmin, ev)
		default:
			job, err = s.cfg.Jobs.Release(ctx, job.ID, ev)
		}
		if err != nil {
			s.jobError(w, r, c, "job "+id, err)
			return
		}
		c.observed = true
		writeJSON(w, s.jobJSON(job))
	}
}

// ledgerRetryAfter is the Retry-After of a 503 for a ledger that cannot
// be reached: about how long a database restart or a network blip takes.
const ledgerRetryAfter = 5 * time.Second

// jobError answers an error of the queue: a refusal and a bad request are
// observed with the field at fault, a failure is logged.
func (s *server) jobError(w http.ResponseWriter, r *http.Request, c *call, target string, err error) {
	var (
		refusal *spec.Refusal
		bad     *run.BadRequest
		state   *run.StateError
		race    *ledger.JobStateError
		fe      *apitype.FieldError
	)
	e := apitype.Error{Message: err.Error()}
	status := http.StatusBadRequest
	switch {
	case errors.As(err, &refusal) && refusal.Reason == spec.BadRequest:
		// Malformed rather than against a rule: no GPUs, no command.
		e.Code, e.Field = apitype.CodeBadRequest, refusal.Field
	case errors.As(err, &refusal):
		e.Code, e.Reason, e.Field = apitype.CodeRefused, string(refusal.Reason), refusal.Field
	case errors.As(err, &bad):
		e.Code, e.Field = apitype.CodeBadRequest, bad.Field
	case errors.As(err, &fe):
		e.Code, e.Field = apitype.CodeBadRequest, fe.Field
	case errors.Is(err, ledger.ErrJobNotFound):
		status, e.Code = http.StatusNotFound, apitype.CodeNotFound
		e.Message = "no job " + strconv.Quote(r.PathValue("id")) + " is known to the queue"
	case errors.As(err, &state):
		status, e.Code, e.State = http.StatusConflict, apitype.CodeConflict, string(state.State)
	case errors.As(err, &race):
		status, e.Code, e.State = http.StatusConflict, apitype.CodeConflict, string(race.Actual)
		e.Message = "job " + race.ID + " changed to " + string(race.Actual) + " meanwhile; look at it again"
	case errors.Is(err, run.ErrLogsRemoved):
		status, e.Code = http.StatusNotFound, apitype.CodeNotFound
	case errors.Is(err, ledger.ErrFull) || errors.Is(err, syscall.ENOSPC):
		status, e.Code = http.StatusInsufficientStorage, apitype.CodeStorageFull
		e.Message = "the agent's disk is full, so nothing was done (" + err.Error() + "); an admin frees space in the data directory, then try again"
		s.cfg.Logger.Error("job queue: disk full", "action", string(c.act), "target", target, "err", err)
	case errors.Is(err, ledger.ErrUnavailable):
		// Nothing was done: the caller may ask again once it is back.
		status, e.Code = http.StatusServiceUnavailable, apitype.CodeLedgerUnavailable
		e.Message = "the queue's database cannot be reached; nothing was done; try again in a few seconds"
		w.Header().Set("Retry-After", strconv.Itoa(int(ledgerRetryAfter/time.Second)))
		s.cfg.Logger.Warn("job queue: ledger unavailable", "action", string(c.act), "target", target, "caller", c.id.Caller(), "err", err)
	default:
		status, e.Code, e.Message = http.StatusInternalServerError, apitype.CodeInternal, "the queue could not do it; the agent's log says why"
		s.cfg.Logger.Error("job queue", "action", string(c.act), "target", target, "caller", c.id.Caller(), "err", err)
	}
	if !c.observed {
		s.observe(r, c, target, status, err.Error())
	}
	writeErrorBody(w, status, e)
}

// jobJSON is a job as the API shows it: lists are [] rather than null,
// times are UTC and unknown ones null, the environment only by its names,
// and the rank the scheduler gave it, where it gave one.
func (s *server) jobJSON(j queue.Job) apitype.Job {
	out := jobJSON(j)
	if j.Request == nil {
		s.cfg.Logger.Warn("job JSON: its stored request", "job", j.ID, "err", "the job store has none that reads")
	}
	if s.cfg.Ranks == nil {
		return out
	}
	prio, pos, est, ok := s.cfg.Ranks.Rank(j.ID)
	// The rank is a queued job's: the pass that started a job ranked it,
	// the passes since do not, so a started one shows none, as every
	// other running job.
	if !ok || j.State != queue.Queued {
		return out
	}
	out.Priority = &prio
	if pos > 0 && j.State == queue.Queued {
		out.Position = &pos
	}
	// A held job starts only when released, and a started one has no
	// estimate: the last pass's figure is for a queued job only.
	if j.State == queue.Queued && !j.Held {
		out.EstimatedStart = utcOrNil(est)
	}
	return out
}

// jobJSON is the one conversion of a job to the wire: the job's own
// fields, its request's GPU memory and class, and its placement.
func jobJSON(j queue.Job) apitype.Job {
	out := apitype.Job{
		ID: j.ID, Name: j.Name, User: j.User, Team: j.Team, State: string(j.State),
		Reason: string(j.Reason), ReasonText: j.ReasonText, GPUsRequested: j.GPUsRequested,
		GPUs: nonNil(j.GPUs), Image: j.Image, Command: nonNil(j.Command), EnvKeys: nonNil(j.EnvKeys),
		TimeLimit:   units.FormatDuration(j.TimeLimit),
		SubmittedAt: utcOrNil(j.SubmittedAt), StartedAt: utcOrNil(j.StartedAt), EndedAt: utcOrNil(j.EndedAt),
		ContainerID: j.ContainerID, Held: j.Held, Class: spec.ClassNormal,
		After: []apitype.Dependency{}, Attempt: 1, Requeues: j.Requeues,
	}
	if r := j.Request; r != nil {
		out.GPUMemoryRequested = r.GPUMemory
		if r.Class != "" {
			out.Class = string(r.Class)
		}
		if a := r.Array; a != nil {
			index := a.Index
			out.ArrayID, out.ArrayIndex, out.ArrayCount, out.ArrayMaxRunning = a.ID, &index, a.Count, a.MaxRunning
		}
		for _, d := range r.After {
			out.After = append(out.After, apitype.Dependency{Type: string(d.Type), ID: d.ID})
		}
		if r.Attempt > 0 {
			out.Attempt = r.Attempt
		}
		out.RequeueOf, out.Preemptible = r.RequeueOf, r.Preemptible
		out.NodeConstraint, out.ModelConstraint = r.Node, r.Model
	}
	out.Node = j.Node
	if j.ExitCode != nil {
		code := *j.ExitCode
		out.ExitCode = &code
	}
	out.Placement = placementJSON(j.Placement)
	return out
}

// placementJSON is a placement record on the wire; nil for none.
func placementJSON(p *queue.PlacementRecord) *apitype.Placement {
	if p == nil {
		return nil
	}
	out := &apitype.Placement{Policy: string(p.Policy)}
	if p.Candidates != nil {
		out.Candidates = make([]apitype.PlacementCandidate, 0, len(p.Candidates))
	}
	for _, c := range p.Candidates {
		out.Candidates = append(out.Candidates, apitype.PlacementCandidate{UUID: c.UUID, Index: c.Index, Score: c.Score, Util: c.Util, Chosen: c.Chosen, Node: c.Node})
	}
	for _, n := range p.Nodes {
		out.Nodes = append(out.Nodes, apitype.PlacementNode{Node: n.Node, Score: n.Score, Util: n.Util, Chosen: n.Chosen})
	}
	return out
}

// parseJobStates reads the states of ?state=, given repeated or
// comma-separated.
func parseJobStates(values []string) ([]queue.State, error) {
	states, err := queue.ParseStates(values)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	return states, nil
}

func nonNil(s []string) []string {
	return append(make([]string, 0, len(s)), s...)
}

func utcOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
