package main

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// BenchmarkSimulateHour plays one hour of the load scenario (8 GPUs, 64
// containers, 256 GPU processes, 1 s samples) into a fresh SQLite ledger.
// The target is a whole day in 20 s, that is 0.83 s an hour.
func BenchmarkSimulateHour(b *testing.B) { benchSimulate(b, time.Hour) }

// BenchmarkSimulateDay plays the whole benchmark day, the hours'
// compaction into chunks included.
func BenchmarkSimulateDay(b *testing.B) { benchSimulate(b, 24*time.Hour) }

func benchSimulate(b *testing.B, d time.Duration) {
	sc, err := sim.Load("../../testdata/bench-8gpu-64ctr.yaml")
	if err != nil {
		b.Fatal(err)
	}
	sc.Duration = d
	for b.Loop() {
		store, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "l.db"))
		if err != nil {
			b.Fatal(err)
		}
		if err := simulate(context.Background(), io.Discard, sc, store, "bench"); err != nil {
			b.Fatal(err)
		}
		store.Close()
	}
}
