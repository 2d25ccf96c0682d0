package testenv

import (
	"testing"
	"time"
)

// TestFilled: every field is set, each to its own value, and unexported
// fields are left alone.
func TestFilled(t *testing.T) {
	type inner struct{ A, B string }
	type outer struct {
		S  string
		I  int
		U  uint64
		F  float64
		OK bool
		T  time.Time
		P  *inner
		L  []inner
		M  map[string]float64
		in int
	}
	got := Filled[outer](t)
	if got.S == "" || got.I == 0 || got.U == 0 || got.F == 0 || !got.OK || got.T.IsZero() || got.P == nil ||
		got.P.A == "" || got.P.A == got.P.B || len(got.L) != 2 || got.L[0] == got.L[1] || len(got.M) != 1 || got.in != 0 {
		t.Errorf("Filled = %+v", got)
	}
}
