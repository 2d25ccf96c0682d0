package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"sync"
	"time"
)

// SessionCookie is the name of the cookie a signed-in browser sends.
const SessionCookie = "gpumeter_session"

// CSRFHeader carries a session's CSRF token. A request that a session
// cookie authenticates and that may change something must send it: a
// page of another site can make the browser send the cookie, but cannot
// read the token to send with it.
const CSRFHeader = "X-CSRF-Token"

// maxSessionsPerToken bounds the sessions one token holds open: signing
// in past it ends that token's oldest session, so that the sessions kept
// are bounded by the tokens configured.
const maxSessionsPerToken = 32

// Sessions are the browsers signed in with a token: a bearer token is
// exchanged once for a random cookie, so that the token need not stay in
// the page. Each session is bound to its token's hash and checked against
// the tokens configured now on every request, so it ends when its token
// is revoked (a reload drops it) or expires. Sessions are kept in memory
// only: a restart signs every browser out.
type Sessions struct {
	mu       sync.Mutex
	lifetime time.Duration
	now      func() time.Time
	// byKey is keyed by the hash of the cookie's value, so that the
	// secrets themselves are not kept.
	byKey map[[sha256.Size]byte]*session
}

type session struct {
	token   [sha256.Size]byte // the hash of the token it was opened with
	csrf    string
	started time.Time
	expires time.Time
}

// Session is one signed-in browser.
type Session struct {
	// Secret is the cookie's value; only Start returns it.
	Secret  string
	CSRF    string
	Started time.Time
	// Expires is when the session ends by itself: its lifetime after
	// sign-in, or its token's expiry when that comes first.
	Expires time.Time
}

// NewSessions keeps sessions that last lifetime, which must be positive,
// on the clock now.
func NewSessions(lifetime time.Duration, now func() time.Time) *Sessions {
	return &Sessions{lifetime: lifetime, now: now, byKey: map[[sha256.Size]byte]*session{}}
}

// Lifetime is how long a session lasts at most.
func (s *Sessions) Lifetime() time.Duration { return s.lifetime }

// Start opens a session for the bearer token in header, an Authorization
// header's value, as a checks it now.
func (s *Sessions) Start(a *Authenticator, header string) (Session, Identity, error) {
	secret, err := bearer(header)
	if err != nil {
		return Session{}, Identity{}, err
	}
	hash := HashToken(secret)
	t, id, err := a.lookup(hash)
	if err != nil {
		return Session{}, id, err
	}
	cookie, err := randomString()
	if err != nil {
		return Session{}, id, err
	}
	csrf, err := randomString()
	if err != nil {
		return Session{}, id, err
	}
	now := s.now()
	ses := &session{token: hash, csrf: csrf, started: now, expires: now.Add(s.lifetime)}
	if !t.Expires.IsZero() && t.Expires.Before(ses.expires) {
		ses.expires = t.Expires
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var oldest [sha256.Size]byte
	var oldestStart time.Time
	held := 0
	for k, o := range s.byKey {
		// Sessions that ended by time or with their token go now, so
		// that the ones kept are bounded by the tokens configured.
		if _, live := a.byHash[o.token]; !live || !now.Before(o.expires) {
			delete(s.byKey, k)
			continue
		}
		if o.token == hash {
			if held == 0 || o.started.Before(oldestStart) {
				oldest, oldestStart = k, o.started
			}
			held++
		}
	}
	if held >= maxSessionsPerToken {
		delete(s.byKey, oldest)
	}
	s.byKey[sha256.Sum256([]byte(cookie))] = ses
	id.Method = MethodSession
	return Session{Secret: cookie, CSRF: csrf, Started: ses.started, Expires: ses.expires}, id, nil
}

// Cookie is the session cookie r sends, if any.
func Cookie(r *http.Request) (string, bool) {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return "", false
	}
	return c.Value, true
}

// Authenticate finds who the session with the cookie value secret
// belongs to, checking its token against a, the tokens configured now.
// A session that has ended, for whatever reason, is forgotten and
// refused with CodeSessionEnded.
func (s *Sessions) Authenticate(a *Authenticator, secret string) (Identity, Session, error) {
	key := sha256.Sum256([]byte(secret))
	s.mu.Lock()
	defer s.mu.Unlock()
	ses, ok := s.byKey[key]
	if !ok {
		return Identity{}, Session{}, &Error{CodeSessionEnded, "the session has ended (signed out, or the agent restarted); sign in again with a token"}
	}
	if !s.now().Before(ses.expires) {
		delete(s.byKey, key)
		return Identity{}, Session{}, &Error{CodeSessionEnded, "the session ended at " + ses.expires.UTC().Format(time.RFC3339) + "; sign in again with a token"}
	}
	_, id, err := a.lookup(ses.token)
	if err != nil {
		delete(s.byKey, key)
		return Identity{}, Session{}, &Error{CodeSessionEnded, "the session has ended: the token it was opened with is revoked or expired; sign in again with a new one"}
	}
	id.Method = MethodSession
	return id, Session{CSRF: ses.csrf, Started: ses.started, Expires: ses.expires}, nil
}

// End signs out the session with the cookie value secret; false when
// there was none.
func (s *Sessions) End(secret string) bool {
	key := sha256.Sum256([]byte(secret))
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.byKey[key]
	delete(s.byKey, key)
	return ok
}

// Len is how many sessions are kept, ended ones not yet swept included.
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKey)
}

// CheckCSRF says whether r carries the session's CSRF token.
func (ses Session) CheckCSRF(r *http.Request) bool {
	got := r.Header.Get(CSRFHeader)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(ses.CSRF)) == 1
}

// randomString is 32 random bytes, URL-safe.
func randomString() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
