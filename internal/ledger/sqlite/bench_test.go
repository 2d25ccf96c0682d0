package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/report"
)

// go test -run '^$' -bench BenchmarkCancelBulk5000 -benchtime 5x ./internal/ledger/sqlite/
func BenchmarkCancelBulk5000(b *testing.B) {
	ledgertest.BenchCancelJobs(b, open(b, filepath.Join(b.TempDir(), "ledger.db")), 5000)
}

// go test -run '^$' -bench BenchmarkWriteMinute ./internal/ledger/sqlite/
func BenchmarkWriteMinute(b *testing.B) {
	ledgertest.BenchWriteMinute(b, open(b, filepath.Join(b.TempDir(), "ledger.db")))
}

// dayOfOneContainer writes one container on one GPU for a day at minute
// resolution, one batch per minute as the agent would, and returns the
// ledger's size and that of an empty ledger, both after VACUUM and a WAL
// checkpoint, plus the bytes per table.
func dayOfOneContainer(tb testing.TB) (size, empty int64, tables string) {
	dir := tb.TempDir()
	emptyPath := filepath.Join(dir, "empty.db")
	s, err := sqlite.Open(context.Background(), emptyPath)
	if err != nil {
		tb.Fatal(err)
	}
	s.Close()
	empty, _ = vacuumedSize(tb, emptyPath)

	path := filepath.Join(dir, "day.db")
	s, err = sqlite.Open(context.Background(), path)
	if err != nil {
		tb.Fatal(err)
	}
	m := ledgertest.Plan30Days()
	c, g := m.Containers[0], m.GPUs[0]
	for i := range 24 * 60 {
		start := m.From.Add(time.Duration(i) * time.Minute)
		b := ledger.Batch{
			Usage: []ledger.Usage{{Node: m.Node, Start: start, OwnerKind: ledger.KindContainer, OwnerID: c.ID, GPU: g.UUID,
				Sums: ledger.Sums{AllocatedSeconds: 60, PresentSeconds: 60, UsedSeconds: 41.273912, MemoryByteSeconds: 60 * 31.5 * (1 << 30),
					EnergyJoules: 24318.117, PeakMemoryBytes: 33_123_456_789, PeakUtil: 87.25}}},
			GPUUsage: []ledger.GPUUsage{{Node: m.Node, Start: start, GPU: g.UUID,
				GPUSums: ledger.GPUSums{Seconds: 60, AllocatedSeconds: 60, UsedSeconds: 41.273912, UnattributedSeconds: 0.5,
					EnergyJoules: 24318.117, PeakUtil: 88}}},
			ContainerUsage: []ledger.ContainerUsage{{Node: m.Node, Start: start, ContainerID: c.ID,
				CPUSeconds: 301.772611, RAMByteSeconds: 60 * 12.25 * (1 << 30)}},
		}
		if i == 0 {
			b.Nodes = []ledger.Node{{Name: m.Node, FirstSeen: start}}
			b.GPUs = []ledger.GPU{g}
			b.Containers = []ledger.Container{c}
		}
		if err := s.Write(context.Background(), b); err != nil {
			tb.Fatal(err)
		}
	}
	s.Close()
	size, tables = vacuumedSize(tb, path)
	return size, empty, tables
}

// vacuumedSize runs VACUUM and a truncating WAL checkpoint, then returns
// the file's size and the bytes of each table and index (dbstat).
func vacuumedSize(tb testing.TB, path string) (int64, string) {
	db := rawDB(tb, path)
	for _, q := range []string{"VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"} {
		if _, err := db.Exec(q); err != nil {
			tb.Fatalf("%s: %v", q, err)
		}
	}
	rows, err := db.Query("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC")
	if err != nil {
		tb.Fatal(err)
	}
	var parts []string
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			tb.Fatal(err)
		}
		if n > 4096 {
			parts = append(parts, fmt.Sprintf("%s %d", name, n))
		}
	}
	rows.Close()
	db.Close()
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Size(), strings.Join(parts, ", ")
}

// TestLedgerSize logs the bytes one container on one GPU costs per day at
// minute resolution (usage, GPU and container rows with their hour
// rollups), measured after VACUUM and a WAL checkpoint. The target is
// 200 KiB of growth; the file also holds the empty schema, a fixed cost of
// one page per table and index.
func TestLedgerSize(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode")
	}
	size, empty, tables := dayOfOneContainer(t)
	t.Logf("one container-GPU-day: file %d bytes (%.1f KiB), empty ledger %d bytes, growth %d bytes (%.1f KiB); by table: %s",
		size, float64(size)/1024, empty, size-empty, float64(size-empty)/1024, tables)
	if size-empty > 200<<10 {
		t.Errorf("one container-GPU-day grows the ledger by %d bytes, over the 200 KiB target", size-empty)
	}
}

// go test -run '^$' -bench BenchmarkLedgerSize ./internal/ledger/sqlite/
func BenchmarkLedgerSize(b *testing.B) {
	var size, empty int64
	for b.Loop() {
		size, empty, _ = dayOfOneContainer(b)
	}
	b.ReportMetric(float64(size), "file-bytes/ctr-gpu-day")
	b.ReportMetric(float64(size-empty), "growth-bytes/ctr-gpu-day")
}

// monthLedger returns a SQLite ledger holding ledgertest.Fill30Days. It is
// built once and kept in os.TempDir(), keyed by the fill and schema
// versions, because building it takes a while.
func monthLedger(b *testing.B) (string, ledgertest.Month) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("gpumeter-ledger-30d-fill%d-schema%d.db", ledgertest.FillVersion, sqlite.SchemaVersion()))
	if _, err := os.Stat(path); err == nil {
		return path, ledgertest.Plan30Days()
	}
	tmp := path + ".building"
	for _, p := range []string{tmp, tmp + "-wal", tmp + "-shm"} {
		os.Remove(p)
	}
	s, err := sqlite.Open(context.Background(), tmp)
	if err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	m := ledgertest.Fill30Days(b, s)
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	fi, _ := os.Stat(tmp)
	b.Logf("built the 30-day ledger in %v: %s, %d MiB", time.Since(began).Round(time.Millisecond), path, fi.Size()>>20)
	if err := os.Rename(tmp, path); err != nil {
		b.Fatal(err)
	}
	return path, m
}

// go test -run '^$' -bench BenchmarkUsage30Days ./internal/ledger/sqlite/
func BenchmarkUsage30Days(b *testing.B) {
	path, m := monthLedger(b)
	ledgertest.BenchUsage(b, open(b, path), m, runReport)
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

// go test -run '^$' -bench BenchmarkSubmitJob ./internal/ledger/sqlite/
func BenchmarkSubmitJob(b *testing.B) {
	ledgertest.BenchSubmitJob(b, open(b, filepath.Join(b.TempDir(), "ledger.db")))
}

// go test -run '^$' -bench BenchmarkSubmitJobParallel ./internal/ledger/sqlite/
func BenchmarkSubmitJobParallel(b *testing.B) {
	ledgertest.BenchSubmitJobParallel(b, open(b, filepath.Join(b.TempDir(), "ledger.db")))
}

// go test -run '^$' -bench BenchmarkWriteIntents128 ./internal/ledger/sqlite/
func BenchmarkWriteIntents128(b *testing.B) {
	ledgertest.BenchWriteIntents(b, open(b, filepath.Join(b.TempDir(), "ledger.db")))
}

// go test -run '^$' -bench BenchmarkJobLifecycle ./internal/ledger/sqlite/
func BenchmarkJobLifecycle(b *testing.B) {
	ledgertest.BenchJobLifecycle(b, open(b, filepath.Join(b.TempDir(), "ledger.db")))
}

// go test -run '^$' -bench BenchmarkGPUSeries30Days ./internal/ledger/sqlite/
func BenchmarkGPUSeries30Days(b *testing.B) {
	path, m := monthLedger(b)
	ledgertest.BenchGPUSeries(b, open(b, path), m)
}

// go test -run '^$' -bench BenchmarkQuickCheck30Days ./internal/ledger/sqlite/
//
// QuickCheck runs at every start of an agent on its SQLite ledger.
func BenchmarkQuickCheck30Days(b *testing.B) {
	path, _ := monthLedger(b)
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := sqlite.QuickCheck(context.Background(), path); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
}

// go test -run '^$' -bench BenchmarkActiveJobs10k ./internal/ledger/sqlite/
func BenchmarkActiveJobs10k(b *testing.B) {
	ledgertest.BenchActiveJobs10k(b, open(b, filepath.Join(b.TempDir(), "ledger.db")))
}

// go test -run '^$' -bench 'BenchmarkNodes' ./internal/ledger/sqlite/
func BenchmarkNodes16(b *testing.B) {
	ledgertest.BenchNodes(b, open(b, filepath.Join(b.TempDir(), "ledger.db")), 16)
}

// go test -run '^$' -bench 'BenchmarkNodes' ./internal/ledger/sqlite/
func BenchmarkNodes100(b *testing.B) {
	ledgertest.BenchNodes(b, open(b, filepath.Join(b.TempDir(), "ledger.db")), 100)
}
