package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/run"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// benchPage serves the API over the load scenario's tick with cfg's
// parts, signs an admin in with a session and returns the handler and a
// page request carrying the session's cookie, as a browser sends it.
func benchPage(b *testing.B, path string, edit func(*server.Config)) (http.Handler, *http.Request) {
	b.Helper()
	secret, tok, err := auth.NewToken("root-laptop", "root", config.RoleAdmin, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	authn, err := auth.New(auth.Config{Tokens: []config.Token{tok}})
	if err != nil {
		b.Fatal(err)
	}
	cfg := server.Config{
		Ticks: benchSampler(b), Audit: newCountingAudit(), Stopper: &recordingStopper{},
		Auth:    func() *auth.Authenticator { return authn },
		Limiter: func() *auth.Limiter { return nil },
	}
	edit(&cfg)
	h := server.New(cfg)
	signIn := httptest.NewRequest(http.MethodPost, "/api/v1/session", nil)
	signIn.Header.Set("Authorization", "Bearer "+secret)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, signIn)
	var ses apitype.Session
	if err := json.Unmarshal(rec.Body.Bytes(), &ses); rec.Code != http.StatusOK || err != nil {
		b.Fatalf("sign in: %d %s", rec.Code, rec.Body)
	}
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = "127.0.0.1:40000"
	for _, c := range rec.Result().Cookies() {
		r.AddCookie(c)
	}
	r.AddCookie(&http.Cookie{Name: zoneCookie, Value: "Europe%2FBerlin"})
	return h, r
}

// runPage serves r until the benchmark ends; every answer must be 200
// and hold want.
func runPage(b *testing.B, h http.Handler, r *http.Request, want string) {
	b.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
		b.Fatalf("%s: %d, no %q in %.2000s", r.URL, rec.Code, want, rec.Body)
	}
	b.ReportMetric(float64(serveLoop(b, h, r, http.StatusOK)), "bytes/page")
}

// BenchmarkWastePage is /waste for an admin's session with 500 live
// findings on the load scenario's 64 running containers, each with its
// evidence and stop button.
//
//	go test -run '^$' -bench 'Page$' -benchmem ./internal/api/server
func BenchmarkWastePage(b *testing.B) {
	h, r := benchPage(b, "/waste", func(c *server.Config) {
		t := c.Ticks.Latest()
		rules := []string{config.RuleIdle, config.RuleStalled, config.RuleOverAllocated, config.RuleLowEfficiency}
		var fs []waste.Finding
		for i := range 500 {
			ct := t.Containers[i%len(t.Containers)]
			fs = append(fs, waste.Finding{ID: fmt.Sprintf("f%03d", i), Rule: rules[i%len(rules)], Node: "bench", OwnerKind: waste.OwnerContainer,
				ContainerID: ct.ID, Container: ct.Name, Owner: ct.User, GPUs: []waste.GPURef{{Index: i % 8, UUID: fmt.Sprintf("GPU-%d", i%8)}},
				Since: t.Time.Add(-time.Hour), FirstSeen: t.Time.Add(-time.Hour), Until: t.Time, Active: true,
				Evidence: map[string]float64{waste.EvSMPercent: 1, waste.EvSMPercentMax: 2, waste.EvCPUCores: 0.01, waste.EvCPUCoresMax: 0.02,
					waste.EvThreshold: 5, waste.EvThresholdCPU: 0.1, waste.EvDuration: 3600, waste.EvWindow: 3600, waste.EvMemoryBytes: 1 << 30},
				WastedGPUHours: float64(i%7) + 0.5, Cost: float64(i % 11)})
		}
		rep := &waste.Report{From: t.Time.Add(-time.Hour), To: t.Time, Currency: "EUR", Findings: fs}
		c.Waste = fixedWaste{rep.Only(func(*waste.Finding) bool { return true })}
	})
	runPage(b, h, r, `data-path="/api/v1/containers/`)
}

// BenchmarkJobsPage is /jobs?all=1 for an admin's session over a real
// SQLite ledger of 2,000 jobs, 1,000 of them waiting (each with cancel
// and hold buttons) and 1,000 ended.
//
//	go test -run '^$' -bench 'Page$' -benchmem ./internal/api/server
func BenchmarkJobsPage(b *testing.B) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	now := time.Now().UTC()
	for i := range 2000 {
		j, err := store.SubmitJob(ctx, queue.Job{Name: fmt.Sprintf("train-%d", i), User: fmt.Sprintf("user%d", i%20), State: "queued",
			GPUsRequested: 1 + i%4, Image: "gpumeter/sleeper:1", Command: []string{"python", "train.py"}, TimeLimit: 4 * time.Hour,
			SubmittedAt: now.Add(-time.Duration(2000-i) * time.Minute), Reason: "resources", ReasonText: "waits for 2 GPUs: 3 jobs hold them until about 14:00"}, audit.Event{})
		if err != nil {
			b.Fatal(err)
		}
		if i%2 == 1 {
			if _, err := store.UpdateJob(ctx, j.ID, "queued", func(j *queue.Job) {
				j.State, j.EndedAt, j.Reason, j.ReasonText = "cancelled", now, "cancelled", "cancelled by root"
			}, audit.Event{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	q, err := run.New(run.Config{Store: store, Node: "bench", Identity: lookupUser, EnvDir: filepath.Join(b.TempDir(), "env"),
		Rules: spec.Rules{Images: []string{"gpumeter/sleeper:*"}, MaxGPUs: 8, MaxTimeLimit: 24 * time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	h, r := benchPage(b, "/jobs?all=1", func(c *server.Config) { c.Jobs = q })
	runPage(b, h, r, `/api/v1/jobs/j-001999/cancel`)
}

// BenchmarkAuditPage is /audit?window=7d for an admin's session over the
// real audit log on a SQLite ledger holding 20,000 events in the window:
// the page's 500 newest, and with limit=10000 the API's most.
//
//	go test -run '^$' -bench 'Page$' -benchmem ./internal/api/server
func BenchmarkAuditPage(b *testing.B) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	now := time.Now()
	events := make([]audit.Event, 0, 1000)
	for i := range 20000 {
		events = append(events, audit.Event{Time: now.Add(-time.Duration(20000-i) * 30 * time.Second), Node: "bench", Kind: "api",
			Caller: fmt.Sprintf("user%d (token laptop)", i%20), Role: "user", Source: "10.0.0.7", Action: "jobs.cancel",
			Target: fmt.Sprintf("job j-%06d", i), Status: 200, Outcome: "ok"})
		if len(events) == cap(events) {
			if err := store.Audit(ctx, events); err != nil {
				b.Fatal(err)
			}
			events = events[:0]
		}
	}
	log := audit.NewLog(audit.LogConfig{Store: store, Node: "bench"})
	for _, limit := range []string{"", "&limit=10000"} {
		b.Run("limit="+strings.TrimPrefix(limit, "&limit="), func(b *testing.B) {
			h, r := benchPage(b, "/audit?window=7d"+limit, func(c *server.Config) {
				c.Audit = log
				c.Now = time.Now
			})
			runPage(b, h, r, "job j-019999")
		})
	}
}
