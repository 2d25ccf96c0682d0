package agent

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/gpuhistory"
	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sampler/samplertest"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// BenchmarkPages30Days is the server time of each console page over the
// 30-day ledger (8 GPUs, 2,000 containers) with the benchmark load's live
// tick (8 GPUs, 64 containers): authentication, the reads, the views and
// the HTML, as a browser signed in as an admin gets them.
//
//	go test -run '^$' -bench Pages30Days -benchtime 20x ./internal/agent/
func BenchmarkPages30Days(b *testing.B) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	began := time.Now()
	m := ledgertest.Fill30Days(b, store)
	b.Logf("built the 30-day ledger in %v", time.Since(began).Round(time.Second))
	sc, err := sim.Load(filepath.Join("..", "..", "testdata", "bench-8gpu-64ctr.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	smp := samplertest.Scenario(sc, sampler.Config{Node: m.Node})
	for i := range 3 {
		smp.Step(ctx, sc.Start.Add(2*time.Hour+time.Duration(i)*time.Second))
	}
	a := &Agent{cfg: config.Default(), log: slog.New(slog.DiscardHandler), sampler: smp, store: store, node: m.Node}
	secret, tok, err := auth.NewToken("root", "root", config.RoleAdmin, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	authn, err := auth.New(auth.Config{Tokens: []config.Token{tok}})
	if err != nil {
		b.Fatal(err)
	}
	now := m.To.Add(-time.Minute)
	h := server.New(server.Config{
		Ticks:   smp,
		Reports: a,
		History: gpuHistory{ring: gpuhistory.New(time.Second), store: store, node: m.Node},
		Auth:    func() *auth.Authenticator { return authn },
		Limiter: func() *auth.Limiter { return nil },
		Now:     func() time.Time { return now },
		Node:    m.Node,
	})
	for _, page := range benchPages {
		b.Run(page, func(b *testing.B) {
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, page, nil)
				req.Header.Set("Authorization", "Bearer "+secret)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK || w.Body.Len() < 2_000 {
					b.Fatalf("%s: %d %.400s", page, w.Code, w.Body.String())
				}
			}
		})
	}
}

// benchPages are the pages BenchmarkPages30Days times.
var benchPages = []string{"/", "/gpus?window=1h", "/gpus?window=24h", "/gpus?window=7d"}
