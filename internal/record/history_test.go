package record_test

import (
	"context"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/record"
)

// TestGaugesPerMinute samples every 10 s for two minutes with utilisation
// rising by 5 points a sample: each sample's readings go with the minute
// its interval ends in, and the ledger's GPU series gives their means and
// maxima per minute and per hour.
func TestGaugesPerMinute(t *testing.T) {
	store := openStore(t)
	rec := record.New(record.Config{Store: store, Node: node})
	r := newRig()
	for s := 0.0; s <= 120; s += 10 {
		rec.Add(r.step(at(s), s/2, uint64(s)*gib/10))
		if s == 60 {
			flush(t, rec) // the minute's readings add across batches
		}
	}
	flush(t, rec)
	// The sample at 0 books nothing and gives no readings; those at 10–60
	// end intervals in 10:00, those at 70–120 in 10:01.
	point := func(start time.Time, from, to float64) ledger.GPUPoint {
		p := ledger.GPUPoint{Start: start}
		for s := from; s <= to; s += 10 {
			p.Samples++
			p.UtilMean += s / 2
			p.MemoryMean += float64(uint64(s) * gib / 10)
			p.PowerMean += idleW + wattsPerUtil*s/2
		}
		n := float64(p.Samples)
		p.UtilMean, p.MemoryMean, p.PowerMean = p.UtilMean/n, p.MemoryMean/n, p.PowerMean/n
		p.UtilMax, p.MemoryMax, p.PowerMax = to/2, float64(uint64(to)*gib/10), idleW+wattsPerUtil*to/2
		return p
	}
	gs := ledger.GPUSeriesStore(store)
	got, err := gs.GPUSeries(context.Background(), node, t0, t0.Add(time.Hour), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("GPU series: %d GPUs, want 1", len(got))
	}
	want := []ledger.GPUPoint{point(t0, 10, 60), point(t0.Add(time.Minute), 70, 120)}
	if d := gocmp.Diff(want, got[0].Points); d != "" {
		t.Errorf("minute points (-want +got):\n%s", d)
	}
	got, err = gs.GPUSeries(context.Background(), node, t0, t0.Add(time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff([]ledger.GPUPoint{point(t0, 10, 120)}, got[0].Points); d != "" {
		t.Errorf("hour point (-want +got):\n%s", d)
	}
}
