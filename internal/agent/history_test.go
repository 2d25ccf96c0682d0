package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/gpuhistory"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
)

var historyT0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// TestHistoryStored reads the ledger's GPU series through the API's
// interface, and says when there is no ledger.
func TestHistoryStored(t *testing.T) {
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var g ledger.GPUGauges
	g.Observe(30, 1<<30, 200, 55)
	g.Observe(50, 3<<30, 300, 65)
	if err := store.Write(context.Background(), ledger.Batch{
		GPUs:     []ledger.GPU{{Node: "n1", UUID: "GPU-a", Index: 0, Model: "H100"}},
		GPUUsage: []ledger.GPUUsage{{Node: "n1", Start: historyT0, GPU: "GPU-a", GPUSums: ledger.GPUSums{Seconds: 60}, Gauges: g}},
	}); err != nil {
		t.Fatal(err)
	}
	hs := gpuHistory{ring: gpuhistory.New(time.Second), store: store, node: "n1"}
	got, err := hs.Stored(context.Background(), historyT0, historyT0.Add(time.Hour), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Points) != 1 {
		t.Fatalf("Stored: %+v", got)
	}
	if p := got[0].Points[0]; !p.Start.Equal(historyT0) || p.Samples != 2 || p.UtilMean != 40 || p.UtilMax != 50 ||
		p.MemoryMean != 2<<30 || p.PowerMean != 250 || p.TempMax != 65 {
		t.Errorf("point %+v", p)
	}
	hs.store = nil
	if _, err := hs.Stored(context.Background(), historyT0, historyT0.Add(time.Hour), time.Hour); !errors.Is(err, server.ErrNoLedger) {
		t.Errorf("no ledger: %v, want server.ErrNoLedger", err)
	}
}

// BenchmarkHistory30Days is the API's GPU history over the 30-day ledger
// (8 GPUs), as a caller gets it: authentication, the ledger read, the
// conversion and the JSON, for the 24h and 7d windows.
//
//	go test -run '^$' -bench History30Days ./internal/agent/
func BenchmarkHistory30Days(b *testing.B) {
	store, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	m := ledgertest.Fill30Days(b, store)
	secret, tok, err := auth.NewToken("viewer", "grafana", config.RoleViewer, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	authn, err := auth.New(auth.Config{Tokens: []config.Token{tok}})
	if err != nil {
		b.Fatal(err)
	}
	h := server.New(server.Config{
		History: gpuHistory{ring: gpuhistory.New(time.Second), store: store, node: m.Node},
		Auth:    func() *auth.Authenticator { return authn },
		Limiter: func() *auth.Limiter { return nil },
		Now:     func() time.Time { return m.To.Add(-time.Second) },
		Node:    m.Node,
	})
	for _, window := range []string{"24h", "7d"} {
		b.Run(window, func(b *testing.B) {
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/api/v1/gpus/history?window="+window, nil)
				req.Header.Set("Authorization", "Bearer "+secret)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK || w.Body.Len() < 10_000 {
					b.Fatalf("%d %.200s", w.Code, w.Body.String())
				}
			}
		})
	}
}
