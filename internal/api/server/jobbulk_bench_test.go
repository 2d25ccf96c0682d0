package server_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/run"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// depthHandler is the API over a queue without an engine on a SQLite
// ledger in a temp dir, for an admin token, and a function that queues
// n jobs of three users straight into the store.
func depthHandler(b *testing.B) (http.Handler, string, func(n int)) {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	store, err := sqlite.Open(ctx, filepath.Join(dir, "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	q, err := run.New(run.Config{Store: store, Node: "bench", Identity: servertest.LookupUser, EnvDir: filepath.Join(dir, "env"),
		Rules: spec.Rules{Images: []string{"gpumeter/sleeper:*"}, MaxGPUs: 8, MaxTimeLimit: 24 * time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	secret, tok, err := auth.NewToken("root", "root", config.RoleAdmin, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	authn, err := auth.New(auth.Config{Tokens: []config.Token{tok}})
	if err != nil {
		b.Fatal(err)
	}
	limiter := auth.NewLimiter(0, 1, 0)
	h := server.New(server.Config{
		Ticks: servertest.BenchSampler(b, benchScenario), Audit: servertest.NewCountingAudit(), Jobs: q,
		Auth: func() *auth.Authenticator { return authn }, Limiter: func() *auth.Limiter { return limiter },
	})
	users := []string{"alice", "bob", "carol"}
	fill := func(n int) {
		now := time.Now().UTC()
		for i := range n {
			_, err := store.SubmitJob(ctx, queue.Job{Name: fmt.Sprintf("sweep-%d", i), User: users[i%3], State: queue.Queued,
				GPUsRequested: 1, Image: "gpumeter/sleeper:1", Command: []string{"sleep", "1"}, TimeLimit: time.Hour,
				SubmittedAt: now, Reason: queue.ReasonResources, ReasonText: "submitted; waiting for the scheduler's first look"}, audit.Event{})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	return h, secret, fill
}

// BenchmarkJobsLimit100At10k is GET /api/v1/jobs?all_users=1&limit=100,
// what gpumeter jobs --all-users asks by default, with 10,000 jobs
// waiting: the first page and its total.
//
//	go test -run '^$' -bench JobsLimit100At10k -benchmem ./internal/api/server
func BenchmarkJobsLimit100At10k(b *testing.B) {
	h, secret, fill := depthHandler(b)
	fill(10000)
	r, err := http.NewRequest(http.MethodGet, "/api/v1/jobs?all_users=1&limit=100", nil)
	if err != nil {
		b.Fatal(err)
	}
	r.RemoteAddr = "127.0.0.1:40000"
	r.Header.Set("Authorization", "Bearer "+secret)
	b.ReportMetric(float64(servertest.ServeLoop(b, h, r, http.StatusOK)), "bytes/response")
}

// BenchmarkCancelBulk5000 is POST /api/v1/jobs/cancel of 5,000 waiting
// jobs ({"state":["queued"],"all_users":true}): the listing, the one
// store write, each job's end (its env file, its notice) and the answer.
// Each round queues its 5,000 first, off the clock; it reports jobs/s.
//
//	go test -run '^$' -bench CancelBulk5000 -benchtime 5x ./internal/api/server
func BenchmarkCancelBulk5000(b *testing.B) {
	h, secret, fill := depthHandler(b)
	var spent time.Duration
	for b.Loop() {
		b.StopTimer()
		fill(5000)
		r, err := http.NewRequest(http.MethodPost, "/api/v1/jobs/cancel", strings.NewReader(`{"state":["queued"],"all_users":true}`))
		if err != nil {
			b.Fatal(err)
		}
		r.RemoteAddr = "127.0.0.1:40000"
		r.Header.Set("Authorization", "Bearer "+secret)
		w := &countingWriter{h: http.Header{}}
		b.StartTimer()
		start := time.Now()
		h.ServeHTTP(w, r)
		spent += time.Since(start)
		if w.status != http.StatusOK || !strings.Contains(w.body.String(), `"cancelled":5000`) {
			b.Fatalf("bulk cancel: %d %.200s", w.status, w.body.String())
		}
	}
	b.ReportMetric(float64(5000*b.N)/spent.Seconds(), "jobs/s")
}

// countingWriter keeps an answer's status and body.
type countingWriter struct {
	h      http.Header
	status int
	body   strings.Builder
}

func (w *countingWriter) Header() http.Header { return w.h }
func (w *countingWriter) WriteHeader(s int)   { w.status = s }
func (w *countingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(p)
}
