package fairshare

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
)

// monthLedger is a SQLite ledger holding ledgertest.Fill30Days, built
// once and kept in os.TempDir() under the name the ledger's own
// benchmarks use, keyed by the fill and schema versions.
func monthLedger(b *testing.B) (*sqlite.Store, ledgertest.Month) {
	ctx := context.Background()
	path := filepath.Join(os.TempDir(), fmt.Sprintf("gpumeter-ledger-30d-fill%d-schema%d.db", ledgertest.FillVersion, sqlite.SchemaVersion()))
	m := ledgertest.Plan30Days()
	if _, err := os.Stat(path); err != nil {
		tmp := path + ".building"
		for _, p := range []string{tmp, tmp + "-wal", tmp + "-shm"} {
			os.Remove(p)
		}
		s, err := sqlite.Open(ctx, tmp)
		if err != nil {
			b.Fatal(err)
		}
		m = ledgertest.Fill30Days(b, s)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			b.Fatal(err)
		}
	}
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, m
}

// BenchmarkCompute30Days: the fair-share numbers of every user and team
// from the 30-day ledger (8 GPUs, 2,000 containers of 40 users in 8
// teams), at its end, on the held basis with the default half-life: the
// ledger read, the sums and the report with every factor.
//
//	go test -run '^$' -bench Compute30Days ./internal/queue/fairshare/
func BenchmarkCompute30Days(b *testing.B) {
	s, m := monthLedger(b)
	set := Settings{Basis: "held", HalfLife: 7 * 24 * time.Hour, Budgets: map[string]float64{"nlp": 2000}}
	ctx := context.Background()
	b.ResetTimer()
	var users int
	for b.Loop() {
		u, err := Compute(ctx, s, set, m.To)
		if err != nil {
			b.Fatal(err)
		}
		r := u.Report(set, nil)
		users = len(r.Users)
	}
	b.ReportMetric(float64(users), "users")
}
