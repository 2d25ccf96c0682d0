package sampler_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sampler/samplertest"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// BenchmarkTick measures one whole tick on the load scenario: 8 GPUs, 64
// containers, 256 GPU processes, read from the simulator, resolved and
// metered, with warm state.
func BenchmarkTick(b *testing.B) {
	sc, err := sim.Load("../../testdata/bench-8gpu-64ctr.yaml")
	if err != nil {
		b.Fatal(err)
	}
	s := samplertest.Scenario(sc, sampler.Config{})
	ctx := context.Background()
	now := sc.Start
	s.Step(ctx, now)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		s.Step(ctx, now)
	}
	if n := len(s.Latest().Usage); n != 256 {
		b.Fatalf("%d usage rows, want 256", n)
	}
}
