package listener

import (
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/time/rate"
)

// Web is an exporter-toolkit web config file, the one every Prometheus
// exporter reads: basic auth users (bcrypt hashes), response headers, a
// rate limit, and optionally the listener's TLS.
type Web struct {
	path    string
	cfg     web.Config
	limiter *rate.Limiter

	mu    sync.Mutex
	cache map[[sha256.Size]byte]bool // user, hash and password checked before
}

// LoadWeb reads and checks the web config at path, with exporter-toolkit's
// own validation, so a file that works for node_exporter works here.
func LoadWeb(path string) (*Web, error) {
	if err := web.Validate(path); err != nil {
		return nil, fmt.Errorf("web.config_file %s: %w", path, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("web.config_file: %w", err)
	}
	w := &Web{path: path, cache: map[[sha256.Size]byte]bool{}}
	w.cfg.TLSConfig.MinVersion = tls.VersionTLS12
	w.cfg.TLSConfig.MaxVersion = tls.VersionTLS13
	// exporter-toolkit offers HTTP/2 unless told not to; here a file must
	// ask for it (http_server_config: {http2: true}), since the HTTP/2
	// server does not hold slow clients to the agent's timeouts.
	w.cfg.HTTPConfig.HTTP2 = false
	if err := yaml.UnmarshalStrict(data, &w.cfg); err != nil {
		return nil, fmt.Errorf("web.config_file %s: %w", path, err)
	}
	w.cfg.TLSConfig.SetDirectory(filepath.Dir(path))
	if rl := w.cfg.RateLimiterConfig; rl.Interval > 0 {
		if rl.Burst < 1 {
			return nil, fmt.Errorf("web.config_file %s: rate_limit: burst must be at least 1", path)
		}
		w.limiter = rate.NewLimiter(rate.Every(rl.Interval), rl.Burst)
	}
	return w, nil
}

// HasTLS says whether the file serves the listener with TLS.
func (w *Web) HasTLS() bool { return w != nil && w.cfg.TLSConfig.IsEnabled() }

// TLS is the listener's TLS config from the file; exporter-toolkit
// re-reads the certificate files on each handshake.
func (w *Web) TLS() (*tls.Config, error) {
	cfg, err := web.ConfigToTLSConfig(&w.cfg.TLSConfig)
	if err != nil {
		return nil, fmt.Errorf("web.config_file %s: tls_server_config: %w", w.path, err)
	}
	cfg.NextProtos = nextProtos
	if w.cfg.HTTPConfig.HTTP2 {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	return cfg, nil
}

// Guard puts h behind the file's basic auth users, headers and rate
// limit; a nil Web guards nothing.
func (w *Web) Guard(h http.Handler) http.Handler {
	if w == nil {
		return h
	}
	if len(w.cfg.Users) > 0 {
		// Made here, before any request, so that the first request for an
		// unknown user takes no longer than the others.
		unknownUserHash()
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		for k, v := range w.cfg.HTTPConfig.Header {
			rw.Header().Set(k, v)
		}
		if w.limiter != nil && !w.limiter.Allow() {
			http.Error(rw, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
			return
		}
		if len(w.cfg.Users) > 0 && !w.allowed(r) {
			rw.Header().Set("WWW-Authenticate", `Basic realm="gpumeter"`)
			http.Error(rw, http.StatusText(http.StatusUnauthorized), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(rw, r)
	})
}

// unknownUserHash is compared against when the user does not exist, so
// that the time taken does not tell which users do. It is made at first
// use, not at start-up: the hash costs about 0.06 s of CPU, which every
// CLI process would otherwise pay before doing anything.
var unknownUserHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("no such user"), bcrypt.DefaultCost)
	return h
})

func (w *Web) allowed(r *http.Request) bool {
	user, pass, ok := r.BasicAuth()
	if !ok {
		return false
	}
	hash, known := w.cfg.Users[user]
	h := []byte(hash)
	if !known {
		h = unknownUserHash()
	}
	key := sha256.Sum256([]byte(user + "\x00" + string(h) + "\x00" + pass))
	w.mu.Lock()
	good, seen := w.cache[key]
	w.mu.Unlock()
	if !seen {
		good = bcrypt.CompareHashAndPassword(h, []byte(pass)) == nil && known
		w.mu.Lock()
		if len(w.cache) > 1000 {
			clear(w.cache)
		}
		w.cache[key] = good
		w.mu.Unlock()
	}
	return good
}

// ErrBothTLS is returned when both the config's tls keys and the web
// config file would set the listener's TLS.
var ErrBothTLS = errors.New("tls.cert_file and web.config_file's tls_server_config both set the listener's TLS: keep one")
