package sqlledger

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// fakeBackend records what Ledger hands it and fails when told to.
type fakeBackend struct {
	reads, writes int
	audits        [][]any
	fail          error
}

func (f *fakeBackend) backend() Backend {
	return Backend{
		Name: "test.db",
		Read: func(ctx context.Context, fn func(Querier) error) error {
			f.reads++
			if f.fail != nil {
				return f.fail
			}
			return fn(nil)
		},
		WriteRows: func(ctx context.Context, b *ledger.Batch, rows *Rows) error {
			f.writes++
			return f.fail
		},
		InsertAudit: func(ctx context.Context, args [][]any) error {
			f.audits = append(f.audits, args...)
			return f.fail
		},
	}
}

// TestLedgerChecksBeforeTheBackend: a cancelled context, an invalid or
// empty batch and no events never reach the backend, and every error
// names the ledger.
func TestLedgerChecksBeforeTheBackend(t *testing.T) {
	var f fakeBackend
	l := NewLedger(f.backend())
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	one := ledger.Batch{GPUUsage: []ledger.GPUUsage{{Node: "n1", Start: t0, GPU: "GPU-1", GPUSums: ledger.GPUSums{Seconds: 60}}}}

	if err := l.Write(ctx, ledger.Batch{}); err != nil {
		t.Errorf("Write(empty) = %v", err)
	}
	if err := l.Write(cancelled, one); !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "write ledger test.db: ") {
		t.Errorf("Write(cancelled) = %v, want context.Canceled named for the ledger", err)
	}
	bad := ledger.Batch{GPUUsage: []ledger.GPUUsage{{Node: "n1", Start: t0, GPU: "GPU-1", GPUSums: ledger.GPUSums{Seconds: math.NaN()}}}}
	if err := l.Write(ctx, bad); err == nil || !strings.HasPrefix(err.Error(), "write ledger test.db: ") {
		t.Errorf("Write(NaN) = %v, want an error named for the ledger", err)
	}
	if err := l.Audit(ctx, nil); err != nil {
		t.Errorf("Audit(none) = %v", err)
	}
	if err := l.Audit(cancelled, []audit.Event{{Node: "n1"}}); !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "audit to ledger test.db: ") {
		t.Errorf("Audit(cancelled) = %v, want context.Canceled named for the ledger", err)
	}
	if f.writes != 0 || len(f.audits) != 0 {
		t.Errorf("the backend wrote %d batches and %d events, want none", f.writes, len(f.audits))
	}

	if err := l.Write(ctx, one); err != nil || f.writes != 1 {
		t.Errorf("Write(one) = %v with %d writes, want nil and 1", err, f.writes)
	}
	if err := l.Audit(ctx, []audit.Event{{Node: "n1"}, {Node: "n2"}}); err != nil || len(f.audits) != 2 || f.audits[1][1] != "n2" {
		t.Errorf("Audit(two) = %v with %v, want nil and two events' arguments", err, f.audits)
	}

	f.fail = errors.New("disk full")
	for name, err := range map[string]error{
		"write ledger test.db: ":                  l.Write(ctx, one),
		"audit to ledger test.db: ":               l.Audit(ctx, []audit.Event{{Node: "n1"}}),
		"read ledger test.db: ":                   second(l.Usage(ctx, ledger.Filter{})),
		"read audit events from ledger test.db: ": second(l.AuditEvents(ctx, audit.Filter{})),
	} {
		if !errors.Is(err, f.fail) || !strings.HasPrefix(err.Error(), name) {
			t.Errorf("got %v, want %q before the backend's error", err, name)
		}
	}
}

func second[T any](_ T, err error) error { return err }
