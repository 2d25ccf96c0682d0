package server

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
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
)

// browser sends requests as a browser signed in by a session does: the
// cookie and, when set, the CSRF header; no Authorization.
type browser struct {
	client *http.Client
	url    string
	cookie string
	csrf   string
}

func (b browser) do(t *testing.T, method, path, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if b.cookie != "" {
		req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: b.cookie})
	}
	if b.csrf != "" {
		req.Header.Set(auth.CSRFHeader, b.csrf)
	}
	client := b.client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, data}
}

// sessionCookie is the session cookie a sets, or nil.
func sessionCookie(a answer) *http.Cookie {
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == auth.SessionCookie {
			return c
		}
	}
	return nil
}

// signIn opens a session as caller, with its token in the Authorization
// header, and checks the cookie it gets.
func (f *fixture) signIn(t *testing.T, caller string) (browser, apitype.Session) {
	t.Helper()
	a := f.do(t, caller, http.MethodPost, "/api/v1/session", nil, "")
	if a.status != http.StatusOK {
		t.Fatalf("sign in as %s: %d %s", caller, a.status, a.body)
	}
	var ses apitype.Session
	a.decode(t, &ses)
	c := sessionCookie(a)
	if c == nil {
		t.Fatalf("sign in set no %s cookie: %v", auth.SessionCookie, a.header["Set-Cookie"])
	}
	return browser{url: f.url, cookie: c.Value}, ses
}

func TestSessionSignIn(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.SessionLifetime = 2 * time.Hour })
	a := f.do(t, asAlice, http.MethodPost, "/api/v1/session", nil, "")
	var ses apitype.Session
	a.decode(t, &ses)
	if a.status != http.StatusOK || ses.User != "alice" || ses.Role != "user" || ses.TokenID != "alice-laptop" || len(ses.CSRFToken) < 40 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if want := f.clock.Now().Add(2 * time.Hour); !ses.Expires.Equal(want) {
		t.Errorf("expires %s, want %s", ses.Expires, want)
	}
	c := sessionCookie(a)
	if c == nil {
		t.Fatalf("no session cookie in %v", a.header["Set-Cookie"])
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || c.MaxAge != 7200 {
		t.Errorf("cookie %s: want HttpOnly, SameSite=Strict, Path=/, Max-Age=7200, not Secure over plain HTTP", c)
	}
	if strings.Contains(c.Value, strings.TrimPrefix(f.headers[asAlice], "Bearer ")) {
		t.Error("the cookie holds the token")
	}
	if events, acted := f.audit.takeActed(); len(events) != 1 || !acted[0] || events[0].Action != string(auth.ActSessionStart) ||
		events[0].Caller != "alice (token alice-laptop)" || events[0].Status != 200 {
		t.Errorf("audit %+v %v, want one action session.start by alice's token", events, acted)
	}

	b := browser{url: f.url, cookie: c.Value}
	var who apitype.Whoami
	b.do(t, "GET", "/api/v1/whoami", "").decode(t, &who)
	if who != (apitype.Whoami{User: "alice", Role: "user", Method: auth.MethodSession, Name: "alice-laptop"}) {
		t.Errorf("whoami by the cookie: %+v", who)
	}
	// A user's session sees what the user's token sees: their own rows.
	var cs apitype.ContainersResponse
	b.do(t, "GET", "/api/v1/containers", "").decode(t, &cs)
	for _, ct := range cs.Containers {
		if ct.User != "alice" {
			t.Errorf("alice's session sees %s's container %s", ct.User, ct.Name)
		}
	}
	var back apitype.Session
	b.do(t, "GET", "/api/v1/session", "").decode(t, &back)
	if back != ses {
		t.Errorf("GET /api/v1/session: %+v, want %+v", back, ses)
	}
	// A bearer caller has no session to read.
	f.get(t, asAlice, "/api/v1/session").apiError(t, http.StatusNotFound, apitype.CodeNotFound)
}

func TestSessionSignInRefusals(t *testing.T) {
	f := newFixture(t, nil)
	secret := strings.TrimPrefix(f.headers[asAlice], "Bearer ")
	b := browser{url: f.url}
	var ses apitype.Session
	a := b.do(t, "POST", "/api/v1/session", `{"token":"`+secret+`"}`)
	a.decode(t, &ses)
	if a.status != http.StatusOK || ses.User != "alice" || sessionCookie(a) == nil {
		t.Errorf("sign in with the token in the body: %d %s", a.status, a.body)
	}
	body, _ := json.Marshal(apitype.SessionStart{Token: secret})
	for _, c := range []struct {
		name, caller, body, ctype string
		status                    int
		code                      string
	}{
		{"bad token", asBad, "", "", 401, auth.CodeBadToken},
		{"expired token", asExpired, "", "", 401, auth.CodeExpired},
		{"bad token in the body", asNone, `{"token":"gpm_nosuch"}`, "", 401, auth.CodeBadToken},
		{"no token", asNone, "", "", 401, auth.CodeNoCredentials},
		{"a body that does not say it is JSON", asNone, string(body), "-", 415, apitype.CodeUnsupportedType},
		{"a form", asNone, "token=" + secret, "application/x-www-form-urlencoded", 415, apitype.CodeUnsupportedType},
		{"the token twice", asAlice, string(body), "", 400, apitype.CodeBadRequest},
		{"an unknown field", asNone, `{"token":"` + secret + `","user":"root"}`, "", 400, apitype.CodeBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rd io.Reader
			if c.body != "" {
				rd = strings.NewReader(c.body)
			}
			a := f.do(t, c.caller, http.MethodPost, "/api/v1/session", rd, c.ctype)
			a.apiError(t, c.status, c.code)
			if sessionCookie(a) != nil {
				t.Error("a refused sign-in set a cookie")
			}
		})
	}
	// A session cannot open another: only a token does.
	own, ownSes := f.signIn(t, asAlice)
	own.do(t, "POST", "/api/v1/session", "").apiError(t, http.StatusForbidden, apitype.CodeCSRF)
	own.csrf = ownSes.CSRFToken
	own.do(t, "POST", "/api/v1/session", "").apiError(t, http.StatusBadRequest, apitype.CodeBadRequest)
}

func TestSessionLifetimeEnds(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.SessionLifetime = time.Hour })
	b, _ := f.signIn(t, asAlice)
	f.clock.advance(59 * time.Minute)
	if a := b.do(t, "GET", "/api/v1/whoami", ""); a.status != 200 {
		t.Fatalf("a minute before its end: %d %s", a.status, a.body)
	}
	f.clock.advance(time.Minute)
	a := b.do(t, "GET", "/api/v1/whoami", "")
	a.apiError(t, http.StatusUnauthorized, auth.CodeSessionEnded)
	if c := sessionCookie(a); c == nil || c.MaxAge >= 0 {
		t.Errorf("an ended session's answer does not clear its cookie: %v", a.header["Set-Cookie"])
	}
	// Bearer calls are untouched by sessions.
	if a := f.get(t, asAlice, "/api/v1/whoami"); a.status != 200 {
		t.Errorf("a bearer call after the session ended: %d %s", a.status, a.body)
	}
}

func TestSessionEndsWhenTokenRevoked(t *testing.T) {
	var current atomic.Pointer[auth.Authenticator]
	f := newFixture(t, func(c *Config) {
		current.Store(c.Auth())
		c.Auth = current.Load
	})
	alice, _ := f.signIn(t, asAlice)
	bob, _ := f.signIn(t, asBob)
	first := current.Load()
	// A reload that keeps only bob's token.
	bobTok := config.Token{ID: "bob-laptop", User: "bob", Role: config.RoleUser, Hash: auth.HashToken(strings.TrimPrefix(f.headers[asBob], "Bearer "))}
	reloaded, err := auth.New(auth.Config{Tokens: []config.Token{bobTok}})
	if err != nil {
		t.Fatal(err)
	}
	current.Store(reloaded)
	alice.do(t, "GET", "/api/v1/gpus", "").apiError(t, http.StatusUnauthorized, auth.CodeSessionEnded)
	if a := bob.do(t, "GET", "/api/v1/gpus", ""); a.status != 200 {
		t.Errorf("bob's session, whose token stays: %d %s", a.status, a.body)
	}
	// The token given back by a later reload does not revive the session.
	current.Store(first)
	alice.do(t, "GET", "/api/v1/gpus", "").apiError(t, http.StatusUnauthorized, auth.CodeSessionEnded)
}

func TestSessionCSRF(t *testing.T) {
	f := newFixture(t, nil)
	b, ses := f.signIn(t, asAlice)
	stop := "/api/v1/containers/alice-train/stop"
	for name, csrf := range map[string]string{"no CSRF token": "", "a wrong one": ses.CSRFToken[1:] + "x"} {
		t.Run(name, func(t *testing.T) {
			f.audit.take()
			b := b
			b.csrf = csrf
			b.do(t, "POST", stop, `{}`).apiError(t, http.StatusForbidden, apitype.CodeCSRF)
			if calls := f.stopper.take(); len(calls) != 0 {
				t.Errorf("stopped %v without the CSRF token", calls)
			}
			if ev := f.audit.take(); len(ev) != 1 || ev[0].Outcome != audit.OutcomeDenied || ev[0].Caller != "alice (session alice-laptop)" {
				t.Errorf("audit %+v, want one denial by alice's session", ev)
			}
			b.do(t, "DELETE", "/api/v1/session", "").apiError(t, http.StatusForbidden, apitype.CodeCSRF)
		})
	}
	// Reads need none.
	if a := b.do(t, "GET", "/api/v1/containers", ""); a.status != 200 {
		t.Errorf("a read by the cookie: %d %s", a.status, a.body)
	}
	b.csrf = ses.CSRFToken
	if a := b.do(t, "POST", stop, `{}`); a.status != 200 {
		t.Fatalf("a stop with the CSRF token: %d %s", a.status, a.body)
	}
	if calls := f.stopper.take(); len(calls) != 1 || calls[0].ID != aliceTrain {
		t.Errorf("stops %v, want alice-train's", calls)
	}
	// A bearer call needs no CSRF token, even with a cookie beside it.
	f.resample()
	if a := f.do(t, asAdmin, http.MethodPost, "/api/v1/containers/bob-train/stop", strings.NewReader(`{}`), ""); a.status != 200 {
		t.Errorf("a bearer stop: %d %s", a.status, a.body)
	}
}

func TestSessionSignOut(t *testing.T) {
	f := newFixture(t, nil)
	b, ses := f.signIn(t, asAlice)
	other, _ := f.signIn(t, asAlice)
	f.audit.take()
	b.csrf = ses.CSRFToken
	a := b.do(t, "DELETE", "/api/v1/session", "")
	var end apitype.SessionEnd
	a.decode(t, &end)
	if a.status != 200 || !end.SignedOut {
		t.Fatalf("sign out: %d %s", a.status, a.body)
	}
	if c := sessionCookie(a); c == nil || c.MaxAge >= 0 || c.Value != "" {
		t.Errorf("sign out does not clear the cookie: %v", a.header["Set-Cookie"])
	}
	if ev, acted := f.audit.takeActed(); len(ev) != 1 || !acted[0] || ev[0].Action != string(auth.ActSessionEnd) {
		t.Errorf("audit %+v, want the sign-out as an action", ev)
	}
	b.do(t, "GET", "/api/v1/whoami", "").apiError(t, http.StatusUnauthorized, auth.CodeSessionEnded)
	if a := other.do(t, "GET", "/api/v1/whoami", ""); a.status != 200 {
		t.Errorf("signing out one browser ended another: %d %s", a.status, a.body)
	}
	// A bearer caller has no session to end.
	f.do(t, asAlice, http.MethodDelete, "/api/v1/session", nil, "").apiError(t, http.StatusNotFound, apitype.CodeNotFound)
	// The path answers a wrong method with the ones it takes.
	a = f.do(t, asAlice, http.MethodPut, "/api/v1/session", nil, "")
	a.apiError(t, http.StatusMethodNotAllowed, apitype.CodeMethodNotAllowed)
	if got := a.header.Get("Allow"); got != "GET, POST, DELETE, HEAD" {
		t.Errorf("Allow %q", got)
	}
}

// TestSessionCookieSecureUnderTLS: over HTTPS the cookie is Secure.
func TestSessionCookieSecureUnderTLS(t *testing.T) {
	var cfg Config
	f := newFixture(t, func(c *Config) { cfg = *c })
	srv := httptest.NewTLSServer(New(cfg))
	t.Cleanup(srv.Close)
	req, err := http.NewRequest("POST", srv.URL+"/api/v1/session", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", f.headers[asViewer])
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
	f := newFixture(t, nil)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Jar: jar}
	send := func(method, path, csrf string) answer {
		t.Helper()
		req, err := http.NewRequest(method, f.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if path == "/api/v1/session" && method == http.MethodPost {
			req.Header.Set("Authorization", f.headers[asAlice])
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
		return answer{resp.StatusCode, resp.Header, body}
	}
	says := func(a answer) string {
		t.Helper()
		for _, want := range []string{"not signed in", "signed out"} {
			if strings.Contains(string(a.body), want) {
				return want
			}
		}
		return ""
	}
	if got := says(send(http.MethodGet, "/signin?next=%2F", "")); got != "not signed in" {
		t.Errorf("before signing in the sign-in page says %q, want \"not signed in\"", got)
	}
	var ses apitype.Session
	send(http.MethodPost, "/api/v1/session", "").decode(t, &ses)
	if a := send(http.MethodDelete, "/api/v1/session", ses.CSRFToken); a.status != 200 {
		t.Fatalf("sign out: %d %s", a.status, a.body)
	}
	for i, want := range []string{"signed out", "not signed in", "not signed in"} {
		if got := says(send(http.MethodGet, "/signin?signed_out=1&next=%2F", "")); got != want {
			t.Errorf("sign-in page %d after signing out says %q, want %q", i+1, got, want)
		}
	}
	// A bearer caller's sign-out attempt leaves no notice.
	f.do(t, asAlice, http.MethodDelete, "/api/v1/session", nil, "").apiError(t, http.StatusNotFound, apitype.CodeNotFound)
	if got := says(send(http.MethodGet, "/signin", "")); got != "not signed in" {
		t.Errorf("the sign-in page says %q, want \"not signed in\"", got)
	}
}
