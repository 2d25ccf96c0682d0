package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
)

func TestSessionSignIn(t *testing.T) {
	f := servertest.NewFixture(t, func(c *server.Config) { c.SessionLifetime = 2 * time.Hour })
	a := f.Do(t, servertest.AsAlice, http.MethodPost, "/api/v1/session", nil, "")
	var ses apitype.Session
	a.Decode(t, &ses)
	if a.Status != http.StatusOK || ses.User != "alice" || ses.Role != "user" || ses.TokenID != "alice-laptop" || len(ses.CSRFToken) < 40 {
		t.Fatalf("%d %s", a.Status, a.Body)
	}
	if want := f.Clock.Now().Add(2 * time.Hour); !ses.Expires.Equal(want) {
		t.Errorf("expires %s, want %s", ses.Expires, want)
	}
	c := servertest.SessionCookie(a)
	if c == nil {
		t.Fatalf("no session cookie in %v", a.Header["Set-Cookie"])
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || c.MaxAge != 7200 {
		t.Errorf("cookie %s: want HttpOnly, SameSite=Strict, Path=/, Max-Age=7200, not Secure over plain HTTP", c)
	}
	if strings.Contains(c.Value, strings.TrimPrefix(f.Headers[servertest.AsAlice], "Bearer ")) {
		t.Error("the cookie holds the token")
	}
	if events, acted := f.Audit.TakeActed(); len(events) != 1 || !acted[0] || events[0].Action != string(auth.ActSessionStart) ||
		events[0].Caller != "alice (token alice-laptop)" || events[0].Status != 200 {
		t.Errorf("audit %+v %v, want one action session.start by alice's token", events, acted)
	}

	b := servertest.Browser{URL: f.URL, Cookie: c.Value}
	var who apitype.Whoami
	b.Do(t, "GET", "/api/v1/whoami", "").Decode(t, &who)
	if who != (apitype.Whoami{User: "alice", Role: "user", Method: auth.MethodSession, Name: "alice-laptop"}) {
		t.Errorf("whoami by the cookie: %+v", who)
	}
	// A user's session sees what the user's token sees: their own rows.
	var cs apitype.ContainersResponse
	b.Do(t, "GET", "/api/v1/containers", "").Decode(t, &cs)
	for _, ct := range cs.Containers {
		if ct.User != "alice" {
			t.Errorf("alice's session sees %s's container %s", ct.User, ct.Name)
		}
	}
	var back apitype.Session
	b.Do(t, "GET", "/api/v1/session", "").Decode(t, &back)
	if back != ses {
		t.Errorf("GET /api/v1/session: %+v, want %+v", back, ses)
	}
	// A bearer caller has no session to read.
	f.Get(t, servertest.AsAlice, "/api/v1/session").APIError(t, http.StatusNotFound, apitype.CodeNotFound)
}

func TestSessionSignInRefusals(t *testing.T) {
	f := servertest.NewFixture(t, nil)
	secret := strings.TrimPrefix(f.Headers[servertest.AsAlice], "Bearer ")
	b := servertest.Browser{URL: f.URL}
	var ses apitype.Session
	a := b.Do(t, "POST", "/api/v1/session", `{"token":"`+secret+`"}`)
	a.Decode(t, &ses)
	if a.Status != http.StatusOK || ses.User != "alice" || servertest.SessionCookie(a) == nil {
		t.Errorf("sign in with the token in the body: %d %s", a.Status, a.Body)
	}
	body, _ := json.Marshal(apitype.SessionStart{Token: secret})
	for _, c := range []struct {
		name, caller, body, ctype string
		status                    int
		code                      string
	}{
		{"bad token", servertest.AsBad, "", "", 401, auth.CodeBadToken},
		{"expired token", servertest.AsExpired, "", "", 401, auth.CodeExpired},
		{"bad token in the body", servertest.AsNone, `{"token":"gpm_nosuch"}`, "", 401, auth.CodeBadToken},
		{"no token", servertest.AsNone, "", "", 401, auth.CodeNoCredentials},
		{"a body that does not say it is JSON", servertest.AsNone, string(body), "-", 415, apitype.CodeUnsupportedType},
		{"a form", servertest.AsNone, "token=" + secret, "application/x-www-form-urlencoded", 415, apitype.CodeUnsupportedType},
		{"the token twice", servertest.AsAlice, string(body), "", 400, apitype.CodeBadRequest},
		{"an unknown field", servertest.AsNone, `{"token":"` + secret + `","user":"root"}`, "", 400, apitype.CodeBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rd io.Reader
			if c.body != "" {
				rd = strings.NewReader(c.body)
			}
			a := f.Do(t, c.caller, http.MethodPost, "/api/v1/session", rd, c.ctype)
			a.APIError(t, c.status, c.code)
			if servertest.SessionCookie(a) != nil {
				t.Error("a refused sign-in set a cookie")
			}
		})
	}
	// A session cannot open another: only a token does.
	own, ownSes := f.SignIn(t, servertest.AsAlice)
	own.Do(t, "POST", "/api/v1/session", "").APIError(t, http.StatusForbidden, apitype.CodeCSRF)
	own.CSRF = ownSes.CSRFToken
	own.Do(t, "POST", "/api/v1/session", "").APIError(t, http.StatusBadRequest, apitype.CodeBadRequest)
}

func TestSessionLifetimeEnds(t *testing.T) {
	f := servertest.NewFixture(t, func(c *server.Config) { c.SessionLifetime = time.Hour })
	b, _ := f.SignIn(t, servertest.AsAlice)
	f.Clock.Advance(59 * time.Minute)
	if a := b.Do(t, "GET", "/api/v1/whoami", ""); a.Status != 200 {
		t.Fatalf("a minute before its end: %d %s", a.Status, a.Body)
	}
	f.Clock.Advance(time.Minute)
	a := b.Do(t, "GET", "/api/v1/whoami", "")
	a.APIError(t, http.StatusUnauthorized, auth.CodeSessionEnded)
	if c := servertest.SessionCookie(a); c == nil || c.MaxAge >= 0 {
		t.Errorf("an ended session's answer does not clear its cookie: %v", a.Header["Set-Cookie"])
	}
	// Bearer calls are untouched by sessions.
	if a := f.Get(t, servertest.AsAlice, "/api/v1/whoami"); a.Status != 200 {
		t.Errorf("a bearer call after the session ended: %d %s", a.Status, a.Body)
	}
}

func TestSessionEndsWhenTokenRevoked(t *testing.T) {
	var current atomic.Pointer[auth.Authenticator]
	f := servertest.NewFixture(t, func(c *server.Config) {
		current.Store(c.Auth())
		c.Auth = current.Load
	})
	alice, _ := f.SignIn(t, servertest.AsAlice)
	bob, _ := f.SignIn(t, servertest.AsBob)
	first := current.Load()
	// A reload that keeps only bob's token.
	bobTok := config.Token{ID: "bob-laptop", User: "bob", Role: config.RoleUser, Hash: auth.HashToken(strings.TrimPrefix(f.Headers[servertest.AsBob], "Bearer "))}
	reloaded, err := auth.New(auth.Config{Tokens: []config.Token{bobTok}})
	if err != nil {
		t.Fatal(err)
	}
	current.Store(reloaded)
	alice.Do(t, "GET", "/api/v1/gpus", "").APIError(t, http.StatusUnauthorized, auth.CodeSessionEnded)
	if a := bob.Do(t, "GET", "/api/v1/gpus", ""); a.Status != 200 {
		t.Errorf("bob's session, whose token stays: %d %s", a.Status, a.Body)
	}
	// The token given back by a later reload does not revive the session.
	current.Store(first)
	alice.Do(t, "GET", "/api/v1/gpus", "").APIError(t, http.StatusUnauthorized, auth.CodeSessionEnded)
}

func TestSessionCSRF(t *testing.T) {
	f := servertest.NewFixture(t, nil)
	b, ses := f.SignIn(t, servertest.AsAlice)
	stop := "/api/v1/containers/alice-train/stop"
	for name, csrf := range map[string]string{"no CSRF token": "", "a wrong one": ses.CSRFToken[1:] + "x"} {
		t.Run(name, func(t *testing.T) {
			f.Audit.Take()
			b := b
			b.CSRF = csrf
			b.Do(t, "POST", stop, `{}`).APIError(t, http.StatusForbidden, apitype.CodeCSRF)
			if calls := f.Stopper.Take(); len(calls) != 0 {
				t.Errorf("stopped %v without the CSRF token", calls)
			}
			if ev := f.Audit.Take(); len(ev) != 1 || ev[0].Outcome != audit.OutcomeDenied || ev[0].Caller != "alice (session alice-laptop)" {
				t.Errorf("audit %+v, want one denial by alice's session", ev)
			}
			b.Do(t, "DELETE", "/api/v1/session", "").APIError(t, http.StatusForbidden, apitype.CodeCSRF)
		})
	}
	// Reads need none.
	if a := b.Do(t, "GET", "/api/v1/containers", ""); a.Status != 200 {
		t.Errorf("a read by the cookie: %d %s", a.Status, a.Body)
	}
	b.CSRF = ses.CSRFToken
	if a := b.Do(t, "POST", stop, `{}`); a.Status != 200 {
		t.Fatalf("a stop with the CSRF token: %d %s", a.Status, a.Body)
	}
	if calls := f.Stopper.Take(); len(calls) != 1 || calls[0].ID != servertest.AliceTrain {
		t.Errorf("stops %v, want alice-train's", calls)
	}
	// A bearer call needs no CSRF token, even with a cookie beside it.
	f.Resample()
	if a := f.Do(t, servertest.AsAdmin, http.MethodPost, "/api/v1/containers/bob-train/stop", strings.NewReader(`{}`), ""); a.Status != 200 {
		t.Errorf("a bearer stop: %d %s", a.Status, a.Body)
	}
}

func TestSessionSignOut(t *testing.T) {
	f := servertest.NewFixture(t, nil)
	b, ses := f.SignIn(t, servertest.AsAlice)
	other, _ := f.SignIn(t, servertest.AsAlice)
	f.Audit.Take()
	b.CSRF = ses.CSRFToken
	a := b.Do(t, "DELETE", "/api/v1/session", "")
	var end apitype.SessionEnd
	a.Decode(t, &end)
	if a.Status != 200 || !end.SignedOut {
		t.Fatalf("sign out: %d %s", a.Status, a.Body)
	}
	if c := servertest.SessionCookie(a); c == nil || c.MaxAge >= 0 || c.Value != "" {
		t.Errorf("sign out does not clear the cookie: %v", a.Header["Set-Cookie"])
	}
	if ev, acted := f.Audit.TakeActed(); len(ev) != 1 || !acted[0] || ev[0].Action != string(auth.ActSessionEnd) {
		t.Errorf("audit %+v, want the sign-out as an action", ev)
	}
	b.Do(t, "GET", "/api/v1/whoami", "").APIError(t, http.StatusUnauthorized, auth.CodeSessionEnded)
	if a := other.Do(t, "GET", "/api/v1/whoami", ""); a.Status != 200 {
		t.Errorf("signing out one browser ended another: %d %s", a.Status, a.Body)
	}
	// A bearer caller has no session to end.
	f.Do(t, servertest.AsAlice, http.MethodDelete, "/api/v1/session", nil, "").APIError(t, http.StatusNotFound, apitype.CodeNotFound)
	// The path answers a wrong method with the ones it takes.
	a = f.Do(t, servertest.AsAlice, http.MethodPut, "/api/v1/session", nil, "")
	a.APIError(t, http.StatusMethodNotAllowed, apitype.CodeMethodNotAllowed)
	if got := a.Header.Get("Allow"); got != "GET, POST, DELETE, HEAD" {
		t.Errorf("Allow %q", got)
	}
}

// TestSessionCookieSecureUnderTLS: over HTTPS the cookie is Secure.
func TestSessionCookieSecureUnderTLS(t *testing.T) {
	var cfg server.Config
	f := servertest.NewFixture(t, func(c *server.Config) { cfg = *c })
	srv := httptest.NewTLSServer(server.New(cfg))
	t.Cleanup(srv.Close)
	req, err := http.NewRequest("POST", srv.URL+"/api/v1/session", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", f.Headers[servertest.AsViewer])
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var c *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == auth.SessionCookie {
			c = k
		}
	}
	if resp.StatusCode != 200 || c == nil || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("%d, cookie %v: want Secure, HttpOnly, SameSite=Strict", resp.StatusCode, c)
	}
}

// TestSignedOutOnce: after a browser signs out, the next sign-in page it
// opens says "signed out" and the one after (a reload) "not signed in",
// whatever the address holds: the notice is a cookie the page drops as it
// shows it, not a query the page's script must remove before a reload.
func TestSignedOutOnce(t *testing.T) {
	f := servertest.NewFixture(t, nil)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Jar: jar}
	send := func(method, path, csrf string) servertest.Answer {
		t.Helper()
		req, err := http.NewRequest(method, f.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if path == "/api/v1/session" && method == http.MethodPost {
			req.Header.Set("Authorization", f.Headers[servertest.AsAlice])
		}
		if csrf != "" {
			req.Header.Set("X-CSRF-Token", csrf)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return servertest.Answer{Status: resp.StatusCode, Header: resp.Header, Body: body}
	}
	says := func(a servertest.Answer) string {
		t.Helper()
		for _, want := range []string{"not signed in", "signed out"} {
			if strings.Contains(string(a.Body), want) {
				return want
			}
		}
		return ""
	}
	if got := says(send(http.MethodGet, "/signin?next=%2F", "")); got != "not signed in" {
		t.Errorf("before signing in the sign-in page says %q, want \"not signed in\"", got)
	}
	var ses apitype.Session
	send(http.MethodPost, "/api/v1/session", "").Decode(t, &ses)
	if a := send(http.MethodDelete, "/api/v1/session", ses.CSRFToken); a.Status != 200 {
		t.Fatalf("sign out: %d %s", a.Status, a.Body)
	}
	for i, want := range []string{"signed out", "not signed in", "not signed in"} {
		if got := says(send(http.MethodGet, "/signin?signed_out=1&next=%2F", "")); got != want {
			t.Errorf("sign-in page %d after signing out says %q, want %q", i+1, got, want)
		}
	}
	// A bearer caller's sign-out attempt leaves no notice.
	f.Do(t, servertest.AsAlice, http.MethodDelete, "/api/v1/session", nil, "").APIError(t, http.StatusNotFound, apitype.CodeNotFound)
	if got := says(send(http.MethodGet, "/signin", "")); got != "not signed in" {
		t.Errorf("the sign-in page says %q, want \"not signed in\"", got)
	}
}
