package postgres_test

import (
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
)

// go test -run '^$' -bench BenchmarkWriteMinute ./internal/ledger/postgres/
func BenchmarkWriteMinute(b *testing.B) {
	ledgertest.BenchWriteMinute(b, open(b, pgtest.DSN(b)))
}

// go test -run '^$' -bench BenchmarkUsage30Days ./internal/ledger/postgres/
func BenchmarkUsage30Days(b *testing.B) {
	// The throwaway server does not outlive the test binary, so the month
	// is written again each run.
	s := open(b, pgtest.DSN(b))
	began := time.Now()
	m := ledgertest.Fill30Days(b, s)
	b.Logf("built the 30-day ledger in %v", time.Since(began).Round(time.Millisecond))
	ledgertest.BenchUsage(b, s, m)
}
