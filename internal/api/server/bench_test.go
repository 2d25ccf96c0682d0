package server_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
)

// benchScenario is the load the benchmarks play.
const benchScenario = "../../../testdata/bench-8gpu-64ctr.yaml"

// benchHandler is the API as the agent builds it for a viewer token, with
// the per-caller rate limit off as in scripts/api-load.sh.
func benchHandler(b *testing.B, a server.Auditor) (http.Handler, string) {
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
	h := server.New(server.Config{
		Ticks:   servertest.BenchSampler(b, benchScenario),
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
	a := servertest.NewCountingAudit()
	h, secret := benchHandler(b, a)
	r, err := http.NewRequest(http.MethodGet, "/api/v1/containers", nil)
	if err != nil {
		b.Fatal(err)
	}
	r.RemoteAddr = "127.0.0.1:40000"
	r.Header.Set("Authorization", "Bearer "+secret)
	b.ReportMetric(float64(servertest.ServeLoop(b, h, r, http.StatusOK)), "bytes/response")
	if a.N == 0 {
		b.Fatal("no read was audited")
	}
}

// BenchmarkGuardRefusal is one request with a token the agent does not
// know: hashed, looked up, refused with 401 and audited.
//
//	go test -run '^$' -bench GuardRefusal -benchmem ./internal/api
func BenchmarkGuardRefusal(b *testing.B) {
	a := servertest.NewCountingAudit()
	h, _ := benchHandler(b, a)
	r, err := http.NewRequest(http.MethodGet, "/api/v1/containers", nil)
	if err != nil {
		b.Fatal(err)
	}
	r.RemoteAddr = "127.0.0.1:40000"
	r.Header.Set("Authorization", "Bearer gpm_not-a-token-the-agent-knows-000000000000")
	servertest.ServeLoop(b, h, r, http.StatusUnauthorized)
	if a.N == 0 {
		b.Fatal("no refusal was audited")
	}
}

// BenchmarkContainersEncode is what the first request after each tick
// pays, once a tick: building the whole-node view and encoding it. Later
// requests in the same tick reuse the body.
//
//	go test -run '^$' -bench ContainersEncode -benchmem ./internal/api
func BenchmarkContainersEncode(b *testing.B) {
	t := servertest.BenchSampler(b, benchScenario).Latest()
	var tb server.TickBody
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n = len(tb.Fresh(t, func() any { return server.ContainersFromTick(t) }))
	}
	b.ReportMetric(float64(n), "bytes/response")
}
