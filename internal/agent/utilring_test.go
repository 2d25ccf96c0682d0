package agent

import (
	"math"
	"testing"
	"time"
)

// TestUtilRing: the mean covers the window only, the ring keeps a fixed
// number of samples, and a GPU with no recent sample is left out.
func TestUtilRing(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	u := newUtilRing(10*time.Second, time.Second)
	for i := range 30 {
		p := 20.0
		if i >= 20 {
			p = 80 // the last ten seconds
		}
		u.add("GPU-a", t0.Add(time.Duration(i)*time.Second), p)
	}
	u.add("GPU-old", t0, 100)
	now := t0.Add(29 * time.Second)
	m := u.means(now)
	// The window holds seconds 19..29: one 20 % sample and ten 80 %.
	if want := (20 + 10*80) / 11.0 / 100; math.Abs(m["GPU-a"]-want) > 1e-9 {
		t.Errorf("GPU-a mean %v, want %v", m["GPU-a"], want)
	}
	if _, ok := m["GPU-old"]; ok {
		t.Errorf("GPU-old has a mean %v from a sample outside the window", m["GPU-old"])
	}
	if n := len(u.byGPU["GPU-a"].at); n != 11 {
		t.Errorf("ring holds %d samples, want 11", n)
	}
}
