package listener_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/listener"
)

// testCert is a certificate and its key, written to PEM files.
type testCert struct {
	CertFile, KeyFile string
	Leaf              *x509.Certificate
	key               *ecdsa.PrivateKey
	tls               tls.Certificate
}

// newCert writes name.crt and name.key to dir: a certificate for
// localhost and 127.0.0.1 valid until notAfter, signed by parent, or a
// self-signed CA when parent is nil.
func newCert(t testing.TB, dir, name string, notAfter time.Time, parent *testCert) *testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notAfter.Add(-48 * time.Hour),
		NotAfter:              notAfter,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  parent == nil,
	}
	signer, issuer := key, tmpl
	if parent != nil {
		signer, issuer = parent.key, parent.Leaf
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	c := &testCert{
		CertFile: filepath.Join(dir, name+".crt"),
		KeyFile:  filepath.Join(dir, name+".key"),
		Leaf:     leaf,
		key:      key,
	}
	writeFile(t, c.CertFile, certPEM)
	writeFile(t, c.KeyFile, keyPEM)
	if c.tls, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	return c
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func pool(certs ...*testCert) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c.Leaf)
	}
	return p
}

// serveTLS accepts TLS connections on a loopback port with cfg until the
// test ends; it writes "k" to each client whose handshake succeeds.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := tls.NewListener(tcp, cfg)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				if _, err := c.Write([]byte("k")); err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return tcp.Addr().String()
}

// handshake connects to addr with cfg and reads the server's greeting, so
// that a client certificate the server turns down fails here even under
// TLS 1.3, where the client finishes its side of the handshake first.
func handshake(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return tls.ConnectionState{}, err
	}
	return c.ConnectionState(), nil
}

// servedBy handshakes with addr, trusting roots, and returns the
// certificate the server presented.
func servedBy(t *testing.T, addr string, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	st, err := handshake(addr, &tls.Config{RootCAs: roots, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("handshake with %s: %v", addr, err)
	}
	return st.PeerCertificates[0]
}

func TestLoadTLS(t *testing.T) {
	dir := t.TempDir()
	valid := time.Now().Add(24 * time.Hour)
	ca := newCert(t, dir, "ca", valid, nil)
	server := newCert(t, dir, "server", valid, ca)

	cfg, err := listener.LoadTLS(listener.TLSFiles{CertFile: server.CertFile, KeyFile: server.KeyFile})
	if err != nil {
		t.Fatalf("LoadTLS: %v", err)
	}
	if got, want := cfg.MinVersion, uint16(tls.VersionTLS12); got != want {
		t.Errorf("MinVersion = %#x, want %#x", got, want)
	}
	// HTTP/2 is left out on purpose: its server does not honour the
	// read-header timeout.
	if diff := cmp.Diff(cfg.NextProtos, []string{"http/1.1"}); diff != "" {
		t.Errorf("NextProtos (-got +want):\n%s", diff)
	}
	if got, want := cfg.ClientAuth, tls.NoClientCert; got != want {
		t.Errorf("ClientAuth without a CA = %s, want %s", got, want)
	}
	if len(cfg.Certificates) != 1 || cfg.Certificates[0].Leaf == nil || !cfg.Certificates[0].Leaf.Equal(server.Leaf) {
		t.Fatalf("Certificates = %v, want the one leaf of %s", cfg.Certificates, server.CertFile)
	}

	st, err := handshake(serveTLS(t, cfg), &tls.Config{RootCAs: pool(ca), ServerName: "localhost", NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if !st.PeerCertificates[0].Equal(server.Leaf) {
		t.Errorf("the server presented %s, want %s", st.PeerCertificates[0].Subject, server.Leaf.Subject)
	}
	if got, want := st.NegotiatedProtocol, "http/1.1"; got != want {
		t.Errorf("a client offering h2 negotiated %q, want %q", got, want)
	}
}

func TestLoadTLSClientCA(t *testing.T) {
	dir := t.TempDir()
	valid := time.Now().Add(24 * time.Hour)
	ca := newCert(t, dir, "ca", valid, nil)
	server := newCert(t, dir, "server", valid, ca)
	client := newCert(t, dir, "client", valid, ca)
	stranger := newCert(t, t.TempDir(), "stranger", valid, nil)

	tests := []struct {
		name     string
		require  bool
		want     tls.ClientAuthType
		noCertOK bool
	}{
		{name: "optional", require: false, want: tls.VerifyClientCertIfGiven, noCertOK: true},
		{name: "required", require: true, want: tls.RequireAndVerifyClientCert, noCertOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := listener.LoadTLS(listener.TLSFiles{
				CertFile: server.CertFile, KeyFile: server.KeyFile,
				ClientCAFile: ca.CertFile, RequireClientCert: tt.require,
			})
			if err != nil {
				t.Fatalf("LoadTLS: %v", err)
			}
			if cfg.ClientAuth != tt.want {
				t.Errorf("ClientAuth = %s, want %s", cfg.ClientAuth, tt.want)
			}
			addr := serveTLS(t, cfg)
			base := &tls.Config{RootCAs: pool(ca), ServerName: "localhost"}

			withCert := base.Clone()
			withCert.Certificates = []tls.Certificate{client.tls}
			if _, err := handshake(addr, withCert); err != nil {
				t.Errorf("a client certificate the CA signed: %v", err)
			}

			// Certificates would send nothing here, as the stranger is not
			// among the CAs the server asks for; this sends it anyway.
			withStranger := base.Clone()
			withStranger.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return &stranger.tls, nil
			}
			if _, err := handshake(addr, withStranger); err == nil {
				t.Error("a client certificate the CA did not sign was accepted")
			}

			_, err = handshake(addr, base)
			if got := err == nil; got != tt.noCertOK {
				t.Errorf("no client certificate: err = %v, want accepted %t", err, tt.noCertOK)
			}
		})
	}
}

func TestLoadTLSErrors(t *testing.T) {
	dir := t.TempDir()
	valid := time.Now().Add(24 * time.Hour)
	ca := newCert(t, dir, "ca", valid, nil)
	server := newCert(t, dir, "server", valid, ca)
	other := newCert(t, dir, "other", valid, ca)
	expired := newCert(t, dir, "expired", time.Now().Add(-time.Hour), ca)
	missing := filepath.Join(dir, "missing.pem")
	notPEM := filepath.Join(dir, "ca.txt")
	writeFile(t, notPEM, []byte("not a certificate\n"))

	tests := []struct {
		name string
		f    listener.TLSFiles
		want []string // each in the error
	}{
		{
			name: "missing cert file",
			f:    listener.TLSFiles{CertFile: missing, KeyFile: server.KeyFile},
			want: []string{"tls.cert_file", missing},
		},
		{
			name: "missing key file",
			f:    listener.TLSFiles{CertFile: server.CertFile, KeyFile: missing},
			want: []string{"tls.key_file", missing},
		},
		{
			name: "key of another certificate",
			f:    listener.TLSFiles{CertFile: server.CertFile, KeyFile: other.KeyFile},
			want: []string{"tls.cert_file", server.CertFile, other.KeyFile, "does not match"},
		},
		{
			name: "expired certificate",
			f:    listener.TLSFiles{CertFile: expired.CertFile, KeyFile: expired.KeyFile},
			want: []string{"tls.cert_file", expired.CertFile, "expired", expired.Leaf.NotAfter.UTC().Format(time.RFC3339)},
		},
		{
			name: "missing CA file",
			f:    listener.TLSFiles{CertFile: server.CertFile, KeyFile: server.KeyFile, ClientCAFile: missing},
			want: []string{"tls.client_ca_file", missing},
		},
		{
			name: "CA file without PEM",
			f:    listener.TLSFiles{CertFile: server.CertFile, KeyFile: server.KeyFile, ClientCAFile: notPEM},
			want: []string{"tls.client_ca_file", notPEM, "no PEM"},
		},
		{
			name: "CA file holding a key only",
			f:    listener.TLSFiles{CertFile: server.CertFile, KeyFile: server.KeyFile, ClientCAFile: ca.KeyFile},
			want: []string{"tls.client_ca_file", ca.KeyFile, "no PEM"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := listener.LoadTLS(tt.f)
			if err == nil {
				t.Fatalf("LoadTLS(%+v) = %v, want an error", tt.f, cfg)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("LoadTLS error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestReloadableTLS(t *testing.T) {
	dir := t.TempDir()
	valid := time.Now().Add(24 * time.Hour)
	ca := newCert(t, dir, "ca", valid, nil)
	a := newCert(t, dir, "a", valid, ca)
	b := newCert(t, dir, "b", valid, ca)
	roots := pool(ca)

	r, err := listener.NewReloadableTLS(listener.TLSFiles{CertFile: a.CertFile, KeyFile: a.KeyFile})
	if err != nil {
		t.Fatalf("NewReloadableTLS: %v", err)
	}
	cfg := r.Config()
	if diff := cmp.Diff(cfg.NextProtos, []string{"http/1.1"}); diff != "" {
		t.Errorf("NextProtos (-got +want):\n%s", diff)
	}
	addr := serveTLS(t, cfg)

	check := func(when string, want *testCert) {
		t.Helper()
		if got := servedBy(t, addr, roots); !got.Equal(want.Leaf) {
			t.Errorf("%s: the handshake saw %s, want %s", when, got.Subject.CommonName, want.Leaf.Subject.CommonName)
		}
		if got := r.Certificate(); got == nil || !got.Equal(want.Leaf) {
			t.Errorf("%s: Certificate() = %v, want %s", when, got, want.Leaf.Subject.CommonName)
		}
	}
	check("first load", a)

	if err := r.Reload(listener.TLSFiles{CertFile: b.CertFile, KeyFile: b.KeyFile}); err != nil {
		t.Fatalf("Reload(b): %v", err)
	}
	check("after Reload(b)", b)

	broken := listener.TLSFiles{CertFile: a.CertFile, KeyFile: b.KeyFile}
	err = r.Reload(broken)
	if err == nil || !strings.Contains(err.Error(), a.CertFile) {
		t.Errorf("Reload(%+v) = %v, want an error naming %s", broken, err, a.CertFile)
	}
	check("after a failed Reload", b)

	// The reloaded config also brings its client authentication.
	client := newCert(t, dir, "client", valid, ca)
	if err := r.Reload(listener.TLSFiles{CertFile: a.CertFile, KeyFile: a.KeyFile, ClientCAFile: ca.CertFile, RequireClientCert: true}); err != nil {
		t.Fatalf("Reload(a, client CA): %v", err)
	}
	if _, err := handshake(addr, &tls.Config{RootCAs: roots, ServerName: "localhost"}); err == nil {
		t.Error("a client without a certificate was served after the reload required one")
	}
	st, err := handshake(addr, &tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{client.tls}})
	if err != nil {
		t.Fatalf("a client with a certificate after the reload: %v", err)
	}
	if !st.PeerCertificates[0].Equal(a.Leaf) {
		t.Errorf("after Reload(a) the handshake saw %s, want a", st.PeerCertificates[0].Subject.CommonName)
	}
}

func TestNewReloadableTLSError(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.crt")
	_, err := listener.NewReloadableTLS(listener.TLSFiles{CertFile: missing, KeyFile: missing})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("NewReloadableTLS with missing files = %v, want an error naming %s", err, missing)
	}
}

// The certificate a handshake sees is the one in the files when they were
// loaded, not what the files hold later: the agent reloads on purpose.
func TestReloadableTLSKeepsLoadedFiles(t *testing.T) {
	dir := t.TempDir()
	valid := time.Now().Add(24 * time.Hour)
	ca := newCert(t, dir, "ca", valid, nil)
	a := newCert(t, dir, "a", valid, ca)
	b := newCert(t, t.TempDir(), "b", valid, ca)

	r, err := listener.NewReloadableTLS(listener.TLSFiles{CertFile: a.CertFile, KeyFile: a.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, r.Config())
	for _, f := range []struct{ from, to string }{{b.CertFile, a.CertFile}, {b.KeyFile, a.KeyFile}} {
		data, err := os.ReadFile(f.from)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, f.to, data)
	}
	if got := servedBy(t, addr, pool(ca)); !bytes.Equal(got.Raw, a.Leaf.Raw) {
		t.Errorf("the handshake saw %s after the files changed, want a until a reload", got.Subject.CommonName)
	}
}
