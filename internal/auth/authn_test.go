package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/config"
)

// selfSigned makes a real certificate with common name cn, as a verified
// client certificate chain holds it.
func selfSigned(t *testing.T, cn string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"lab"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestAuthenticate(t *testing.T) {
	now := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	mint := func(id, user string, role config.Role, expires time.Time) (string, config.Token) {
		secret, tok, err := NewToken(id, user, role, expires)
		if err != nil {
			t.Fatal(err)
		}
		return secret, tok
	}
	aliceSecret, alice := mint("alice-laptop", "alice", config.RoleUser, time.Time{})
	oldSecret, old := mint("alice-old", "alice", config.RoleUser, now.Add(-time.Minute))
	dueSecret, due := mint("alice-due", "alice", config.RoleUser, now)
	soonSecret, soon := mint("alice-soon", "alice", config.RoleUser, now.Add(time.Second))
	ops := config.CertUser{Name: "ops.lab", User: "ops", Role: config.RoleAdmin}
	strict, err := New(Config{Tokens: []config.Token{alice, old, due, soon}, Certs: []config.CertUser{ops}, SocketUIDs: []int{0, 1000}})
	if err != nil {
		t.Fatal(err)
	}
	open, err := New(Config{Tokens: []config.Token{alice, old}, Anonymous: config.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []*Authenticator{strict, open} {
		a.now = func() time.Time { return now }
	}
	opsCert, strangerCert := selfSigned(t, "ops.lab"), selfSigned(t, "stranger.lab")
	none := -1

	tests := []struct {
		name   string
		a      *Authenticator
		header string            // Authorization
		cert   *x509.Certificate // a verified client certificate
		tls    bool              // TLS without a client certificate
		uid    int               // socket peer; none for TCP
		want   Identity
		code   string // "" when authenticated
		msg    string // what the error must say
	}{
		{name: "no credentials", a: strict, uid: none, code: CodeNoCredentials, msg: "send `Authorization: Bearer <token>`"},
		{name: "token", a: strict, uid: none, header: "Bearer " + aliceSecret,
			want: Identity{User: "alice", Role: config.RoleUser, Method: MethodToken, Name: "alice-laptop"}},
		{name: "lower-case scheme", a: strict, uid: none, header: "bearer " + aliceSecret,
			want: Identity{User: "alice", Role: config.RoleUser, Method: MethodToken, Name: "alice-laptop"}},
		{name: "spaces around the token", a: strict, uid: none, header: "Bearer   " + aliceSecret + " ",
			want: Identity{User: "alice", Role: config.RoleUser, Method: MethodToken, Name: "alice-laptop"}},
		{name: "basic auth", a: strict, uid: none, header: "Basic YWxpY2U6c2VjcmV0", code: CodeBadToken, msg: "must be `Bearer <token>`"},
		{name: "bare token", a: strict, uid: none, header: aliceSecret, code: CodeBadToken, msg: "must be `Bearer <token>`"},
		{name: "scheme only", a: strict, uid: none, header: "Bearer", code: CodeBadToken, msg: "must be `Bearer <token>`"},
		{name: "scheme and blanks", a: strict, uid: none, header: "Bearer    ", code: CodeBadToken, msg: "must be `Bearer <token>`"},
		{name: "unknown token", a: strict, uid: none, header: "Bearer gpm_nosuchtoken", code: CodeBadToken, msg: "the token is not accepted"},
		{name: "a hash is not a token", a: strict, uid: none, header: "Bearer " + hex.EncodeToString(alice.Hash[:]), code: CodeBadToken, msg: "the token is not accepted"},
		{name: "expired", a: strict, uid: none, header: "Bearer " + oldSecret,
			want: Identity{User: "alice", Method: MethodToken, Name: "alice-old"}, code: CodeExpired, msg: "expired at 2026-11-02T11:59:00Z"},
		{name: "expires this instant", a: strict, uid: none, header: "Bearer " + dueSecret,
			want: Identity{User: "alice", Method: MethodToken, Name: "alice-due"}, code: CodeExpired, msg: "expired at 2026-11-02T12:00:00Z"},
		{name: "expires in a second", a: strict, uid: none, header: "Bearer " + soonSecret,
			want: Identity{User: "alice", Role: config.RoleUser, Method: MethodToken, Name: "alice-soon"}},
		{name: "mapped certificate", a: strict, uid: none, cert: opsCert,
			want: Identity{User: "ops", Role: config.RoleAdmin, Method: MethodCert, Name: "ops.lab"}},
		{name: "unmapped certificate", a: strict, uid: none, cert: strangerCert,
			want: Identity{Method: MethodCert, Name: "stranger.lab"}, code: CodeUnknownCert, msg: `"stranger.lab" is valid but maps to no user`},
		{name: "a token beats a certificate", a: strict, uid: none, cert: opsCert, header: "Bearer " + aliceSecret,
			want: Identity{User: "alice", Role: config.RoleUser, Method: MethodToken, Name: "alice-laptop"}},
		{name: "a bad token is not saved by a certificate", a: strict, uid: none, cert: opsCert, header: "Bearer gpm_x",
			code: CodeBadToken, msg: "the token is not accepted"},
		{name: "TLS without a client certificate", a: strict, uid: none, tls: true, code: CodeNoCredentials, msg: "this endpoint needs a token"},
		{name: "socket root", a: strict, uid: 0,
			want: Identity{User: "uid:0", Role: config.RoleAdmin, Method: MethodSocket, Name: "uid 0"}},
		{name: "socket agent user", a: strict, uid: 1000,
			want: Identity{User: "uid:1000", Role: config.RoleAdmin, Method: MethodSocket, Name: "uid 1000"}},
		{name: "socket stranger", a: strict, uid: 1001,
			want: Identity{Method: MethodSocket, Name: "uid 1001"}, code: CodeNoCredentials, msg: "uid 1001 may not use the agent's socket without a token"},
		{name: "socket stranger with a token", a: strict, uid: 1001, header: "Bearer " + aliceSecret,
			want: Identity{User: "alice", Role: config.RoleUser, Method: MethodToken, Name: "alice-laptop"}},
		{name: "a bad token on a trusted socket is ignored", a: strict, uid: 0, header: "Bearer gpm_typo",
			want: Identity{User: "uid:0", Role: config.RoleAdmin, Method: MethodSocket, Name: "uid 0",
				Warning: "the token was ignored (the token is not accepted: it is wrong or has been removed): uid 0 on the agent's socket is admin by its kernel identity"}},
		{name: "an expired token from the agent's user is ignored", a: strict, uid: 1000, header: "Bearer " + oldSecret,
			want: Identity{User: "uid:1000", Role: config.RoleAdmin, Method: MethodSocket, Name: "uid 1000",
				Warning: "the token was ignored (the token expired at 2026-11-02T11:59:00Z; ask an admin for a new one): uid 1000 on the agent's socket is admin by its kernel identity"}},
		{name: "a malformed header on a trusted socket is ignored", a: strict, uid: 0, header: "Basic YWxpY2U6c2VjcmV0",
			want: Identity{User: "uid:0", Role: config.RoleAdmin, Method: MethodSocket, Name: "uid 0",
				Warning: "the token was ignored (the Authorization header must be `Bearer <token>`): uid 0 on the agent's socket is admin by its kernel identity"}},
		{name: "a good token on a trusted socket decides", a: strict, uid: 0, header: "Bearer " + aliceSecret,
			want: Identity{User: "alice", Role: config.RoleUser, Method: MethodToken, Name: "alice-laptop"}},
		{name: "a bad token from a stranger on the socket", a: strict, uid: 1001, header: "Bearer gpm_typo",
			code: CodeBadToken, msg: "the token is not accepted"},
		{name: "anonymous viewer", a: open, uid: none,
			want: Identity{User: "anonymous", Role: config.RoleViewer, Method: MethodAnonymous, Name: "-"}},
		{name: "a token still counts with anonymous on", a: open, uid: none, header: "Bearer " + aliceSecret,
			want: Identity{User: "alice", Role: config.RoleUser, Method: MethodToken, Name: "alice-laptop"}},
		{name: "a bad token is not let in as anonymous", a: open, uid: none, header: "Bearer gpm_typo",
			code: CodeBadToken, msg: "the token is not accepted"},
		{name: "an expired token is not let in as anonymous", a: open, uid: none, header: "Bearer " + oldSecret,
			want: Identity{User: "alice", Method: MethodToken, Name: "alice-old"}, code: CodeExpired, msg: "ask an admin for a new one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/api/v1/whoami", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			if tt.tls {
				r.TLS = &tls.ConnectionState{}
			}
			if tt.cert != nil {
				r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{tt.cert}}}
			}
			if tt.uid != none {
				r = r.WithContext(WithPeerUID(r.Context(), tt.uid))
			}
			got, err := tt.a.Authenticate(r)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("identity (-want +got):\n%s", diff)
			}
			if _, secret, _ := strings.Cut(tt.header, " "); len(strings.TrimSpace(secret)) > 4 && strings.Contains(got.Warning, strings.TrimSpace(secret)) {
				t.Errorf("warning %q repeats the token", got.Warning)
			}
			if tt.code == "" {
				if err != nil {
					t.Errorf("Authenticate() = %v, want no error", err)
				}
				return
			}
			var ae *Error
			if !errors.As(err, &ae) || !IsAuthError(err) {
				t.Fatalf("Authenticate() error = %v, want an *Error", err)
			}
			if ae.Code != tt.code || !strings.Contains(ae.Msg, tt.msg) {
				t.Errorf("error %s %q, want %s containing %q", ae.Code, ae.Msg, tt.code, tt.msg)
			}
			// A refusal never repeats what was sent as a token.
			if _, secret, _ := strings.Cut(tt.header, " "); len(strings.TrimSpace(secret)) > 4 && strings.Contains(ae.Msg, strings.TrimSpace(secret)) {
				t.Errorf("error %q repeats the token", ae.Msg)
			}
		})
	}
	if IsAuthError(errors.New("x")) || IsAuthError(nil) {
		t.Error("IsAuthError is true for an error that is not an *Error")
	}
}

func TestIdentityCaller(t *testing.T) {
	for _, tt := range []struct {
		id   Identity
		want string
	}{
		{Identity{}, "unknown"},
		{Identity{User: "anonymous", Role: config.RoleViewer, Method: MethodAnonymous, Name: "-"}, "anonymous"},
		{Identity{User: "alice", Role: config.RoleUser, Method: MethodToken, Name: "alice-laptop"}, "alice (token alice-laptop)"},
		{Identity{User: "uid:0", Role: config.RoleAdmin, Method: MethodSocket, Name: "uid 0"}, "uid:0 (socket uid 0)"},
		{Identity{Method: MethodCert, Name: "stranger.lab"}, "cert stranger.lab"},
	} {
		if got := tt.id.Caller(); got != tt.want {
			t.Errorf("%+v.Caller() = %q, want %q", tt.id, got, tt.want)
		}
	}
}

func TestNew(t *testing.T) {
	_, alice, _ := NewToken("alice", "alice", config.RoleUser, time.Time{})
	_, bob, _ := NewToken("bob", "bob", config.RoleUser, time.Time{})
	aliceAgain := alice
	aliceAgain.ID = "alice-2"
	bobRenamed := bob
	bobRenamed.ID = "alice"
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"the same ID twice", Config{Tokens: []config.Token{alice, bobRenamed}}, "auth.tokens.alice: given twice"},
		{"the same token twice", Config{Tokens: []config.Token{alice, aliceAgain}}, "auth.tokens.alice-2: the same token as auth.tokens.alice"},
		{"anonymous admin", Config{Anonymous: config.RoleAdmin}, `auth.anonymous: "admin": anonymous callers may at most be viewers`},
		{"anonymous user", Config{Anonymous: config.RoleUser}, `auth.anonymous: "user"`},
		{"anonymous nonsense", Config{Anonymous: "root"}, `auth.anonymous: "root"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New() = %v, %v; want an error containing %q", a, err, tt.want)
			}
		})
	}
	for _, cfg := range []Config{{}, {Tokens: []config.Token{alice, bob}, Anonymous: config.RoleViewer, SocketUIDs: []int{0}}} {
		if _, err := New(cfg); err != nil {
			t.Errorf("New(%+v) = %v", cfg, err)
		}
	}
}

func TestPeerUID(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if uid, ok := PeerUID(r.Context()); ok {
		t.Errorf("PeerUID of a plain request = %d, true", uid)
	}
	if uid, ok := PeerUID(WithPeerUID(r.Context(), 0)); !ok || uid != 0 {
		t.Errorf("PeerUID = %d, %v; want 0, true", uid, ok)
	}
}
