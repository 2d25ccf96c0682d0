package queue

import (
	"slices"
	"testing"
)

func TestParseStates(t *testing.T) {
	got, err := ParseStates([]string{"queued,running", "queued", " cancelled"})
	if want := []State{Queued, Running, Cancelled}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ParseStates = %v, %v; want %v", got, err, want)
	}
	for _, bad := range [][]string{{"sleeping"}, {"queued,"}, {""}} {
		if _, err := ParseStates(bad); err == nil {
			t.Errorf("ParseStates(%q) = nil error, want one", bad)
		}
	}
}
