// Package listener opens what the agent serves on: a TCP listener with
// TLS that can be reloaded, the local Unix socket, and the guard the
// Prometheus exporter-toolkit web config puts on the open endpoints.
package listener

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// TLSFiles name the listener's certificate and the CA client certificates
// are checked against.
type TLSFiles struct {
	CertFile, KeyFile string
	ClientCAFile      string
	RequireClientCert bool
}

// nextProtos are the protocols the listener offers: HTTP/1.1 only. Go's
// HTTP/2 server holds a client to neither api.read_header_timeout nor
// api.read_timeout (it waits 10 s for the preface and as long as a
// client likes for the rest of a frame), so offering it would let a slow
// client keep a connection open long after an HTTP/1.1 one is cut off.
var nextProtos = []string{"http/1.1"}

// LoadTLS reads the files into a server TLS config, TLS 1.2 at least.
// Every error names the file at fault.
func LoadTLS(f TLSFiles) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls.cert_file %s, tls.key_file %s: %w", f.CertFile, f.KeyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("tls.cert_file %s: %w", f.CertFile, err)
	}
	if now := time.Now(); now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("tls.cert_file %s: the certificate expired at %s", f.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	cert.Leaf = leaf
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: nextProtos}
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.client_ca_file %s: no PEM certificate in it", f.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		if f.RequireClientCert {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return cfg, nil
}

// ReloadableTLS serves the TLS config last loaded; Reload swaps in a new
// one for the connections that follow, and keeps the old one when the
// new files do not load.
type ReloadableTLS struct {
	cur atomic.Pointer[tls.Config]
}

// NewReloadableTLS loads f.
func NewReloadableTLS(f TLSFiles) (*ReloadableTLS, error) {
	r := &ReloadableTLS{}
	return r, r.Reload(f)
}

// Reload loads f and, when it loads, serves it from the next handshake.
func (r *ReloadableTLS) Reload(f TLSFiles) error {
	cfg, err := LoadTLS(f)
	if err != nil {
		return err
	}
	r.cur.Store(cfg)
	return nil
}

// Config is the listener's TLS config: it hands each handshake the
// current one.
func (r *ReloadableTLS) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cfg := r.cur.Load()
			if cfg == nil {
				return nil, errors.New("no TLS certificate loaded")
			}
			return cfg, nil
		},
	}
}

// Certificate is the certificate now served, for tests and logs.
func (r *ReloadableTLS) Certificate() *x509.Certificate {
	return r.cur.Load().Certificates[0].Leaf
}
