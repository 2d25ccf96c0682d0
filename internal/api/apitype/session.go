package apitype

import "time"

// CodeCSRF refuses a request that a session cookie authenticates, that
// may change something, and that lacks the session's CSRF token.
const CodeCSRF = "csrf"

// SessionStart is the body of POST /api/v1/session when the token is not
// sent as `Authorization: Bearer <token>`.
type SessionStart struct {
	Token string `json:"token"`
}

// Session is a signed-in browser: the answer of POST and GET
// /api/v1/session. CSRFToken goes in the X-CSRF-Token header of every
// request the session cookie authenticates that may change something.
type Session struct {
	User      string    `json:"user"`
	Role      string    `json:"role"`
	TokenID   string    `json:"token_id"`
	Started   time.Time `json:"started"`
	Expires   time.Time `json:"expires"`
	CSRFToken string    `json:"csrf_token"`
}

// SessionEnd is the answer of DELETE /api/v1/session.
type SessionEnd struct {
	SignedOut bool `json:"signed_out"`
}
