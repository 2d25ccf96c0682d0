package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// TestSimulateGolden simulates into SQLite and compares what the ledger
// holds with a golden file: the totals of every owner on every GPU,
// written out, and digests of the minute and hour series. The golden files
// were written by the code before simulate was made fast (see
// BENCHMARKS.md), so a speed-up that moves a single digit fails here.
// go test -run SimulateGolden -update ./cmd/gpumeter rewrites them.
func TestSimulateGolden(t *testing.T) {
	for _, tc := range []struct {
		name, scenario string
		duration       time.Duration // 0: the scenario's
	}{
		// 90 minutes of the benchmark load (8 GPUs, 64 containers, 256
		// GPU processes): two flushes, and phase changes at the hour.
		{"load", "../../testdata/bench-8gpu-64ctr.yaml", 90 * time.Minute},
		// Shares, utilisations and intervals that do not come out round.
		{"uneven", "testdata/simulate/uneven.yaml", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := sim.Load(tc.scenario)
			if err != nil {
				t.Fatal(err)
			}
			if tc.duration > 0 {
				sc.Duration = tc.duration
			}
			ctx := context.Background()
			store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "l.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			if err := simulate(ctx, io.Discard, sc, store, "test"); err != nil {
				t.Fatal(err)
			}
			got := ledgerDigest(t, store, ledger.Filter{From: sc.Start, To: sc.Start.Add(sc.Duration + time.Minute)})

			golden := filepath.Join("testdata", "simulate", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("the ledger differs from %s:\n%s", golden, diffLines(string(want), got))
			}
		})
	}
}

// ledgerDigest writes out what store holds in f: the sums print with %v,
// which gives the shortest decimal that reads back as the same float64.
func ledgerDigest(t *testing.T, store ledger.Store, f ledger.Filter) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	gpus, err := store.GPUs(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gpus {
		fmt.Fprintf(&b, "gpu %d %s %+v\n", g.GPU.Index, g.GPU.UUID, g.GPUSums)
	}
	usage, err := store.Usage(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range usage {
		fmt.Fprintf(&b, "usage %s %s %s %+v\n", u.OwnerKind, u.OwnerID, u.GPU.UUID, u.Sums)
	}
	for _, step := range []time.Duration{time.Minute, time.Hour} {
		points, err := store.Series(ctx, f, step)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		for _, p := range points {
			fmt.Fprintf(h, "%d %s %s %s %+v\n", p.Start.Unix(), p.OwnerKind, p.OwnerID, p.GPU.UUID, p.Sums)
		}
		fmt.Fprintf(&b, "series %s: %d points, sha256 %x\n", step, len(points), h.Sum(nil))
		ctrs, err := store.ContainerSeries(ctx, f, step)
		if err != nil {
			t.Fatal(err)
		}
		h.Reset()
		for _, c := range ctrs {
			fmt.Fprintf(h, "%d %s %v %v\n", c.Start.Unix(), c.ContainerID, c.CPUSeconds, c.RAMByteSeconds)
		}
		fmt.Fprintf(&b, "container series %s: %d points, sha256 %x\n", step, len(ctrs), h.Sum(nil))
	}
	return b.String()
}
