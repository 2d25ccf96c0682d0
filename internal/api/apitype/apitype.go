// Package apitype holds the agent's API on the wire: the JSON bodies of
// /api/v1, its error body and codes, its headers, and the parsing of the
// requests that the server and its clients both check. Other tools
// depend on these shapes: fields may be added, never changed. The server
// (internal/api/server) and the typed client (internal/api/client) both
// import it, and neither imports the other.
//
// The package is a leaf: it imports nothing of gpumeter's but units, so
// that a tool built on the API links no domain code. Each wire struct
// marshals as the domain type it is converted from did when that was
// served itself; the server converts domain values to these in one place
// per concept, and its tests compare the two encodings.
package apitype

// Headers of the API's answers to a caller who is let in.
const (
	// NodeHeader names the node the agent meters, so that a client can
	// say whose data it shows.
	NodeHeader = "Gpumeter-Node"
	// WarningHeader says what the agent ignored in a request it served:
	// a stale token from a socket peer admitted by its uid. One header
	// per warning.
	WarningHeader = "Gpumeter-Warning"
)

// Error is the body of every error response.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Reason is the rule a refused job request broke (code refused):
	// one of the queue's refusal reasons, such as image_not_allowed.
	Reason string `json:"reason,omitempty"`
	// Field is the request field a refused or bad job request is wrong in.
	Field string `json:"field,omitempty"`
	// State is the state of the job a conflict (409) is about.
	State string `json:"state,omitempty"`
}

// Error codes of the API, stable for clients to test.
const (
	CodeBadRequest       = "bad_request"
	CodeBodyTooLarge     = "body_too_large"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeRateLimited      = "rate_limited"
	CodeWindowTooLong    = "window_too_long"
	CodeTooManyRows      = "too_many_rows"
	CodeConflict         = "conflict"
	CodeUnsupportedType  = "unsupported_media_type"
	CodeNoSample         = "no_sample"
	CodeLedgerOff        = "ledger_off"
	CodeWasteOff         = "waste_off"
	CodeDockerOff        = "docker_off"
	CodeQueueOff         = "queue_off"
	CodeFairShareOff     = "fairshare_off"
	CodeRefused          = "refused"
	CodeInternal         = "internal_error"
	// CodeStorageFull (507) is a write the agent could not make for want
	// of disk space: the message names the directory to free.
	CodeStorageFull = "storage_full"
	// CodeLedgerUnavailable: the ledger's database cannot be reached; the
	// answer is a 503 with Retry-After, and nothing was done.
	CodeLedgerUnavailable = "ledger_unavailable"
	// CodeFleetOff (503): the agent is not in a fleet (queue.fleet),
	// so it has no nodes to show or drain.
	CodeFleetOff = "fleet_off"
	// CodeNodeNotFound (404): no node of that name registered in the
	// ledger.
	CodeNodeNotFound = "node_not_found"
	// CodeNodeLost (503): the job's container is on a node of the fleet
	// that is lost (its agent's lease expired), or whose agent cannot
	// be reached; what acts on the container waits until it is back.
	CodeNodeLost = "node_lost"
)

// Outcomes of API calls in the audit log: a request that was let in or
// turned away, one that was malformed, and one that was allowed but could
// not be done.
const (
	OutcomeAllowed  = "allowed"
	OutcomeDenied   = "denied"
	OutcomeRejected = "rejected"
	OutcomeFailed   = "failed"
)

// TokenPrefix starts every API token, as auth.NewToken makes them, so
// that a client can tell a token from something pasted in its place
// without linking the server's authenticator.
const TokenPrefix = "gpm_"

// Whoami is the body of /api/v1/whoami.
type Whoami struct {
	User   string `json:"user"`
	Role   string `json:"role"`
	Method string `json:"method"`
	Name   string `json:"name"`
}
