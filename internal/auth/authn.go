package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
)

// Identity is who a request comes from.
type Identity struct {
	User   string
	Role   config.Role
	Method string // token, cert, socket or anonymous
	Name   string // the token ID, the certificate name or the peer's uid
	// Warning says what the caller sent and the agent ignored: a bad
	// token from a socket peer let in by its uid. "" when nothing was.
	Warning string
}

// Authentication methods.
const (
	MethodToken     = "token"
	MethodCert      = "cert"
	MethodSocket    = "socket"
	MethodAnonymous = "anonymous"
	// MethodSession is a browser signed in with a token: Name is the
	// token's ID.
	MethodSession = "session"
)

// Caller describes the identity for logs and the audit log.
func (id Identity) Caller() string {
	switch id.Method {
	case "":
		return "unknown"
	case MethodAnonymous:
		return "anonymous"
	}
	if id.User == "" {
		// Refused before a user was known: an unmapped certificate, a
		// socket peer that may not come in.
		return id.Method + " " + id.Name
	}
	return id.User + " (" + id.Method + " " + id.Name + ")"
}

// Error is a failed authentication: Code is stable for clients to test,
// Msg says what to do. It never says more about a token than that it is
// not accepted, so a caller cannot probe which tokens exist.
type Error struct {
	Code string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Authentication error codes.
const (
	CodeNoCredentials = "unauthenticated"
	CodeBadToken      = "bad_token"
	CodeExpired       = "token_expired"
	CodeUnknownCert   = "unknown_certificate"
	// CodeSessionEnded is a session cookie the agent no longer knows: it
	// ran past its lifetime, was signed out, its token was revoked or
	// expired, or the agent restarted.
	CodeSessionEnded = "session_ended"
)

// Config is what the authenticator accepts.
type Config struct {
	Tokens []config.Token
	Certs  []config.CertUser
	// Anonymous is the role of a caller with no credentials; "" refuses
	// them.
	Anonymous config.Role
	// SocketUIDs are the Unix socket peers let in as admin when they send
	// no token: root and the agent's own user.
	SocketUIDs []int
}

// Authenticator turns a request's credentials into an Identity.
type Authenticator struct {
	byHash map[[sha256.Size]byte]config.Token
	certs  map[string]config.CertUser
	anon   config.Role
	uids   map[int]bool
	now    func() time.Time
}

// New checks cfg and builds its authenticator: two entries for the same
// token, or two with one ID, are an error, since the audit log could not
// tell who called.
func New(cfg Config) (*Authenticator, error) {
	a := &Authenticator{byHash: map[[sha256.Size]byte]config.Token{}, certs: map[string]config.CertUser{}, anon: cfg.Anonymous, uids: map[int]bool{}, now: time.Now}
	ids := map[string]bool{}
	for _, t := range cfg.Tokens {
		if ids[t.ID] {
			return nil, fmt.Errorf("auth.tokens.%s: given twice", t.ID)
		}
		ids[t.ID] = true
		if prev, dup := a.byHash[t.Hash]; dup {
			return nil, fmt.Errorf("auth.tokens.%s: the same token as auth.tokens.%s; create a new one for each", t.ID, prev.ID)
		}
		a.byHash[t.Hash] = t
	}
	for _, c := range cfg.Certs {
		a.certs[c.Name] = c
	}
	if cfg.Anonymous != "" && cfg.Anonymous != config.RoleViewer {
		return nil, fmt.Errorf("auth.anonymous: %q: anonymous callers may at most be viewers", cfg.Anonymous)
	}
	for _, u := range cfg.SocketUIDs {
		a.uids[u] = true
	}
	return a, nil
}

// Authenticate finds who r comes from. A bearer token, when one is sent,
// decides: a bad token is refused, even with a certificate, so a typo is
// never quietly turned into someone else. The one exception is a socket
// peer that is admin by its uid (root, the agent's user): the kernel
// vouches for it, so a stale token it sent is ignored, and the identity
// carries a Warning saying so.
func (a *Authenticator) Authenticate(r *http.Request) (Identity, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		id, err := a.token(h)
		var ae *Error
		if errors.As(err, &ae) {
			if peer, ok := a.trustedPeer(r); ok {
				peer.Warning = fmt.Sprintf("the token was ignored (%s): %s on the agent's socket is admin by its kernel identity", ae.Msg, peer.Name)
				return peer, nil
			}
		}
		return id, err
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		cn := r.TLS.VerifiedChains[0][0].Subject.CommonName
		c, ok := a.certs[cn]
		if !ok {
			return Identity{Method: MethodCert, Name: cn}, &Error{CodeUnknownCert, fmt.Sprintf("the client certificate %q is valid but maps to no user (auth.client_certs)", cn)}
		}
		return Identity{User: c.User, Role: c.Role, Method: MethodCert, Name: cn}, nil
	}
	if peer, ok := a.trustedPeer(r); ok {
		return peer, nil
	}
	if uid, ok := PeerUID(r.Context()); ok {
		// The socket's file mode should have kept this caller out.
		return Identity{Method: MethodSocket, Name: "uid " + strconv.Itoa(uid)}, &Error{CodeNoCredentials, "uid " + strconv.Itoa(uid) + " may not use the agent's socket without a token"}
	}
	if a.anon != "" {
		return Identity{User: "anonymous", Role: a.anon, Method: MethodAnonymous, Name: "-"}, nil
	}
	return Identity{}, &Error{CodeNoCredentials, "this endpoint needs a token: send `Authorization: Bearer <token>` (set GPUMETER_TOKEN for the CLI)"}
}

// token checks a bearer token, the value of an Authorization header.
func (a *Authenticator) token(header string) (Identity, error) {
	secret, err := bearer(header)
	if err != nil {
		return Identity{}, err
	}
	_, id, err := a.lookup(HashToken(secret))
	return id, err
}

// bearer is the secret of an Authorization header's bearer token.
func bearer(header string) (string, error) {
	scheme, secret, _ := strings.Cut(header, " ")
	secret = strings.TrimSpace(secret)
	if !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return "", &Error{CodeBadToken, "the Authorization header must be `Bearer <token>`"}
	}
	return secret, nil
}

// lookup finds the token with hash h as the config holds it now: a token
// removed by a reload is not found, and an expired one is refused.
func (a *Authenticator) lookup(h [sha256.Size]byte) (config.Token, Identity, error) {
	t, ok := a.byHash[h]
	if !ok {
		return config.Token{}, Identity{}, &Error{CodeBadToken, "the token is not accepted: it is wrong or has been removed"}
	}
	if !t.Expires.IsZero() && !a.now().Before(t.Expires) {
		return t, Identity{Method: MethodToken, Name: t.ID, User: t.User}, &Error{CodeExpired, "the token expired at " + t.Expires.UTC().Format(time.RFC3339) + "; ask an admin for a new one"}
	}
	return t, Identity{User: t.User, Role: t.Role, Method: MethodToken, Name: t.ID}, nil
}

// trustedPeer is the identity of a request from a Unix socket peer that
// is admin by its uid; false for any other request.
func (a *Authenticator) trustedPeer(r *http.Request) (Identity, bool) {
	uid, ok := PeerUID(r.Context())
	if !ok || !a.uids[uid] {
		return Identity{}, false
	}
	return Identity{User: "uid:" + strconv.Itoa(uid), Role: config.RoleAdmin, Method: MethodSocket, Name: "uid " + strconv.Itoa(uid)}, true
}

// IsAuthError reports whether err is an authentication failure.
func IsAuthError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

type peerKey struct{}

// WithPeerUID marks a context as belonging to a Unix socket connection
// from uid; the server's ConnContext calls it.
func WithPeerUID(ctx context.Context, uid int) context.Context {
	return context.WithValue(ctx, peerKey{}, uid)
}

// PeerUID is the uid of the Unix socket peer a request came over.
func PeerUID(ctx context.Context) (int, bool) {
	uid, ok := ctx.Value(peerKey{}).(int)
	return uid, ok
}
