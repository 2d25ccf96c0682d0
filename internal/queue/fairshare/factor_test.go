package fairshare

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestFactorProperties: for any use and shares the factor is in [0, 1]
// (0 only where 2^−x underflows: use over a thousand times the share),
// 1 without use, 0.5 for use in proportion to the share, lower for more
// use and higher for a larger share.
func TestFactorProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 2))
	for range 10_000 {
		total := 1 + rng.Float64()*1e4
		usage := rng.Float64() * total
		shares := 1 + rng.Float64()*100
		share := 0.01 + rng.Float64()*(shares-0.01)
		f := Factor(usage, share, total, shares)
		x := (usage / total) / (share / shares)
		if !(f >= 0 && f <= 1) || f == 0 && x < 1000 {
			t.Fatalf("Factor(%v, %v, %v, %v) = %v, outside (0, 1]", usage, share, total, shares, f)
		}
		if x*1.5 > 1000 {
			continue // underflows: order among such users is FIFO
		}
		if more := Factor(usage*1.5+0.1, share, total, shares); more >= f {
			t.Fatalf("more use (%v → %v) did not lower the factor: %v → %v", usage, usage*1.5+0.1, f, more)
		}
		if larger := Factor(usage, share*2, total, shares); usage > 0 && larger <= f {
			t.Fatalf("a larger share (%v → %v) did not raise the factor of use %v: %v → %v", share, share*2, usage, f, larger)
		}
		if fair := Factor(total*share/shares, share, total, shares); math.Abs(fair-0.5) > 1e-12 {
			t.Fatalf("use in proportion to the share: factor %v, want 0.5", fair)
		}
	}
	if f := Factor(0, 1, 10, 4); f != 1 {
		t.Errorf("no use: %v, want 1", f)
	}
	if f := Factor(3, 1, 0, 4); f != 1 {
		t.Errorf("nobody's use: %v, want 1", f)
	}
	if f := Factor(3, 0, 10, 4); f != 0 {
		t.Errorf("no share: %v, want 0", f)
	}
}
