package queue

import (
	"strings"
	"testing"
	"time"
)

func TestClockText(t *testing.T) {
	c := &clockText{now: time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)}
	for at, want := range map[time.Time]string{
		time.Date(2026, 12, 1, 14, 20, 0, 0, time.UTC):                "14:20 UTC",
		time.Date(2026, 12, 1, 9, 5, 1, 0, time.UTC):                  "09:06 UTC", // rounded up
		time.Date(2026, 12, 1, 23, 59, 30, 0, time.UTC):               "2 Dec 00:00 UTC",
		time.Date(2027, 1, 12, 7, 0, 0, 0, time.FixedZone("x", 3600)): "12 Jan 06:00 UTC",
	} {
		var b strings.Builder
		c.write(&b, at.UnixNano())
		c.write(&b, at.UnixNano()) // the second from what it kept
		if b.Len() != 2*len(want) {
			t.Errorf("%v: %q twice is %q", at, want, b.String())
		}
		b.Reset()
		c.write(&b, at.UnixNano())
		if b.String() != want {
			t.Errorf("%v: %q, want %q", at, b.String(), want)
		}
	}
}
