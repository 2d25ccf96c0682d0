package record_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/record"
)

// lostReplyStore commits the next batches it is asked to and then says
// they failed, as a connection cut after COMMIT does.
type lostReplyStore struct {
	ledger.Store
	mu   sync.Mutex
	lose int
}

func (s *lostReplyStore) Write(ctx context.Context, b ledger.Batch) error {
	err := s.Store.Write(ctx, b)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.lose > 0 {
		s.lose--
		return errors.New("connection reset after COMMIT")
	}
	return err
}

// TestLostReplyCountsOnce: a batch whose commit went through but whose
// reply was lost is sent again under its ID, and the ledger holds it once,
// with what was summed meanwhile. Without a lease (no ID) the same retry
// would count it twice.
func TestLostReplyCountsOnce(t *testing.T) {
	for _, leased := range []bool{true, false} {
		name := map[bool]string{true: "lease", false: "no lease"}[leased]
		t.Run(name, func(t *testing.T) {
			inner := openStore(t)
			store := &lostReplyStore{Store: inner, lose: 1}
			cfg := record.Config{Store: store, Node: node}
			if leased {
				l, err := record.Acquire(context.Background(), inner, node, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Lease = l
			}
			rec := record.New(cfg)
			r := newRig()
			rec.Add(r.step(at(0), 50, gib))
			rec.Add(r.step(at(10), 50, gib))
			if err := rec.Flush(context.Background()); err == nil {
				t.Fatal("Flush through a lost reply succeeded")
			}
			rec.Add(r.step(at(20), 50, gib))
			flush(t, rec)
			got := read(t, inner, t0, t0.Add(time.Minute)).GPU.Seconds
			want := 20.0
			if !leased {
				want = 30 // the first ten seconds twice: what the ID prevents
			}
			if got != want {
				t.Errorf("ledger holds %v GPU-seconds, want %v", got, want)
			}
		})
	}
}

// TestFenced: once the lease is gone the recorder writes nothing more,
// says which rows it had not written, and keeps saying so.
func TestFenced(t *testing.T) {
	store := openStore(t)
	ctx := context.Background()
	l, err := record.Acquire(ctx, store, node, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rec := record.New(record.Config{Store: store, Node: node, Lease: l})
	r := newRig()
	rec.Add(r.step(at(0), 50, gib))
	rec.Add(r.step(at(10), 50, gib))
	flush(t, rec)
	rec.Add(r.step(at(70), 50, gib)) // books 10..70 s: minutes 0 and 1
	// Another writer ends the lease (a takeover does the same).
	if err := record.Release(ctx, store, l); err != nil {
		t.Fatal(err)
	}
	err = rec.Flush(ctx)
	var fe *record.FencedError
	if !errors.As(err, &fe) || !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("Flush after the lease was lost = %v, want a *record.FencedError", err)
	}
	if fe.Rows == 0 || !fe.From.Equal(t0) || !fe.To.Equal(t0.Add(time.Minute)) {
		t.Errorf("fenced error says %d rows, %s..%s; want the rows of minutes 10:00 and 10:01", fe.Rows, fe.From, fe.To)
	}
	for _, want := range []string{"stops writing node", "not written: ", "10:00 to 10:01 UTC"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("fenced error %q does not say %q", err, want)
		}
	}
	rec.Add(r.step(at(80), 50, gib))
	if err2 := rec.Flush(ctx); !errors.As(err2, &fe) {
		t.Errorf("a later Flush = %v, want the same fenced error", err2)
	}
	if got := read(t, store, t0, t0.Add(2*time.Minute)).GPU.Seconds; got != 10 {
		t.Errorf("ledger holds %v GPU-seconds, want the 10 written before the lease was lost", got)
	}
}
