package whatif_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

// monthLedger opens the SQLite ledger of ledgertest.Fill30Days (8 GPUs,
// 2,000 containers, 30 days of minutes): the file internal/ledger/sqlite's
// and internal/waste's benchmarks keep in os.TempDir(), built when
// missing.
func monthLedger(b *testing.B) (*sqlite.Store, ledgertest.Month) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("gpumeter-ledger-30d-fill%d-schema%d.db", ledgertest.FillVersion, sqlite.SchemaVersion()))
	if _, err := os.Stat(path); err != nil {
		tmp := path + ".building"
		for _, p := range []string{tmp, tmp + "-wal", tmp + "-shm"} {
			os.Remove(p)
		}
		s, err := sqlite.Open(context.Background(), tmp)
		if err != nil {
			b.Fatal(err)
		}
		ledgertest.Fill30Days(b, s)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			b.Fatal(err)
		}
	}
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, ledgertest.Plan30Days()
}

// BenchmarkMonth reads the 30-day ledger's minutes into a history, as
// `gpumeter whatif --since 30d` does, and replays it once per mode.
func BenchmarkMonth(b *testing.B) {
	s, m := monthLedger(b)
	ctx := context.Background()
	b.Run("load", func(b *testing.B) {
		for b.Loop() {
			if _, err := whatif.Load(ctx, s, m.From, m.To, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	h, err := whatif.Load(ctx, s, m.From, m.To, "")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(h.Holders)), "holders")
	for _, mode := range whatif.Modes() {
		b.Run(string(mode), func(b *testing.B) {
			for b.Loop() {
				if _, err := whatif.Run(h, whatif.Options{Modes: []whatif.Mode{mode}, NoSearch: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("advise", func(b *testing.B) {
		for b.Loop() {
			whatif.Advise(h, whatif.AdviseOptions{})
		}
	})
}
