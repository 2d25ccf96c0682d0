package server

import (
	"net/http"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/web"
)

// DefaultSessionLifetime is api.session_lifetime's default.
const DefaultSessionLifetime = 12 * time.Hour

// sessionRoutes are the console's sign-in: a token exchanged once for a
// session cookie, the session read back (with its CSRF token), and
// sign-out.
func (s *server) sessionRoutes() []route {
	return []route{
		{method: "GET", pattern: "/api/v1/session", act: auth.ActSessionRead, h: s.getSession},
		{method: "POST", pattern: "/api/v1/session", act: auth.ActSessionStart, mutating: true, bodyToken: true, h: s.startSession},
		{method: "DELETE", pattern: "/api/v1/session", act: auth.ActSessionEnd, mutating: true, h: s.endSession},
	}
}

// startSession opens a session for the caller's token and sets its
// cookie. Only a token opens one: a session cannot make another, so that
// a session never outlives the lifetime its token gave it.
func (s *server) startSession(w http.ResponseWriter, r *http.Request, c *call) {
	if c.id.Method != auth.MethodToken {
		msg := "a session is opened with a token: send it as `Authorization: Bearer <token>` or in a JSON body {\"token\": \"<token>\"}"
		s.observe(r, c, "", http.StatusBadRequest, msg)
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, msg)
		return
	}
	ses, id, err := s.sessions.Start(s.cfg.Auth(), r.Header.Get("Authorization"))
	if err != nil {
		// The token was let in a moment ago: a reload took it away.
		s.observe(r, c, "", http.StatusUnauthorized, err.Error())
		writeError(w, http.StatusUnauthorized, auth.CodeBadToken, err.Error())
		return
	}
	_ = s.act(r, c, "", http.StatusOK, "expires "+ses.Expires.UTC().Format(time.RFC3339))
	http.SetCookie(w, &http.Cookie{
		Name: auth.SessionCookie, Value: ses.Secret, Path: "/",
		Expires: ses.Expires, MaxAge: max(1, int(ses.Expires.Sub(s.cfg.Now())/time.Second)),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	writeJSON(w, sessionBody(id, ses))
}

// getSession tells a signed-in page who it is and its CSRF token; a
// page of another site cannot read the answer.
func (s *server) getSession(w http.ResponseWriter, r *http.Request, c *call) {
	if !noParams(w, r) {
		return
	}
	if c.id.Method != auth.MethodSession {
		writeError(w, http.StatusNotFound, apitype.CodeNotFound, "no session: this call is authenticated by "+c.id.Method+", not a session cookie; sign in with POST /api/v1/session")
		return
	}
	writeJSON(w, sessionBody(c.id, c.session))
}

// endSession signs out the session the cookie names and clears it.
func (s *server) endSession(w http.ResponseWriter, r *http.Request, c *call) {
	secret, ok := auth.Cookie(r)
	if c.id.Method != auth.MethodSession || !ok {
		msg := "no session to sign out of: this call is authenticated by " + c.id.Method + ", not a session cookie"
		s.observe(r, c, "", http.StatusNotFound, msg)
		writeError(w, http.StatusNotFound, apitype.CodeNotFound, msg)
		return
	}
	s.sessions.End(secret)
	clearSessionCookie(w, r)
	// The sign-in page the console goes to next says "signed out", once.
	http.SetCookie(w, &http.Cookie{Name: web.SignedOutCookie, Value: "1", Path: "/signin", MaxAge: 60,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	_ = s.act(r, c, "", http.StatusOK, "")
	writeJSON(w, apitype.SessionEnd{SignedOut: true})
}

func sessionBody(id auth.Identity, ses auth.Session) apitype.Session {
	return apitype.Session{User: id.User, Role: string(id.Role), TokenID: id.Name, Started: ses.Started.UTC(), Expires: ses.Expires.UTC(), CSRFToken: ses.CSRF}
}

// clearSessionCookie tells the browser to drop its session cookie.
func clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: auth.SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// authenticate finds who r comes from: a bearer token first, then a
// session cookie, then what the authenticator accepts besides (a client
// certificate, a socket peer, anonymous). ses is the session when the
// cookie decided.
func (s *server) authenticate(r *http.Request) (id auth.Identity, ses auth.Session, err error) {
	a := s.cfg.Auth()
	if r.Header.Get("Authorization") == "" {
		if secret, ok := auth.Cookie(r); ok {
			return s.sessions.Authenticate(a, secret)
		}
	}
	id, err = a.Authenticate(r)
	return id, auth.Session{}, err
}

// checkCSRF refuses a call that the session cookie signs in, that may
// change something and that does not carry the session's CSRF token: the
// browser sends the cookie whichever page asks, but only a page of the
// agent's can read the token to send with it. It answers the refusal and
// returns false.
func (s *server) checkCSRF(w http.ResponseWriter, r *http.Request, c *call) bool {
	if c.id.Method != auth.MethodSession || safeMethod(r.Method) || c.session.CheckCSRF(r) {
		return true
	}
	msg := "a request signed in by a session cookie that may change something must send the session's CSRF token in the " + auth.CSRFHeader + " header (GET /api/v1/session gives it)"
	s.observe(r, c, "", http.StatusForbidden, apitype.CodeCSRF)
	writeError(w, http.StatusForbidden, apitype.CodeCSRF, msg)
	return false
}

// safeMethod says whether a request with method m only reads.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// tokenFromBody moves the token of a sign-in's JSON body into r's
// Authorization header, so that guard checks it as any bearer token. The
// body must say it is JSON: a form on another site cannot send that. A
// bad body is answered and false returned.
func (s *server) tokenFromBody(w http.ResponseWriter, r *http.Request, c *call) bool {
	if r.ContentLength == 0 {
		return true
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.Limits.MaxBodyBytes)
	if r.Header.Get("Content-Type") == "" {
		msg := "the body must be application/json with a token field"
		s.observe(r, c, "", http.StatusUnsupportedMediaType, msg)
		writeError(w, http.StatusUnsupportedMediaType, apitype.CodeUnsupportedType, msg)
		return false
	}
	var req apitype.SessionStart
	if status, err := decodeJSON(w, r, &req); err != nil {
		s.observe(r, c, "", status, err.Error())
		return false
	}
	switch {
	case req.Token == "":
	case r.Header.Get("Authorization") != "":
		msg := "send the token once: in the Authorization header or in the body, not both"
		s.observe(r, c, "", http.StatusBadRequest, msg)
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, msg)
		return false
	default:
		r.Header.Set("Authorization", "Bearer "+req.Token)
	}
	return true
}
