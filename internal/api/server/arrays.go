package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// arrayRoutes are the endpoints of array jobs. An array's own id is no
// job's: GET /api/v1/jobs/{id} answers 404 for it, saying where the
// array is, and GET /api/v1/jobs?array=ID lists its tasks as jobs.
func (s *server) arrayRoutes() []route {
	return []route{
		{method: "GET", pattern: "/api/v1/arrays/{id}", act: auth.ActJobRead, h: s.getArray},
		{method: "POST", pattern: "/api/v1/arrays/{id}/cancel", act: auth.ActJobCancel, mutating: true, h: s.arrayAction("cancel")},
		{method: "POST", pattern: "/api/v1/arrays/{id}/hold", act: auth.ActJobHold, mutating: true, h: s.arrayAction("hold")},
		{method: "POST", pattern: "/api/v1/arrays/{id}/release", act: auth.ActJobHold, mutating: true, h: s.arrayAction("release")},
	}
}

// arraySpec reads a submission's "array"; nil for a job of its own.
func arraySpec(b apitype.JobRequest) (*queue.ArraySpec, error) {
	if b.Array == "" {
		return nil, nil
	}
	a, err := queue.ParseArray(b.Array)
	if err != nil {
		return nil, &apitype.FieldError{Field: "array", Msg: err.Error()}
	}
	return &a, nil
}

// arrayParam reads GET /api/v1/jobs' array parameter: an array's id.
func arrayParam(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	if _, ok := ledger.JobSeq(v); !ok {
		return "", &apitype.FieldError{Field: "array", Msg: strconv.Quote(v) + " is not an array job's id, such as j-000123"}
	}
	if _, _, task := ledger.SplitArrayTaskID(v); task {
		return "", &apitype.FieldError{Field: "array", Msg: strconv.Quote(v) + " is a task's id; give its array's, such as j-000123"}
	}
	return v, nil
}

// arrayJSON is an array job's summary and its tasks.
func (s *server) arrayJSON(tasks []queue.Job) apitype.ArrayJob {
	out := apitype.ArrayJob{States: map[string]int{}, Tasks: make([]apitype.Job, 0, len(tasks))}
	indices := make([]int, 0, len(tasks))
	for _, t := range tasks {
		out.Tasks = append(out.Tasks, s.jobJSON(t))
		out.States[string(t.State)]++
		out.User = t.User
		if t.Request == nil || t.Request.Array == nil {
			continue // a damaged row, which jobJSON has logged
		}
		a := t.Request.Array
		out.ID, out.ArrayCount, out.ArrayMaxRunning = a.ID, a.Count, a.MaxRunning
		indices = append(indices, a.Index)
	}
	out.Array = queue.FormatArray(indices, out.ArrayMaxRunning)
	return out
}

// ownArray finds the array the path names as the caller may see it:
// another user's is answered as one that does not exist, as ownJob does.
func (s *server) ownArray(w http.ResponseWriter, r *http.Request, c *call) ([]queue.Job, bool) {
	id := r.PathValue("id")
	tasks, err := s.cfg.Jobs.Array(r.Context(), id)
	if err != nil {
		s.arrayError(w, r, c, id, err)
		return nil, false
	}
	if !c.owns(tasks[0].User) {
		s.observe(r, c, "array "+id, http.StatusForbidden, auth.AuthorizeOwner(c.id, c.act, tasks[0].User).Error())
		writeError(w, http.StatusNotFound, apitype.CodeNotFound, "no array job "+strconv.Quote(id)+" is known to the queue")
		return nil, false
	}
	return tasks, true
}

func (s *server) arrayError(w http.ResponseWriter, r *http.Request, c *call, id string, err error) {
	if errors.Is(err, ledger.ErrJobNotFound) {
		if !c.observed {
			s.observe(r, c, "array "+id, http.StatusNotFound, err.Error())
		}
		writeError(w, http.StatusNotFound, apitype.CodeNotFound, "no array job "+strconv.Quote(id)+" is known to the queue")
		return
	}
	s.jobError(w, r, c, "array "+id, err)
}

func (s *server) getArray(w http.ResponseWriter, r *http.Request, c *call) {
	if s.queueOff(w, r, c, false) {
		return
	}
	if r.URL.RawQuery != "" {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, r.URL.Path+" takes no parameters")
		return
	}
	if tasks, ok := s.ownArray(w, r, c); ok {
		writeJSON(w, s.arrayJSON(tasks))
	}
}

// arrayAction is cancel, hold or release of every task of the array the
// path names that can take it; the answer is the array after.
func (s *server) arrayAction(verb string) func(w http.ResponseWriter, r *http.Request, c *call) {
	return func(w http.ResponseWriter, r *http.Request, c *call) {
		if s.queueOff(w, r, c, true) {
			return
		}
		id := r.PathValue("id")
		if r.URL.RawQuery != "" {
			msg := r.URL.Path + " takes no parameters"
			s.observe(r, c, "array "+id, http.StatusBadRequest, msg)
			writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, msg)
			return
		}
		var none struct{}
		if status, err := decodeJSON(w, r, &none); err != nil {
			s.observe(r, c, "array "+id, status, err.Error())
			return
		}
		tasks, ok := s.ownArray(w, r, c)
		if !ok {
			return
		}
		ev := s.event(r, c, id, http.StatusOK, "")
		ev.Owner = tasks[0].User
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), jobActionTimeout)
		defer cancel()
		var err error
		switch verb {
		case "cancel":
			if err := allowLong(w, r, jobActionTimeout); err != nil {
				s.cfg.Logger.Warn("cancel array: the answer may be cut off at the server's write timeout", "array", id, "err", err)
			}
			tasks, err = s.cfg.Jobs.CancelArray(ctx, id, ev)
		case "hold":
			tasks, err = s.cfg.Jobs.HoldArray(ctx, id, ev)
		default:
			tasks, err = s.cfg.Jobs.ReleaseArray(ctx, id, ev)
		}
		if err != nil {
			s.arrayError(w, r, c, id, err)
			return
		}
		c.observed = true
		writeJSON(w, s.arrayJSON(tasks))
	}
}

// arrayNotJob answers a job path that names an array the caller may see
// with a 404 that says where the array is, and reports whether it did.
func (s *server) arrayNotJob(w http.ResponseWriter, r *http.Request, c *call, id string, err error) bool {
	if !errors.Is(err, ledger.ErrJobNotFound) {
		return false
	}
	if _, aerr := arrayParam(id); aerr != nil {
		return false
	}
	tasks, aerr := s.cfg.Jobs.Array(r.Context(), id)
	if aerr != nil || !c.owns(tasks[0].User) {
		return false
	}
	msg := id + " is an array job, not a job: GET /api/v1/arrays/" + id + " shows it and acts on its tasks, GET /api/v1/jobs?array=" + id + " lists them"
	s.observe(r, c, "job "+id, http.StatusNotFound, msg)
	writeError(w, http.StatusNotFound, apitype.CodeNotFound, msg)
	return true
}

// writeSubmittedArray answers an array's submission with the array, of
// which first is the first task.
func (s *server) writeSubmittedArray(w http.ResponseWriter, r *http.Request, c *call, first queue.Job) {
	tasks, err := s.cfg.Jobs.Array(r.Context(), first.Request.Array.ID)
	if err != nil {
		s.jobError(w, r, c, "array "+first.Request.Array.ID, err)
		return
	}
	writeJSON(w, s.arrayJSON(tasks))
}
