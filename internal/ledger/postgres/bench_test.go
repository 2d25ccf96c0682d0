package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/queue/fairshare"
	"github.com/gpumeter/gpumeter/internal/report"
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
	ledgertest.BenchUsage(b, s, m, runReport)
}

// runReport is the whole of `gpumeter report` for ledgertest.BenchUsage.
func runReport(ctx context.Context, s ledger.Store, by string, from, to time.Time) error {
	req := report.Request{By: by, From: &from, To: &to}
	if err := req.Validate(to); err != nil {
		return err
	}
	_, err := report.Run(ctx, s, nil, req, cost.Model{GPUHour: map[string]float64{"default": 2}, KWh: 0.2, CPUCoreHour: 0.01})
	return err
}

// go test -run '^$' -bench BenchmarkSubmitJob ./internal/ledger/postgres/
func BenchmarkSubmitJob(b *testing.B) {
	ledgertest.BenchSubmitJob(b, open(b, pgtest.DSN(b)))
}

// go test -run '^$' -bench BenchmarkSubmitJobParallel ./internal/ledger/postgres/
func BenchmarkSubmitJobParallel(b *testing.B) {
	ledgertest.BenchSubmitJobParallel(b, open(b, pgtest.DSN(b)))
}

// go test -run '^$' -bench BenchmarkWriteIntents128 ./internal/ledger/postgres/
func BenchmarkWriteIntents128(b *testing.B) {
	ledgertest.BenchWriteIntents(b, open(b, pgtest.DSN(b)))
}

// go test -run '^$' -bench BenchmarkJobLifecycle ./internal/ledger/postgres/
func BenchmarkJobLifecycle(b *testing.B) {
	ledgertest.BenchJobLifecycle(b, open(b, pgtest.DSN(b)))
}

// go test -run '^$' -bench BenchmarkCancelBulk5000 -benchtime 5x ./internal/ledger/postgres/
func BenchmarkCancelBulk5000(b *testing.B) {
	ledgertest.BenchCancelJobs(b, open(b, pgtest.DSN(b)), 5000)
}

// BenchmarkFairShare30Days: every user's and team's fair-share numbers
// from the 30-day ledger at its end, as fairshare's own benchmark does on
// SQLite: the ledger read, the sums and the report with every factor.
//
//	go test -run '^$' -bench BenchmarkFairShare30Days ./internal/ledger/postgres/
func BenchmarkFairShare30Days(b *testing.B) {
	s := open(b, pgtest.DSN(b))
	m := ledgertest.Fill30Days(b, s)
	set := fairshare.Settings{Basis: "held", HalfLife: 7 * 24 * time.Hour}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		u, err := fairshare.Compute(ctx, s, set, m.To)
		if err != nil {
			b.Fatal(err)
		}
		if r := u.Report(set, nil); len(r.Users) == 0 {
			b.Fatal("no users")
		}
	}
}

// BenchmarkGPUSeries30Days reads GPU series from the 30-day ledger once
// its statistics are known, as autovacuum would have them on a ledger a
// month old (right after the fill the planner has none).
//
//	go test -run '^$' -bench BenchmarkGPUSeries30Days ./internal/ledger/postgres/
func BenchmarkGPUSeries30Days(b *testing.B) {
	dsn := pgtest.DSN(b)
	s := open(b, dsn)
	m := ledgertest.Fill30Days(b, s)
	rawExec(b, dsn, "ANALYZE")
	ledgertest.BenchGPUSeries(b, s, m)
}

// go test -run '^$' -bench 'BenchmarkNodes' ./internal/ledger/postgres/
func BenchmarkNodes16(b *testing.B) { ledgertest.BenchNodes(b, open(b, pgtest.DSN(b)), 16) }

// go test -run '^$' -bench 'BenchmarkNodes' ./internal/ledger/postgres/
func BenchmarkNodes100(b *testing.B) { ledgertest.BenchNodes(b, open(b, pgtest.DSN(b)), 100) }

// go test -run '^$' -bench BenchmarkActiveJobs10k ./internal/ledger/postgres/
func BenchmarkActiveJobs10k(b *testing.B) {
	ledgertest.BenchActiveJobs10k(b, open(b, pgtest.DSN(b)))
}

// BenchmarkPublishRanks10k is the fleet scheduler's publish of a ranking
// of 10,000 queued jobs, and a follower's read of it.
func BenchmarkPublishRanks10k(b *testing.B) {
	ledgertest.BenchPublishRanks(b, open(b, pgtest.DSN(b)), 10000)
}
