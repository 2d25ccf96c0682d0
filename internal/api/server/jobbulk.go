package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/run"
)

// bulkCancelTimeout bounds a bulk cancel: one write of the queued jobs
// and stops asked of the started ones, never waited for.
const bulkCancelTimeout = 2 * time.Minute

// cancelJobs is POST /api/v1/jobs/cancel: every job of the caller's (of
// everyone's with all_users, for admins) that the body's filter selects.
func (s *server) cancelJobs(w http.ResponseWriter, r *http.Request, c *call) {
	const target = "jobs cancel"
	if s.queueOff(w, r, c, true) {
		return
	}
	if r.URL.RawQuery != "" {
		msg := r.URL.Path + " takes its filter in a JSON body, not as parameters"
		s.observe(r, c, target, http.StatusBadRequest, msg)
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, msg)
		return
	}
	var body apitype.CancelJobsRequest
	if status, err := decodeJSON(w, r, &body); err != nil {
		s.observe(r, c, target, status, err.Error())
		return
	}
	states, err := parseJobStates(body.State)
	if err != nil {
		s.observe(r, c, target, http.StatusBadRequest, err.Error())
		writeErrorBody(w, http.StatusBadRequest, apitype.Error{Code: apitype.CodeBadRequest, Message: err.Error(), Field: "state"})
		return
	}
	user := c.id.User
	if body.AllUsers {
		if c.ownOnly {
			s.forbid(w, r, c, target+" all_users", fmt.Errorf("all_users: %s, a %s, may cancel only their own jobs; only admins cancel everyone's", c.id.User, c.id.Role))
			return
		}
		user = ""
	}
	ev := s.event(r, c, "", http.StatusOK, "")
	ev.Owner = user
	// What is asked is done even if the caller hangs up.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), bulkCancelTimeout)
	defer cancel()
	res, err := s.cfg.Jobs.CancelMatching(ctx, run.CancelFilter{User: user, States: states, Held: body.Held, Name: body.Name}, ev)
	if err != nil {
		s.jobError(w, r, c, target, err)
		return
	}
	c.observed = true
	writeJSON(w, apitype.CancelJobsResponse{Cancelled: len(res.IDs), IDs: nonNil(res.IDs), Stopping: res.Stopping})
}

// jobsPage is the limit= and after= of GET /api/v1/jobs: limit 0 when
// the listing has every job, after "" from the first.
type jobsPage struct {
	limit int
	after string
}

// parseJobsPage reads limit= and after=; an error is an
// *apitype.FieldError naming the parameter.
func parseJobsPage(q map[string][]string) (jobsPage, error) {
	var p jobsPage
	for _, name := range []string{"limit", "after"} {
		if len(q[name]) > 1 {
			return p, &apitype.FieldError{Field: name, Msg: "given more than once"}
		}
	}
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		switch {
		case err != nil:
			return p, &apitype.FieldError{Field: "limit", Msg: fmt.Sprintf("%q is not a number of jobs; give 1 to %d, or leave limit out for every job", v[0], apitype.MaxJobsLimit)}
		case n < 1 || n > apitype.MaxJobsLimit:
			return p, &apitype.FieldError{Field: "limit", Msg: fmt.Sprintf("%d is out of range; give 1 to %d, or leave limit out for every job", n, apitype.MaxJobsLimit)}
		}
		p.limit = n
	}
	if v, ok := q["after"]; ok {
		if v[0] == "" || len(v[0]) > 64 || !strings.HasPrefix(v[0], "j-") {
			return p, &apitype.FieldError{Field: "after", Msg: fmt.Sprintf("%q is not a job id; give the id of the last job of the page before (its page.next_after)", v[0])}
		}
		p.after = v[0]
	}
	return p, nil
}

// pageJobs lists the page p of the jobs f selects for c, and says which
// page it is. An after= that names no job c may see is a
// *apitype.FieldError.
func (s *server) pageJobs(ctx context.Context, c *call, f ledger.JobFilter, p jobsPage) ([]queue.Job, apitype.Page, error) {
	if p.after != "" {
		j, err := s.cfg.Jobs.Job(ctx, p.after)
		if errors.Is(err, ledger.ErrJobNotFound) || err == nil && !c.owns(j.User) {
			return nil, apitype.Page{}, &apitype.FieldError{Field: "after", Msg: fmt.Sprintf("no job %q is known to the queue; give the id of the last job of the page before", p.after)}
		}
		if err != nil {
			return nil, apitype.Page{}, err
		}
		f.After = j.Seq
	}
	if p.limit > 0 {
		f.Limit = p.limit + 1 // one more says whether a next page follows
	}
	jobs, err := s.cfg.Jobs.Jobs(ctx, f)
	if err != nil {
		return nil, apitype.Page{}, err
	}
	page := apitype.Page{Total: len(jobs)}
	if p.limit > 0 && len(jobs) > p.limit {
		jobs = jobs[:p.limit]
		page.NextAfter = jobs[p.limit-1].ID
	}
	if p.limit > 0 || p.after != "" {
		f.Limit, f.After = 0, 0
		if page.Total, err = s.cfg.Jobs.CountJobs(ctx, f); err != nil {
			return nil, apitype.Page{}, err
		}
	}
	return jobs, page, nil
}

// actionWait reads the parameters of a job action: cancel takes wait=1
// (answer once the job has ended), the others none.
func actionWait(verb, raw string) (bool, error) {
	if raw == "" {
		return false, nil
	}
	if verb != "cancel" {
		return false, errors.New("takes no parameters")
	}
	q, err := apitype.ParseQuery(raw)
	if err == nil {
		err = apitype.OnlyParams(q, "wait")
	}
	if err == nil && len(q["wait"]) > 1 {
		err = errors.New("wait: given more than once")
	}
	if err != nil {
		return false, err
	}
	return apitype.FlagParam(q.Get("wait"), "wait")
}
