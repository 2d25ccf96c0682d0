package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

// JobsPage lists one page of the jobs q selects, oldest first, and says
// which page it is: Page.Total jobs in all, Page.NextAfter the After of
// the next page ("" on the last).
func (c *Client) JobsPage(ctx context.Context, q JobsQuery) (apitype.JobsResponse, error) {
	v := url.Values{}
	if q.All {
		v.Set("all", "1")
	}
	if q.AllUsers {
		v.Set("all_users", "1")
	}
	if len(q.States) > 0 {
		v.Set("state", strings.Join(q.States, ","))
	}
	if q.Array != "" {
		v.Set("array", q.Array)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	var out apitype.JobsResponse
	err := c.getJSON(ctx, "/api/v1/jobs", v, liveTimeout, &out)
	return out, err
}

// CancelWait cancels job id and returns it once it has ended, as Cancel
// does for a queued one; a running one's stop takes up to
// queue.stop_grace and a kill.
func (c *Client) CancelWait(ctx context.Context, id string) (apitype.Job, error) {
	var out apitype.Job
	body, ct, err := c.do(ctx, http.MethodPost, jobPath(id, "cancel"), url.Values{"wait": {"1"}}, struct{}{}, cancelTimeout)
	if err != nil {
		return out, err
	}
	err = decode(jobPath(id, "cancel"), body, ct, &out)
	return out, err
}

// CancelJobs cancels every job req selects in one call, and says which.
func (c *Client) CancelJobs(ctx context.Context, req apitype.CancelJobsRequest) (apitype.CancelJobsResponse, error) {
	var out apitype.CancelJobsResponse
	err := c.postJSON(ctx, "/api/v1/jobs/cancel", req, liveTimeout, &out)
	return out, err
}
