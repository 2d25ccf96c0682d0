package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

// cancelTimeout is how long a cancel with wait may take: the agent
// answers once the job's container has stopped, after queue.stop_grace
// and a kill.
const cancelTimeout = 15*time.Minute + 10*time.Second

// logsTimeout bounds the logs of a job read without following them.
const logsTimeout = 10 * time.Minute

// JobsQuery selects the jobs Jobs lists.
type JobsQuery struct {
	// All adds the ended jobs to the live ones, as ps -a does.
	All bool
	// AllUsers lists everyone's jobs, for admins and viewers; without it
	// the caller's own.
	AllUsers bool
	// States narrows the list to these states.
	States []string
	// Limit is the most jobs of one page (JobsPage); 0 lists them all.
	// After is the id of the last job of the page before ("": the first).
	Limit int
	After string
	// Array lists the tasks of this array job, ended ones too.
	Array string
}

// Submit queues a job and returns it as the agent stored it. The sizes
// and durations are checked before anything is sent.
func (c *Client) Submit(ctx context.Context, req apitype.JobRequest) (apitype.Job, error) {
	var out apitype.Job
	if _, err := apitype.ParseJobRequest(req); err != nil {
		return out, err
	}
	err := c.postJSON(ctx, "/api/v1/jobs", req, liveTimeout, &out)
	return out, err
}

// Jobs lists the jobs q selects, oldest first.
func (c *Client) Jobs(ctx context.Context, q JobsQuery) ([]apitype.Job, error) {
	out, err := c.JobsPage(ctx, q)
	return out.Jobs, err
}

// Job returns the job with id. Another user's job is answered as one that
// does not exist: a *StatusError with status 404.
func (c *Client) Job(ctx context.Context, id string) (apitype.Job, error) {
	var out apitype.Job
	err := c.getJSON(ctx, jobPath(id, ""), nil, liveTimeout, &out)
	return out, err
}

// Cancel cancels job id and returns it at once: a running one is still
// running, being stopped (CancelWait waits for its end). An ended job is
// a *StatusError with status 409 and the job's State.
func (c *Client) Cancel(ctx context.Context, id string) (apitype.Job, error) {
	return c.jobAction(ctx, id, "cancel", liveTimeout)
}

// Hold keeps a queued job from starting; it keeps its place.
func (c *Client) Hold(ctx context.Context, id string) (apitype.Job, error) {
	return c.jobAction(ctx, id, "hold", liveTimeout)
}

// Requeue makes a new job from an ended one, and returns the new job.
func (c *Client) Requeue(ctx context.Context, id string) (apitype.Job, error) {
	return c.jobAction(ctx, id, "requeue", liveTimeout)
}

// Release lets a held job start again.
func (c *Client) Release(ctx context.Context, id string) (apitype.Job, error) {
	return c.jobAction(ctx, id, "release", liveTimeout)
}

func (c *Client) jobAction(ctx context.Context, id, verb string, timeout time.Duration) (apitype.Job, error) {
	var out apitype.Job
	err := c.postJSON(ctx, jobPath(id, verb), struct{}{}, timeout, &out)
	return out, err
}

// Logs copies job id's output to w as the agent sends it; with follow it
// goes on while the job runs, until it ends or ctx does. The output is
// the job's own, as its program wrote it.
func (c *Client) Logs(ctx context.Context, id string, follow bool, w io.Writer) error {
	path := jobPath(id, "logs")
	var (
		q       url.Values
		callCtx context.Context
		cancel  context.CancelFunc
		timeout time.Duration
	)
	if follow {
		q = url.Values{"follow": {"1"}}
		callCtx, cancel = context.WithCancel(ctx)
	} else {
		callCtx, cancel = context.WithTimeout(ctx, logsTimeout)
		timeout = logsTimeout
	}
	defer cancel()
	resp, err := c.send(ctx, callCtx, http.MethodGet, path, q, nil, timeout)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return statusError(resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("read the logs of %s: %w", id, err)
	}
	return nil
}

func jobPath(id, verb string) string {
	p := "/api/v1/jobs/" + url.PathEscape(id)
	if verb != "" {
		p += "/" + verb
	}
	return p
}

func (c *Client) postJSON(ctx context.Context, path string, in any, timeout time.Duration, out any) error {
	body, ct, err := c.do(ctx, http.MethodPost, path, nil, in, timeout)
	if err != nil {
		return err
	}
	return decode(path, body, ct, out)
}
