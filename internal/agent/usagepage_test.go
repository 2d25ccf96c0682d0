package agent

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/record"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// pageAgent is an agent over store (nil: the ledger is off) that serves
// its handler, and an admin's token for it.
func pageAgent(tb testing.TB, store ledger.Ledger) (http.Handler, string) {
	tb.Helper()
	cfg := config.Default()
	cfg.API.RateLimit = 0
	secret, tok, err := auth.NewToken("t", "admin", config.RoleAdmin, time.Time{})
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Auth.Tokens = map[string]config.Token{"t": tok}
	a := &Agent{cfg: cfg, log: slog.New(slog.DiscardHandler), sampler: sampler.New(sampler.Config{GPUs: oneGPU{}})}
	if store != nil {
		a.store = store
		a.recorder = record.New(record.Config{Store: store, FlushInterval: time.Hour})
	}
	if err := a.initSecurity(false); err != nil {
		tb.Fatal(err)
	}
	return a.Handler(), secret
}

func getPage(h http.Handler, secret, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestUsagePageFromLedger: the agent's usage page reads its own SQLite
// ledger, the table from the report and the chart from the hourly sums.
func TestUsagePageFromLedger(t *testing.T) {
	sc, err := sim.Parse("t.yaml", []byte(`version: 1
node: n1
duration: 2h
interval: 10s
gpus:
  - count: 2
    memory: 80GiB
    idle_power: 60W
    max_power: 400W
containers:
  - name: trainer
    labels: {gpumeter.user: alice, gpumeter.team: ml}
    gpus: [0]
    end: 90m
    phases:
      - {at: 0s, util: 50, memory: 10GiB}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "l.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := Simulate(ctx, sc, store, "l.db"); err != nil {
		t.Fatal(err)
	}
	h, secret := pageAgent(t, store)
	day := sc.Start.UTC().Format(time.DateOnly)
	w := getPage(h, secret, "/usage?window=custom&from="+day+"&to="+day+"&by=container")
	body := w.Body.String()
	if w.Code != http.StatusOK || !strings.Contains(body, ">trainer</th>") {
		t.Fatalf("%d: no row of trainer in %.2000s", w.Code, body)
	}
	// An hour of 50 % on GPU 0, then half an hour.
	for _, want := range []string{"00:00 used: 0.5 h</title>", "01:00 used: 0.25 h</title>", "00:00 held, not used: 0.5 h</title>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the chart lacks a bar %q", want)
		}
	}

	off, secret := pageAgent(t, nil)
	if w := getPage(off, secret, "/usage"); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "the ledger is off") {
		t.Errorf("without a ledger: %d %.300s", w.Code, w.Body.String())
	}
}

// BenchmarkUsagePage30Days is the usage page over the 30-day ledger
// (8 GPUs, 2,000 containers), as a reader gets it from the agent:
// authentication, the report with its cost, the hourly sums for the
// chart, and the HTML.
//
//	go test -run '^$' -bench UsagePage30Days ./internal/agent/
func BenchmarkUsagePage30Days(b *testing.B) {
	store, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	m := ledgertest.Fill30Days(b, store)
	h, secret := pageAgent(b, store)
	day := func(d int) string { return m.From.AddDate(0, 0, d).Format(time.DateOnly) }
	for _, c := range []struct{ name, query string }{
		{"30d-by-user", "from=" + day(0) + "&to=" + day(29) + "&by=user"},
		{"30d-by-team", "from=" + day(0) + "&to=" + day(29) + "&by=team"},
		{"30d-by-container", "from=" + day(0) + "&to=" + day(29) + "&by=container"},
		{"7d-by-user", "from=" + day(23) + "&to=" + day(29) + "&by=user"},
		{"1d-by-user", "from=" + day(29) + "&to=" + day(29) + "&by=user"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				w := getPage(h, secret, "/usage?window=custom&"+c.query)
				if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `<rect class="c0"`) {
					b.Fatalf("%d %.500s", w.Code, w.Body.String())
				}
			}
		})
	}
}
