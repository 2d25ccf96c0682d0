package agent

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/record"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// oneGPU is a GPU source that reads one idle GPU.
type oneGPU struct{}

func (oneGPU) Read(_ context.Context, now time.Time) (gpu.Sample, error) {
	return gpu.Sample{Time: now, Devices: []gpu.Device{{Index: 0, UUID: "GPU-0", Model: "Test GPU"}}}, nil
}

// stuckStore is a ledger that does not answer reads, as a PostgreSQL
// server behind a dead network does not, and whose Close waits for the
// reads under way to give up, as a pgx pool's does.
type stuckStore struct {
	ledger.Ledger
	reading chan struct{} // closed when the first read starts
	once    sync.Once
	reads   sync.WaitGroup
}

func (s *stuckStore) GPUs(ctx context.Context, _ ledger.Filter) ([]ledger.GPUTotal, error) {
	return nil, s.stuck(ctx)
}

// KnownGPUs is the first read of a report (its price check).
func (s *stuckStore) KnownGPUs(ctx context.Context) ([]ledger.GPU, error) {
	return nil, s.stuck(ctx)
}

func (s *stuckStore) stuck(ctx context.Context) error {
	s.reads.Add(1)
	defer s.reads.Done()
	s.once.Do(func() { close(s.reading) })
	<-ctx.Done()
	return ctx.Err()
}

func (s *stuckStore) Write(context.Context, ledger.Batch) error { return nil }

func (s *stuckStore) Close() error {
	s.reads.Wait()
	return nil
}

// TestRunStopsWithAReportStuck: a usage report waiting on a ledger that
// does not answer must not keep Run from returning once its context ends.
func TestRunStopsWithAReportStuck(t *testing.T) {
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.API.Socket = "none"
	secret, tok, err := auth.NewToken("t", "admin", config.RoleAdmin, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Auth.Tokens = map[string]config.Token{"t": tok}
	store := &stuckStore{reading: make(chan struct{})}
	a := &Agent{
		cfg:      cfg,
		log:      slog.New(slog.DiscardHandler),
		sampler:  sampler.New(sampler.Config{GPUs: oneGPU{}}),
		store:    store,
		recorder: record.New(record.Config{Store: store, FlushInterval: time.Hour}),
	}
	if err := a.initSecurity(false); err != nil {
		t.Fatal(err)
	}
	addr, err := a.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	go func() {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr.String()+"/api/v1/usage?since=1h", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-store.reading:
	case <-time.After(10 * time.Second):
		t.Fatal("the report never reached the ledger")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15s of its context ending")
	}
}
