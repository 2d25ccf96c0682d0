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
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

var historyT0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// historyTick is a tick at second i: GPU-a at i mod 100 %, 1 GiB per 10 %,
// 100 W + i mod 100, 40 + i mod 10 °C; GPU-b without a power reading;
// GPU-c unreadable.
func historyTick(i int) *sampler.Tick {
	at := historyT0.Add(time.Duration(i) * time.Second)
	u := float64(i % 100)
	devs := []gpu.Device{
		{Index: 0, UUID: "GPU-a", Model: "H100", Util: u, MemoryUsed: uint64(u/10) << 30, PowerWatts: 100 + u, TempC: 40 + float64(i%10)},
		{Index: 1, UUID: "GPU-b", Model: "H100", Util: 50, Missing: []gpu.Field{gpu.FieldPower}},
		{Index: 2, UUID: "GPU-c", Model: "H100", Err: errors.New("GPU is lost")},
	}
	return &sampler.Tick{Tick: &meter.Tick{Time: at, Sample: gpu.Sample{Time: at, Devices: devs}}}
}

// TestHistoryRing: the ring holds a fixed hour of samples, steps give the
// means and maxima of the samples in them, a republished tick adds
// nothing, and GPUs without every reading are left out.
func TestHistoryRing(t *testing.T) {
	h := newHistoryRing(time.Second)
	const n = 5000
	for i := range n {
		tick := historyTick(i)
		h.add(tick)
		h.add(tick) // republished while the GPUs read nothing new
	}
	if got := len(h.gpus["GPU-a"].samples); got != 3601 {
		t.Errorf("ring holds %d samples, want 3601", got)
	}
	to := historyT0.Add(n * time.Second) // just past the last sample
	from := to.Add(-time.Hour)
	got := h.Recent(from, to, 10*time.Second)
	if len(got) != 1 || got[0].UUID != "GPU-a" || got[0].Index != 0 || got[0].Model != "H100" {
		t.Fatalf("Recent: %+v, want GPU-a alone", got)
	}
	ps := got[0].Points
	if len(ps) != 360 {
		t.Fatalf("%d points, want 360", len(ps))
	}
	var samples int64
	for _, p := range ps {
		samples += p.Samples
	}
	if samples != 3600 {
		t.Errorf("%d samples over the hour, want 3600 (each once)", samples)
	}
	// The step at second 1400: seconds 1400..1409, at 0..9 % and 40..49 °C.
	p := ps[0]
	if !p.T.Equal(from) || p.Samples != 10 || p.UtilMean != 4.5 || p.UtilMax != 9 ||
		p.PowerMean != 104.5 || p.PowerMax != 109 || p.TempMean != 44.5 || p.TempMax != 49 || p.MemMax != 0 {
		t.Errorf("first point %+v", p)
	}
	// Seconds 1490..1499: 90..99 %, 9 GiB.
	if p := ps[9]; p.UtilMean != 94.5 || p.MemMean != 9<<30 || p.MemMax != 9<<30 {
		t.Errorf("tenth point %+v", p)
	}
	// Older than the ring: nothing.
	if got := h.Recent(historyT0, historyT0.Add(time.Minute), 10*time.Second); len(got) != 0 {
		t.Errorf("samples that left the ring: %+v", got)
	}
}

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
	hs := gpuHistory{historyRing: newHistoryRing(time.Second), store: store, node: "n1"}
	got, err := hs.Stored(context.Background(), historyT0, historyT0.Add(time.Hour), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Points) != 1 {
		t.Fatalf("Stored: %+v", got)
	}
	if p := got[0].Points[0]; !p.T.Equal(historyT0) || p.Samples != 2 || p.UtilMean != 40 || p.UtilMax != 50 ||
		p.MemMean != 2<<30 || p.PowerMean != 250 || p.TempMax != 65 {
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
		History: gpuHistory{historyRing: newHistoryRing(time.Second), store: store, node: m.Node},
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
