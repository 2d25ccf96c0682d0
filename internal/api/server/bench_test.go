package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sampler/samplertest"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// benchSampler plays the load scenario (8 GPUs, 64 containers, 256 GPU
// processes) through the real sampler and meter for a few ticks, so that
// the latest tick has totals, as on a node that has been running.
func benchSampler(b *testing.B) *sampler.Sampler {
	b.Helper()
	sc, err := sim.Load("../../../testdata/bench-8gpu-64ctr.yaml")
	if err != nil {
		b.Fatal(err)
	}
	s := samplertest.Scenario(sc, sampler.Config{})
	for i := range 3 {
		s.Step(context.Background(), sc.Start.Add(time.Duration(i)*time.Second))
	}
	return s
}

// countingAudit is the agent's audit log, writing nowhere, that counts
// what it is told: what a read or a refusal costs the request is building
// its event and summing it.
type countingAudit struct {
	*audit.Log
	n int
}

func newCountingAudit() *countingAudit {
	return &countingAudit{Log: audit.NewLog(audit.LogConfig{Node: "bench"})}
}

func (a *countingAudit) Observe(e audit.Event) {
	a.n++
	a.Log.Observe(e)
}

func (a *countingAudit) Events(context.Context, time.Time, time.Time, int) ([]audit.Event, bool, error) {
	return nil, false, nil
}

// discardWriter is a response recorder that keeps the status and the
// size of the body but not the body, and can be reused, so that the
// benchmarks measure the handler rather than a growing buffer.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.h }

func (w *discardWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

func (w *discardWriter) reset() {
	clear(w.h)
	w.status, w.n = 0, 0
}

// benchHandler is the API as the agent builds it for a viewer token, with
// the per-caller rate limit off as in scripts/api-load.sh.
func benchHandler(b *testing.B, a Auditor) (http.Handler, string) {
	b.Helper()
	secret, tok, err := auth.NewToken("load", "load", config.RoleViewer, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	authn, err := auth.New(auth.Config{Tokens: []config.Token{tok}})
	if err != nil {
		b.Fatal(err)
	}
	limiter := auth.NewLimiter(0, 1, 0)
	h := New(Config{
		Ticks:   benchSampler(b),
		Audit:   a,
		Auth:    func() *auth.Authenticator { return authn },
		Limiter: func() *auth.Limiter { return limiter },
	})
	return h, secret
}

// BenchmarkContainersAuthenticated is one authenticated GET
// /api/v1/containers of the load's tick, as scripts/api-load.sh sends it,
// without the network: authentication, authorisation, building the
// response from the tick and encoding it.
//
//	go test -run '^$' -bench Containers -benchmem ./internal/api
func BenchmarkContainersAuthenticated(b *testing.B) {
	a := newCountingAudit()
	h, secret := benchHandler(b, a)
	r, err := http.NewRequest(http.MethodGet, "/api/v1/containers", nil)
	if err != nil {
		b.Fatal(err)
	}
	r.RemoteAddr = "127.0.0.1:40000"
	r.Header.Set("Authorization", "Bearer "+secret)
	b.ReportMetric(float64(serveLoop(b, h, r, http.StatusOK)), "bytes/response")
	if a.n == 0 {
		b.Fatal("no read was audited")
	}
}

// BenchmarkGuardRefusal is one request with a token the agent does not
// know: hashed, looked up, refused with 401 and audited.
//
//	go test -run '^$' -bench GuardRefusal -benchmem ./internal/api
func BenchmarkGuardRefusal(b *testing.B) {
	a := newCountingAudit()
	h, _ := benchHandler(b, a)
	r, err := http.NewRequest(http.MethodGet, "/api/v1/containers", nil)
	if err != nil {
		b.Fatal(err)
	}
	r.RemoteAddr = "127.0.0.1:40000"
	r.Header.Set("Authorization", "Bearer gpm_not-a-token-the-agent-knows-000000000000")
	serveLoop(b, h, r, http.StatusUnauthorized)
	if a.n == 0 {
		b.Fatal("no refusal was audited")
	}
}

// BenchmarkContainersEncode is what the first request after each tick
// pays, once a tick: building the whole-node view and encoding it. Later
// requests in the same tick reuse the body.
//
//	go test -run '^$' -bench ContainersEncode -benchmem ./internal/api
func BenchmarkContainersEncode(b *testing.B) {
	t := benchSampler(b).Latest()
	var tb tickBody
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		tb.tick = nil
		n = len(tb.get(t, func() any { return ContainersFromTick(t) }))
	}
	b.ReportMetric(float64(n), "bytes/response")
}

// serveLoop serves r until the benchmark ends, each answer with status,
// and returns the last answer's size.
func serveLoop(b *testing.B, h http.Handler, r *http.Request, status int) int {
	b.Helper()
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		h.ServeHTTP(w, r)
		if w.status != status {
			b.Fatalf("status %d, want %d", w.status, status)
		}
	}
	return w.n
}
