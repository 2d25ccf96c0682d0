package auth

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
)

// sessionClock is a clock the test moves, shared by the authenticator
// and the sessions as the agent's real clock is.
type sessionClock struct{ t time.Time }

func (c *sessionClock) now() time.Time { return c.t }

func newSessionFixture(t *testing.T, lifetime time.Duration) (*sessionClock, *Sessions, func(tokens ...config.Token) *Authenticator) {
	t.Helper()
	clock := &sessionClock{t: time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)}
	build := func(tokens ...config.Token) *Authenticator {
		a, err := New(Config{Tokens: tokens})
		if err != nil {
			t.Fatal(err)
		}
		a.now = clock.now
		return a
	}
	return clock, NewSessions(lifetime, clock.now), build
}

func mintToken(t *testing.T, id string, role config.Role, expires time.Time) (string, config.Token) {
	t.Helper()
	secret, tok, err := NewToken(id, "alice", role, expires)
	if err != nil {
		t.Fatal(err)
	}
	return secret, tok
}

func wantEnded(t *testing.T, err error) {
	t.Helper()
	var ae *Error
	if !errors.As(err, &ae) || ae.Code != CodeSessionEnded {
		t.Fatalf("got %v, want a %s error", err, CodeSessionEnded)
	}
}

func TestSessionLifetime(t *testing.T) {
	clock, s, build := newSessionFixture(t, time.Hour)
	secret, tok := mintToken(t, "alice-laptop", config.RoleUser, time.Time{})
	a := build(tok)
	ses, id, err := s.Start(a, "Bearer "+secret)
	if err != nil {
		t.Fatal(err)
	}
	if id.User != "alice" || id.Role != config.RoleUser || id.Method != MethodSession || id.Name != "alice-laptop" {
		t.Errorf("got identity %+v", id)
	}
	if ses.Secret == "" || ses.CSRF == "" || ses.Secret == ses.CSRF || ses.Secret == secret {
		t.Errorf("got secret %q and CSRF %q", ses.Secret, ses.CSRF)
	}
	if want := clock.t.Add(time.Hour); !ses.Expires.Equal(want) {
		t.Errorf("expires %s, want %s", ses.Expires, want)
	}
	clock.t = clock.t.Add(59 * time.Minute)
	got, back, err := s.Authenticate(a, ses.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if got != id || back.CSRF != ses.CSRF || back.Secret != "" {
		t.Errorf("got %+v %+v, want %+v with CSRF %q and no secret", got, back, id, ses.CSRF)
	}
	clock.t = clock.t.Add(time.Minute)
	_, _, err = s.Authenticate(a, ses.Secret)
	wantEnded(t, err)
	if s.Len() != 0 {
		t.Errorf("%d sessions kept after the only one ended", s.Len())
	}
}

func TestSessionEndsWithItsToken(t *testing.T) {
	clock, s, build := newSessionFixture(t, 12*time.Hour)
	secret, tok := mintToken(t, "alice-laptop", config.RoleUser, time.Time{})
	dueSecret, due := mintToken(t, "alice-due", config.RoleUser, clock.t.Add(time.Hour))
	a := build(tok, due)
	ses, _, err := s.Start(a, "Bearer "+secret)
	if err != nil {
		t.Fatal(err)
	}
	dueSes, _, err := s.Start(a, "Bearer "+dueSecret)
	if err != nil {
		t.Fatal(err)
	}
	if want := due.Expires; !dueSes.Expires.Equal(want) {
		t.Errorf("a session of a token that expires in an hour expires %s, want %s", dueSes.Expires, want)
	}

	// A reload that revokes alice-laptop ends its session at once.
	reloaded := build(due)
	_, _, err = s.Authenticate(reloaded, ses.Secret)
	wantEnded(t, err)
	// The next sign-in sweeps the sessions of revoked tokens that were
	// not used since.
	idle, _, err := s.Start(build(tok, due), "Bearer "+secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Start(reloaded, "Bearer "+dueSecret); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 2 {
		t.Errorf("%d sessions kept, want due's two: the revoked token's idle one swept", s.Len())
	}
	_, _, err = s.Authenticate(build(tok, due), idle.Secret)
	wantEnded(t, err)
	// Its token coming back does not bring the forgotten session back.
	_, _, err = s.Authenticate(build(tok, due), ses.Secret)
	wantEnded(t, err)

	// A token whose expiry a reload brings forward ends its session too.
	due.Expires = clock.t.Add(time.Minute)
	clock.t = clock.t.Add(2 * time.Minute)
	_, _, err = s.Authenticate(build(due), dueSes.Secret)
	wantEnded(t, err)
}

func TestSessionStartRefuses(t *testing.T) {
	clock, s, build := newSessionFixture(t, time.Hour)
	_, tok := mintToken(t, "alice-laptop", config.RoleUser, time.Time{})
	oldSecret, old := mintToken(t, "alice-old", config.RoleUser, clock.t.Add(-time.Second))
	a := build(tok, old)
	for name, c := range map[string]struct{ header, code string }{
		"no scheme":     {"gpm_x", CodeBadToken},
		"unknown token": {"Bearer gpm_x", CodeBadToken},
		"expired token": {"Bearer " + oldSecret, CodeExpired},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := s.Start(a, c.header)
			var ae *Error
			if !errors.As(err, &ae) || ae.Code != c.code {
				t.Errorf("got %v, want code %s", err, c.code)
			}
		})
	}
	if s.Len() != 0 {
		t.Errorf("%d sessions kept after refusals", s.Len())
	}
	_, _, err := s.Authenticate(a, "not-a-session")
	wantEnded(t, err)
}

func TestSessionEnd(t *testing.T) {
	_, s, build := newSessionFixture(t, time.Hour)
	secret, tok := mintToken(t, "alice-laptop", config.RoleUser, time.Time{})
	a := build(tok)
	one, _, err := s.Start(a, "Bearer "+secret)
	if err != nil {
		t.Fatal(err)
	}
	two, _, err := s.Start(a, "Bearer "+secret)
	if err != nil {
		t.Fatal(err)
	}
	if !s.End(one.Secret) || s.End(one.Secret) {
		t.Error("End of a session did not report it once")
	}
	_, _, err = s.Authenticate(a, one.Secret)
	wantEnded(t, err)
	if _, _, err := s.Authenticate(a, two.Secret); err != nil {
		t.Errorf("signing out of one browser ended the other: %v", err)
	}
}

// TestSessionsPerTokenBounded: signing in again and again with one token
// keeps at most maxSessionsPerToken sessions, ending the oldest first.
func TestSessionsPerTokenBounded(t *testing.T) {
	clock, s, build := newSessionFixture(t, time.Hour)
	secret, tok := mintToken(t, "alice-laptop", config.RoleUser, time.Time{})
	a := build(tok)
	var first Session
	for i := range maxSessionsPerToken + 5 {
		ses, _, err := s.Start(a, "Bearer "+secret)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = ses
		}
		clock.t = clock.t.Add(time.Second)
	}
	if s.Len() != maxSessionsPerToken {
		t.Errorf("%d sessions kept, want %d", s.Len(), maxSessionsPerToken)
	}
	_, _, err := s.Authenticate(a, first.Secret)
	wantEnded(t, err)
}

func TestCheckCSRF(t *testing.T) {
	ses := Session{CSRF: "abc"}
	for header, want := range map[string]bool{"abc": true, "": false, "abd": false, "ab": false} {
		r := httptest.NewRequest("POST", "/", nil)
		if header != "" {
			r.Header.Set(CSRFHeader, header)
		}
		if got := ses.CheckCSRF(r); got != want {
			t.Errorf("CheckCSRF with %q = %v, want %v", header, got, want)
		}
	}
	if (Session{}).CheckCSRF(httptest.NewRequest("POST", "/", nil)) {
		t.Error("a session without a CSRF token passed a request without one")
	}
}
