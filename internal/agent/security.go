package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/listener"
)

// security is who may call the agent and how the listener is secured;
// every part can be swapped whole by a reload.
type security struct {
	auth    atomic.Pointer[auth.Authenticator]
	limiter atomic.Pointer[auth.Limiter]
	web     atomic.Pointer[listener.Web] // nil: no web config file
	tls     *listener.ReloadableTLS      // nil: no tls.* keys
	webTLS  bool                         // the web config file serves TLS
	// demoToken is the admin token the demo makes for itself when the
	// config has none, so that its page can be opened at once.
	demoToken string
	// limits is the rate the limiter was built with, to keep its
	// buckets across a reload that does not change it.
	limits [2]float64
}

// socketUIDs are the Unix socket peers let in without a token: root, and
// the user the agent runs as.
func socketUIDs() []int {
	return slices.Compact([]int{0, os.Geteuid()})
}

func tlsFiles(c *config.Config) listener.TLSFiles {
	return listener.TLSFiles{CertFile: c.TLS.CertFile, KeyFile: c.TLS.KeyFile, ClientCAFile: c.TLS.ClientCAFile, RequireClientCert: c.TLS.ClientAuth == "required"}
}

// authConfig is the authenticator's config: the tokens and certificates
// in the order of their names; socketUIDs are the Unix socket peers let
// in without a token.
func authConfig(c *config.Config, socketUIDs []int) auth.Config {
	ac := auth.Config{SocketUIDs: socketUIDs}
	for _, id := range slices.Sorted(maps.Keys(c.Auth.Tokens)) {
		ac.Tokens = append(ac.Tokens, c.Auth.Tokens[id])
	}
	for _, cn := range slices.Sorted(maps.Keys(c.Auth.ClientCerts)) {
		ac.Certs = append(ac.Certs, c.Auth.ClientCerts[cn])
	}
	if c.Auth.Anonymous == "viewer" {
		ac.Anonymous = config.RoleViewer
	}
	return ac
}

// prepared are the pieces a config gives, built and checked before any
// is put in force.
type prepared struct {
	auth    *auth.Authenticator
	web     *listener.Web
	webTLS  bool
	limiter *auth.Limiter
}

func (s *security) prepare(cfg *config.Config) (prepared, error) {
	var p prepared
	ac := authConfig(cfg, socketUIDs())
	if s.demoToken != "" {
		ac.Tokens = append(ac.Tokens, config.Token{ID: "demo", User: "demo", Role: config.RoleAdmin, Hash: auth.HashToken(s.demoToken)})
	}
	var err error
	if p.auth, err = auth.New(ac); err != nil {
		return p, err
	}
	if cfg.WebConfigFile != "" {
		if p.web, err = listener.LoadWeb(cfg.WebConfigFile); err != nil {
			return p, err
		}
		p.webTLS = p.web.HasTLS()
		if p.webTLS && cfg.TLS.CertFile != "" {
			return p, listener.ErrBothTLS
		}
		if p.webTLS {
			if _, err := p.web.TLS(); err != nil {
				return p, err
			}
		}
	}
	if lim := [2]float64{cfg.API.RateLimit, float64(cfg.API.RateBurst)}; lim != s.limits || s.limiter.Load() == nil {
		p.limiter = auth.NewLimiter(cfg.API.RateLimit, cfg.API.RateBurst, 0)
	}
	return p, nil
}

// initSecurity builds the agent's security from its config.
func (a *Agent) initSecurity(demo bool) error {
	s := &a.sec
	if demo && len(a.cfg.Auth.Tokens) == 0 {
		secret, _, err := auth.NewToken("demo", "demo", config.RoleAdmin, time.Time{})
		if err != nil {
			return err
		}
		s.demoToken = secret
	}
	p, err := s.prepare(&a.cfg)
	if err != nil {
		return err
	}
	if a.cfg.TLS.CertFile != "" {
		if s.tls, err = listener.NewReloadableTLS(tlsFiles(&a.cfg)); err != nil {
			return err
		}
	}
	s.webTLS = p.webTLS
	s.put(p, &a.cfg)
	return nil
}

func (s *security) put(p prepared, cfg *config.Config) {
	s.auth.Store(p.auth)
	s.web.Store(p.web)
	if p.limiter != nil {
		s.limiter.Store(p.limiter)
		s.limits = [2]float64{cfg.API.RateLimit, float64(cfg.API.RateBurst)}
	}
}

// reload checks a new config's security settings and puts them in force
// together, or none of them.
func (s *security) reload(cfg *config.Config) error {
	p, err := s.prepare(cfg)
	if err != nil {
		return err
	}
	switch {
	case (s.tls != nil) != (cfg.TLS.CertFile != ""), s.webTLS != p.webTLS:
		return errors.New("tls: turning HTTPS on or off needs a restart")
	case s.tls != nil:
		// Loaded last: a certificate that does not load leaves the rest
		// as it was, and once it has loaded nothing else can fail.
		if err := s.tls.Reload(tlsFiles(cfg)); err != nil {
			return err
		}
	}
	s.put(p, cfg)
	return nil
}

// tlsConfig is the listener's TLS, or nil for plain HTTP.
func (s *security) tlsConfig() (*tls.Config, error) {
	switch {
	case s.tls != nil:
		return s.tls.Config(), nil
	case s.webTLS:
		// exporter-toolkit reads the certificate files at each handshake.
		return s.web.Load().TLS()
	}
	return nil, nil
}

// guardOpen puts an open endpoint (/metrics, /healthz) behind the web
// config file in force, when there is one.
func (s *security) guardOpen(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.web.Load().Guard(h).ServeHTTP(w, r)
	})
}

// DemoToken is the admin token the demo made for itself, or "".
func (a *Agent) DemoToken() string { return a.sec.demoToken }

// Scheme is http or https, as the TCP listener serves.
func (a *Agent) Scheme() string {
	if a.sec.tls != nil || a.sec.webTLS {
		return "https"
	}
	return "http"
}

// listen opens the TCP listener, with TLS when it is configured, and the
// Unix socket unless it is off.
func (a *Agent) listen() error {
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", a.cfg.Listen, err)
	}
	tc, err := a.sec.tlsConfig()
	if err != nil {
		ln.Close()
		return err
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	a.listener = ln
	// The default socket lives in the data directory; the demo's in its
	// own.
	path := a.cfg.SocketPath()
	if a.tempDir != "" {
		path = a.demoSocket()
	}
	if path != "" && !(a.noDataDir && a.cfg.API.Socket == "") {
		sock, err := listener.Socket(path)
		if err != nil && a.socketOptional {
			a.log.Warn("the demo serves no Unix socket", "err", err)
			return nil
		}
		if err != nil {
			ln.Close()
			return err
		}
		a.socket = sock
		a.closers = append(a.closers, func() error {
			// The listener closing removes the file; this covers a
			// listener that never served.
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		})
		if a.tempDir != "" {
			a.advertiseDemo(path)
		}
	}
	return nil
}

// realInstall are the directories of an installed agent, which the demo
// keeps out of whatever its config says: root's data_dir and the config's.
var realInstall = []string{"/var/lib/gpumeter", "/etc"}

// demoSocket is where the demo serves the CLI: api.sock in its own
// directory, whatever data_dir says, so that a demo run as root leaves a
// real install's socket alone; where api.socket names a path outside
// realInstall, there; "" when api.socket is none.
func (a *Agent) demoSocket() string {
	own := filepath.Join(a.tempDir, "api.sock")
	switch s := a.cfg.API.Socket; {
	case s == "none":
		return ""
	case s == "":
		return own
	default:
		for _, dir := range realInstall {
			if rel, err := filepath.Rel(dir, filepath.Clean(s)); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				a.log.Warn("the demo keeps out of a real install's directories: its socket is in its own", "api.socket", s, "socket", own)
				return own
			}
		}
		return s
	}
}

// advertiseDemo writes the demo's socket to its user's demo record, so
// that the CLI finds it without flags, and has Close remove the record.
// A demo that cannot is still reached with --url.
func (a *Agent) advertiseDemo(socket string) {
	record := listener.DemoRecord()
	if record == "" {
		a.log.Info("the CLI will not find the demo by itself (no runtime or cache directory of this user's to name its socket in): give it --url", "url", "unix://"+socket)
		return
	}
	withdraw, err := listener.Advertise(record, socket)
	if err != nil {
		a.log.Warn("the CLI will not find the demo by itself: give it --url", "url", "unix://"+socket, "err", err)
		return
	}
	a.closers = append(a.closers, withdraw)
}
