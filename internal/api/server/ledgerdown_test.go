package server_test

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/ledger/postgres"
	"github.com/gpumeter/gpumeter/internal/queue/run"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestLedgerOutageAnswers503: while the queue's PostgreSQL cannot be
// reached, a submission and every action on a job answer 503 with
// ledger_unavailable and a Retry-After in seconds, over real HTTP; once
// it is back, the same requests do what they ask.
func TestLedgerOutageAnswers503(t *testing.T) {
	proxy, dsn := pgtest.NewProxy(t, pgtest.DSN(t))
	store, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f := servertest.NewJobsFixture(t, func(c *run.Config) { c.Store = store })
	j := f.Submit(t, servertest.AsAlice, servertest.GoodJob)

	proxy.Partition()
	for _, tt := range []struct{ name, path, body string }{
		{"submit", "/api/v1/jobs", servertest.GoodJob},
		{"hold", "/api/v1/jobs/" + j.ID + "/hold", ""},
		{"release", "/api/v1/jobs/" + j.ID + "/release", ""},
		{"cancel", "/api/v1/jobs/" + j.ID + "/cancel", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var body *strings.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			var a servertest.Answer
			if body != nil {
				a = f.Do(t, servertest.AsAlice, http.MethodPost, tt.path, body, "")
			} else {
				a = f.Post(t, servertest.AsAlice, tt.path)
			}
			a.APIError(t, http.StatusServiceUnavailable, apitype.CodeLedgerUnavailable)
			if s, err := strconv.Atoi(a.Header.Get("Retry-After")); err != nil || s <= 0 {
				t.Errorf("Retry-After %q, want a number of seconds", a.Header.Get("Retry-After"))
			}
		})
	}

	proxy.Heal()
	f.Post(t, servertest.AsAlice, "/api/v1/jobs/"+j.ID+"/hold").Decode(t, new(apitype.Job))
	if got := f.Submit(t, servertest.AsAlice, servertest.GoodJob); got.State != "queued" {
		t.Errorf("submit after the outage: %s, want queued", got.State)
	}
}
