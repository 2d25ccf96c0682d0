package apitype

// CancelJobsRequest is the body of POST /api/v1/jobs/cancel, a bulk
// cancel: every one of the caller's jobs in one of State (queued,
// starting, running; at least one) whose name matches Name (a shell
// pattern as path.Match reads it; "" matches any), only held ones with
// Held, everyone's with AllUsers (admins only).
type CancelJobsRequest struct {
	State    []string `json:"state"`
	Held     bool     `json:"held"`
	Name     string   `json:"name"`
	AllUsers bool     `json:"all_users"`
}

// CancelJobsResponse is the answer to a bulk cancel: how many jobs it
// cancelled and their IDs, oldest first. Stopping of them were started:
// they are being stopped and end cancelled once their containers have.
type CancelJobsResponse struct {
	Cancelled int      `json:"cancelled"`
	IDs       []string `json:"ids"`
	Stopping  int      `json:"stopping"`
}

// Page says which part of the jobs a listing is: Total is how many the
// filter selects on every page, NextAfter the after= that asks for the
// next page ("" on the last).
type Page struct {
	Total     int    `json:"total"`
	NextAfter string `json:"next_after"`
}

// MaxJobsLimit is the most jobs one page of GET /api/v1/jobs may ask for;
// a listing without limit= has every job.
const MaxJobsLimit = 10000
