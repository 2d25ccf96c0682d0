package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// TestOutageWrapsErrUnavailable: while the server cannot be reached (the
// proxy cut), reads and writes wrap ledger.ErrUnavailable; once it is
// back, they work again, and the answers of a server that is there (no
// such job, a job in another state) do not wrap it.
func TestOutageWrapsErrUnavailable(t *testing.T) {
	proxy, dsn := pgtest.NewProxy(t, pgtest.DSN(t))
	s := open(t, dsn)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	j, err := s.SubmitJob(ctx, queue.Job{Node: "n1", User: "alice", State: "queued", GPUsRequested: 1, Image: "img:1",
		Request: &queue.Request{}, TimeLimit: time.Hour, SubmittedAt: now}, audit.Event{})
	if err != nil {
		t.Fatal(err)
	}

	proxy.Partition()
	calls := map[string]func() error{
		"job":  func() error { _, err := s.Job(ctx, j.ID); return err },
		"jobs": func() error { _, err := s.Jobs(ctx, ledger.JobFilter{}); return err },
		"update": func() error {
			_, err := s.UpdateJob(ctx, j.ID, "queued", func(*queue.Job) {}, audit.Event{})
			return err
		},
		"submit": func() error {
			_, err := s.SubmitJob(ctx, queue.Job{Node: "n1", User: "bob", State: "queued", GPUsRequested: 1, Image: "img:1",
				Request: &queue.Request{}, TimeLimit: time.Hour, SubmittedAt: now}, audit.Event{})
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ledger.ErrUnavailable) {
			t.Errorf("%s while the server is away: %v, want ErrUnavailable", name, err)
		}
	}

	proxy.Heal()
	for name, call := range calls {
		if err := call(); err != nil {
			t.Errorf("%s once the server is back: %v", name, err)
		}
	}
	if _, err := s.Job(ctx, "j-999999"); !errors.Is(err, ledger.ErrJobNotFound) || errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("an unknown job: %v, want ErrJobNotFound only", err)
	}
	var se *ledger.JobStateError
	if _, err := s.UpdateJob(ctx, j.ID, "running", func(*queue.Job) {}, audit.Event{}); !errors.As(err, &se) || errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("an update from the wrong state: %v, want a JobStateError only", err)
	}
}
