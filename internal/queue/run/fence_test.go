package run

import (
	"testing"
	"time"
)

// TestFenceTimes: the fence and its stop grace end within the takeover,
// less the third the node lease's heartbeat may lag behind the queue's
// last answer (ledger.flush_interval, which config keeps within it), and
// a blip shorter than a third of the takeover never fences.
func TestFenceTimes(t *testing.T) {
	for _, c := range []struct {
		takeover, stopGrace, after, grace time.Duration
	}{
		{5 * time.Second, time.Second, 5*time.Second - 5*time.Second/3 - time.Second, time.Second}, // the e2e fleet's
		{45 * time.Second, 30 * time.Second, 15 * time.Second, 15 * time.Second},                   // the defaults
		{45 * time.Second, 0, 30 * time.Second, 0},
	} {
		after, grace := fenceTimes(c.takeover, c.stopGrace)
		if after != c.after || grace != c.grace {
			t.Errorf("fenceTimes(%v, %v) = %v, %v; want %v, %v", c.takeover, c.stopGrace, after, grace, c.after, c.grace)
		}
		if after+grace > c.takeover-c.takeover/3 || after < c.takeover/3 {
			t.Errorf("fenceTimes(%v, %v): the fence at %v with a grace of %v ends past two thirds of the takeover, or comes before one", c.takeover, c.stopGrace, after, grace)
		}
	}
}
