package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

// SubmitArray queues an array job (req.Array set, such as "0-99%8") and
// returns it as the agent stored it, with its tasks.
func (c *Client) SubmitArray(ctx context.Context, req apitype.JobRequest) (apitype.ArrayJob, error) {
	var out apitype.ArrayJob
	if req.Array == "" {
		return out, &apitype.FieldError{Field: "array", Msg: "an array job needs its indices, such as 0-99 or 0-99%8"}
	}
	if _, err := apitype.ParseJobRequest(req); err != nil {
		return out, err
	}
	err := c.postJSON(ctx, "/api/v1/jobs", req, liveTimeout, &out)
	return out, err
}

// Array returns array job id with its tasks; another user's is answered
// as one that does not exist: a *StatusError with status 404.
func (c *Client) Array(ctx context.Context, id string) (apitype.ArrayJob, error) {
	var out apitype.ArrayJob
	err := c.getJSON(ctx, arrayPath(id, ""), nil, liveTimeout, &out)
	return out, err
}

// CancelArray cancels every task of array id that has not ended and
// returns the array once they have.
func (c *Client) CancelArray(ctx context.Context, id string) (apitype.ArrayJob, error) {
	return c.arrayAction(ctx, id, "cancel", cancelTimeout)
}

// HoldArray holds the queued tasks of array id.
func (c *Client) HoldArray(ctx context.Context, id string) (apitype.ArrayJob, error) {
	return c.arrayAction(ctx, id, "hold", liveTimeout)
}

// ReleaseArray releases the held tasks of array id.
func (c *Client) ReleaseArray(ctx context.Context, id string) (apitype.ArrayJob, error) {
	return c.arrayAction(ctx, id, "release", liveTimeout)
}

func (c *Client) arrayAction(ctx context.Context, id, verb string, timeout time.Duration) (apitype.ArrayJob, error) {
	var out apitype.ArrayJob
	err := c.postJSON(ctx, arrayPath(id, verb), struct{}{}, timeout, &out)
	return out, err
}

// JobOrArray returns job id, or, when id names an array job instead,
// the array (job is then the zero Job). An id that is neither is the
// job's *StatusError with status 404.
func (c *Client) JobOrArray(ctx context.Context, id string) (job apitype.Job, array *apitype.ArrayJob, err error) {
	job, err = c.Job(ctx, id)
	if !IsNotFound(err) {
		return job, nil, err
	}
	a, aerr := c.Array(ctx, id)
	if aerr != nil {
		if IsNotFound(aerr) {
			return apitype.Job{}, nil, err
		}
		return apitype.Job{}, nil, aerr
	}
	return apitype.Job{}, &a, nil
}

// IsNotFound reports whether err is the API's 404.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == http.StatusNotFound
}

func arrayPath(id, verb string) string {
	p := "/api/v1/arrays/" + url.PathEscape(id)
	if verb != "" {
		p += "/" + verb
	}
	return p
}
