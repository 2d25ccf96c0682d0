package listener_test

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/bcrypt"

	"github.com/gpumeter/gpumeter/internal/listener"
)

// writeWeb writes a web config file into dir and returns its path.
func writeWeb(t *testing.T, dir, content string) string {
	t.Helper()
	path := filepath.Join(dir, "web.yml")
	writeFile(t, path, []byte(content))
	return path
}

func loadWeb(t *testing.T, content string) *listener.Web {
	t.Helper()
	path := writeWeb(t, t.TempDir(), content)
	w, err := listener.LoadWeb(path)
	if err != nil {
		t.Fatalf("LoadWeb(%s): %v\n%s", path, err, content)
	}
	return w
}

func bcryptHash(t *testing.T, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

// guarded puts a handler that counts its calls behind w.
func guarded(w *listener.Web) (http.Handler, *int) {
	calls := new(int)
	h := w.Guard(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		*calls++
		fmt.Fprint(rw, "served")
	}))
	return h, calls
}

func get(h http.Handler, user, pass string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if user != "" || pass != "" {
		r.SetBasicAuth(user, pass)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func TestGuardBasicAuth(t *testing.T) {
	w := loadWeb(t, fmt.Sprintf("basic_auth_users:\n  alice: %s\n  bob: %s\n", bcryptHash(t, "s3cret"), bcryptHash(t, "hunter2")))
	h, calls := guarded(w)

	tests := []struct {
		name       string
		user, pass string
		want       int
	}{
		{name: "no credentials", want: http.StatusUnauthorized},
		{name: "wrong password", user: "alice", pass: "hunter2", want: http.StatusUnauthorized},
		{name: "unknown user", user: "mallory", pass: "s3cret", want: http.StatusUnauthorized},
		{name: "empty password", user: "alice", want: http.StatusUnauthorized},
		{name: "right password", user: "alice", pass: "s3cret", want: http.StatusOK},
		{name: "right password again", user: "alice", pass: "s3cret", want: http.StatusOK},
		{name: "wrong password after a right one", user: "alice", pass: "s3cret ", want: http.StatusUnauthorized},
		{name: "another user's password", user: "bob", pass: "s3cret", want: http.StatusUnauthorized},
		{name: "second user", user: "bob", pass: "hunter2", want: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := *calls
			rec := get(h, tt.user, tt.pass)
			if rec.Code != tt.want {
				t.Fatalf("status = %d, want %d", rec.Code, tt.want)
			}
			served := *calls > before
			if tt.want == http.StatusOK {
				if !served || rec.Body.String() != "served" {
					t.Errorf("the handler was not reached: body %q", rec.Body)
				}
				return
			}
			if served {
				t.Error("the handler was reached without the right credentials")
			}
			if got, want := rec.Header().Get("WWW-Authenticate"), `Basic realm="gpumeter"`; got != want {
				t.Errorf("WWW-Authenticate = %q, want %q", got, want)
			}
		})
	}
}

func TestGuardHeaders(t *testing.T) {
	w := loadWeb(t, fmt.Sprintf(`basic_auth_users:
  alice: %s
http_server_config:
  headers:
    X-Frame-Options: deny
    X-Content-Type-Options: nosniff
    Strict-Transport-Security: max-age=31536000
`, bcryptHash(t, "s3cret")))
	h, _ := guarded(w)
	want := map[string]string{
		"X-Frame-Options":           "deny",
		"X-Content-Type-Options":    "nosniff",
		"Strict-Transport-Security": "max-age=31536000",
	}
	for _, pass := range []string{"s3cret", "wrong"} {
		rec := get(h, "alice", pass)
		got := map[string]string{}
		for k := range want {
			got[k] = rec.Header().Get(k)
		}
		if diff := cmp.Diff(got, want); diff != "" {
			t.Errorf("headers with password %q, status %d (-got +want):\n%s", pass, rec.Code, diff)
		}
	}
}

func TestGuardRateLimit(t *testing.T) {
	w := loadWeb(t, "rate_limit:\n  interval: 1h\n  burst: 2\n")
	h, calls := guarded(w)
	var got []int
	for range 4 {
		got = append(got, get(h, "", "").Code)
	}
	want := []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests, http.StatusTooManyRequests}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("statuses (-got +want):\n%s", diff)
	}
	if *calls != 2 {
		t.Errorf("the handler was called %d times, want 2", *calls)
	}
}

func TestGuardNoLimitWithoutInterval(t *testing.T) {
	w := loadWeb(t, "rate_limit:\n  burst: 1\n")
	h, _ := guarded(w)
	for i := range 5 {
		if rec := get(h, "", ""); rec.Code != http.StatusOK {
			t.Fatalf("request %d: status %d, want %d", i, rec.Code, http.StatusOK)
		}
	}
}

func TestGuardNil(t *testing.T) {
	var w *listener.Web
	h, calls := guarded(w)
	rec := get(h, "", "")
	if rec.Code != http.StatusOK || *calls != 1 {
		t.Errorf("a nil Web's guard: status %d after %d calls, want %d after 1", rec.Code, *calls, http.StatusOK)
	}
	if w.HasTLS() {
		t.Error("a nil Web has TLS")
	}
}

func TestLoadWebEmpty(t *testing.T) {
	w := loadWeb(t, "")
	h, calls := guarded(w)
	if rec := get(h, "", ""); rec.Code != http.StatusOK || *calls != 1 {
		t.Errorf("an empty web config's guard: status %d, want %d", rec.Code, http.StatusOK)
	}
}

func TestLoadWebErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    string // also in the error, besides the path
	}{
		{name: "unknown key", content: "basic_auth_user:\n  alice: x\n", want: "basic_auth_user"},
		{name: "unknown nested key", content: "http_server_config:\n  http3: true\n", want: "http3"},
		{name: "bad bcrypt hash", content: "basic_auth_users:\n  alice: s3cret\n"},
		{name: "header not allowed", content: "http_server_config:\n  headers:\n    Server: gpumeter\n", want: "Server"},
		{name: "bad header value", content: "http_server_config:\n  headers:\n    X-Frame-Options: allow\n", want: "X-Frame-Options"},
		{name: "burst zero", content: "rate_limit:\n  interval: 1s\n", want: "burst"},
		{name: "bad interval", content: "rate_limit:\n  interval: soon\n  burst: 1\n"},
		{name: "not YAML", content: "basic_auth_users: [\n"},
		{name: "missing cert file", content: "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n", want: "missing.crt"},
		{name: "key without cert", content: "tls_server_config:\n  key_file: server.key\n", want: "cert"},
		{name: "client CA without client auth", content: "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_ca_file: ca.crt\n", want: "Client Auth"},
		{name: "unknown client auth", content: "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: Maybe\n", want: "Maybe"},
		{name: "unknown TLS version", content: "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS14\n", want: "TLS14"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ca := newCert(t, dir, "ca", time.Now().Add(24*time.Hour), nil)
			newCert(t, dir, "server", time.Now().Add(24*time.Hour), ca)
			path := writeWeb(t, dir, tt.content)
			w, err := listener.LoadWeb(path)
			if err == nil {
				t.Fatalf("LoadWeb(%s) = %v, want an error\n%s", path, w, tt.content)
			}
			for _, want := range []string{"web.config_file", path, tt.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("LoadWeb error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestLoadWebMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "web.yml")
	if _, err := listener.LoadWeb(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("LoadWeb(%s) = %v, want an error naming the file", path, err)
	}
}

func TestWebTLS(t *testing.T) {
	dir := t.TempDir()
	valid := time.Now().Add(24 * time.Hour)
	ca := newCert(t, dir, "ca", valid, nil)
	server := newCert(t, dir, "server", valid, ca)
	client := newCert(t, dir, "client", valid, ca)
	const files = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"

	tests := []struct {
		name       string
		content    string
		protos     []string
		clientCert bool
	}{
		{name: "http2 off by default", content: files, protos: []string{"http/1.1"}},
		{name: "http2 off", content: files + "http_server_config:\n  http2: false\n", protos: []string{"http/1.1"}},
		{name: "http2 on", content: files + "http_server_config:\n  http2: true\n", protos: []string{"h2", "http/1.1"}},
		{
			name:       "client certificates",
			content:    files + "  client_ca_file: ca.crt\n  client_auth_type: RequireAndVerifyClientCert\n",
			protos:     []string{"http/1.1"},
			clientCert: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The files are named relative to the web config's directory,
			// which is not the working directory.
			path := writeWeb(t, dir, tt.content)
			w, err := listener.LoadWeb(path)
			if err != nil {
				t.Fatalf("LoadWeb: %v", err)
			}
			if !w.HasTLS() {
				t.Fatal("HasTLS() = false with a tls_server_config")
			}
			cfg, err := w.TLS()
			if err != nil {
				t.Fatalf("TLS(): %v", err)
			}
			if diff := cmp.Diff(cfg.NextProtos, tt.protos); diff != "" {
				t.Errorf("NextProtos (-got +want):\n%s", diff)
			}
			if cfg.MinVersion < tls.VersionTLS12 {
				t.Errorf("MinVersion = %#x, want TLS 1.2 at least", cfg.MinVersion)
			}

			addr := serveTLS(t, cfg)
			cc := &tls.Config{RootCAs: pool(ca), ServerName: "localhost", NextProtos: []string{"h2", "http/1.1"}}
			if tt.clientCert {
				if _, err := handshake(addr, cc); err == nil {
					t.Error("a client without a certificate was served")
				}
				cc.Certificates = []tls.Certificate{client.tls}
			}
			st, err := handshake(addr, cc)
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if !st.PeerCertificates[0].Equal(server.Leaf) {
				t.Errorf("the server presented %s, want %s", st.PeerCertificates[0].Subject.CommonName, server.Leaf.Subject.CommonName)
			}
			if got, want := st.NegotiatedProtocol, tt.protos[0]; got != want {
				t.Errorf("a client offering h2 and http/1.1 negotiated %q, want %q", got, want)
			}
		})
	}
}

// exporter-toolkit reads the certificate files again on each handshake,
// so a renewed certificate is served without a reload.
func TestWebTLSRereadsFiles(t *testing.T) {
	dir := t.TempDir()
	valid := time.Now().Add(24 * time.Hour)
	ca := newCert(t, dir, "ca", valid, nil)
	newCert(t, dir, "server", valid, ca)
	w, err := listener.LoadWeb(writeWeb(t, dir, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := w.TLS()
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cfg)
	renewed := newCert(t, dir, "server", valid, ca)
	if got := servedBy(t, addr, pool(ca)); !got.Equal(renewed.Leaf) {
		t.Errorf("the handshake saw serial %s, want the renewed %s", got.SerialNumber, renewed.Leaf.SerialNumber)
	}
}

func TestWebHasTLS(t *testing.T) {
	w := loadWeb(t, fmt.Sprintf("basic_auth_users:\n  alice: %s\n", bcryptHash(t, "s3cret")))
	if w.HasTLS() {
		t.Error("HasTLS() = true without a tls_server_config")
	}
	if cfg, err := w.TLS(); err == nil {
		t.Errorf("TLS() without a tls_server_config = %v, want an error", cfg)
	}
}

// FuzzLoadWeb loads arbitrary web config files: LoadWeb never panics, its
// errors name the file, and a file it accepts gives a TLS config when it
// has TLS and a guard that answers.
func FuzzLoadWeb(f *testing.F) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		"",
		"{}",
		"basic_auth_users:\n  alice: " + string(hash) + "\n",
		"basic_auth_users:\n  alice: s3cret\n",
		"basic_auth_users:\n  alice: $2y$31$abcdefghijklmnopqrstuv\n",
		"http_server_config:\n  http2: true\n  headers:\n    X-Frame-Options: deny\n",
		"rate_limit:\n  interval: 1s\n  burst: 3\n",
		"rate_limit:\n  interval: -1s\n  burst: -1\n",
		"tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
		"tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_ca_file: ca.crt\n  client_auth_type: VerifyClientCertIfGiven\n  min_version: TLS13\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n  curve_preferences: [X25519]\n",
		"tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n",
		"tls_server_config: {client_auth_type: RequireAnyClientCert}\n",
		"basic_auth_users: [alice]\n",
		"a: &a [*a, *a]\n",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	ca := newCert(f, dir, "ca", time.Now().Add(24*time.Hour), nil)
	newCert(f, dir, "server", time.Now().Add(24*time.Hour), ca)
	path := filepath.Join(dir, "web.yml")
	f.Fuzz(func(t *testing.T, data []byte) {
		// The files a config names are read whole; the device and process
		// trees hold files that never end.
		for _, s := range []string{"/dev", "/proc", "/sys"} {
			if bytes.Contains(data, []byte(s)) {
				t.Skip()
			}
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		w, err := listener.LoadWeb(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Errorf("LoadWeb error %q does not name %s", err, path)
			}
			return
		}
		if w.HasTLS() {
			if _, err := w.TLS(); err != nil {
				t.Errorf("LoadWeb accepted a tls_server_config that TLS() refuses: %v", err)
			}
		}
		switch code := get(w.Guard(http.NotFoundHandler()), "", "").Code; code {
		case http.StatusNotFound, http.StatusUnauthorized, http.StatusTooManyRequests:
		default:
			t.Errorf("the guard answered %d", code)
		}
	})
}
