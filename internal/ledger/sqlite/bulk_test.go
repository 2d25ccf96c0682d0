package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// TestBulkWriteIsRowByRow writes the same minutes into two ledgers, once
// as one batch (whose rows go 64 to a statement, with a rest written one
// by one) and once a minute a batch (every row its own statement, the hour
// rows summed across batches), and compares every usage table row for
// row: the multi-row statements must leave what the single ones leave.
func TestBulkWriteIsRowByRow(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2025, 1, 1, 10, 17, 0, 0, time.UTC)
	const minutes = 203 // 406 usage rows: six full statements and a rest
	var all ledger.Batch
	var each []ledger.Batch
	for i := range minutes {
		at := start.Add(time.Duration(i) * time.Minute)
		v := float64(i%7) + 0.25*float64(i%4)
		var b ledger.Batch
		for j, owner := range []string{"a", "b"} {
			b.Usage = append(b.Usage, ledger.Usage{Node: "n", Start: at, OwnerKind: ledger.KindContainer, OwnerID: owner, GPU: "GPU-0",
				Sums: ledger.Sums{AllocatedSeconds: v, HeldSeconds: 60, PresentSeconds: v + 1, UsedSeconds: v / 2,
					MemoryByteSeconds: float64(1000*i + j), EnergyJoules: v * 3, PeakMemoryBytes: uint64(i * 10), PeakUtil: float64(i % 100)}})
		}
		b.GPUUsage = []ledger.GPUUsage{{Node: "n", Start: at, GPU: "GPU-0", GPUSums: ledger.GPUSums{Seconds: 60, AllocatedSeconds: v,
			UsedSeconds: v / 2, EnergyJoules: v * 5, IdleEnergyJoules: v, PeakUtil: float64(i % 90)}}}
		b.ContainerUsage = []ledger.ContainerUsage{{Node: "n", Start: at, ContainerID: "a", CPUSeconds: v, RAMByteSeconds: float64(i)}}
		all.Usage = append(all.Usage, b.Usage...)
		all.GPUUsage = append(all.GPUUsage, b.GPUUsage...)
		all.ContainerUsage = append(all.ContainerUsage, b.ContainerUsage...)
		each = append(each, b)
	}
	bulk := filepath.Join(t.TempDir(), "bulk.db")
	if err := open(t, bulk).Write(ctx, all); err != nil {
		t.Fatal(err)
	}
	single := filepath.Join(t.TempDir(), "single.db")
	s := open(t, single)
	for _, b := range each {
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"usage_minute", "usage_hour", "usage_day", "gpu_minute", "gpu_hour", "gpu_day", "container_minute", "container_hour", "container_day"} {
		got, want := dump(t, bulk, table), dump(t, single, table)
		if got != want {
			t.Errorf("%s written in one batch:\n%s\nwritten a minute a batch:\n%s", table, got, want)
		}
		// The 203 minutes fall in one day: one row per key there.
		if n := strings.Count(got, "\n"); n < 2 && !strings.HasSuffix(table, "_day") || n < 1 {
			t.Errorf("%s holds %d rows, want some", table, n)
		}
	}
}

// dump prints every row of table, in key order.
func dump(t *testing.T, path, table string) string {
	t.Helper()
	rows, err := rawDB(t, path).Query("SELECT * FROM " + table + " ORDER BY 1, 2, 3")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(&b, vals...)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
