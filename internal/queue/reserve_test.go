package queue

import (
	"testing"
	"time"
)

func TestAppendClock(t *testing.T) {
	for _, tt := range []struct {
		at   time.Time
		date bool
		want string
	}{
		{time.Date(2026, 12, 1, 14, 20, 0, 0, time.UTC), false, "14:20 UTC"},
		{time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), true, "2 Dec 00:00 UTC"},
		{time.Date(2027, 1, 12, 7, 0, 0, 0, time.FixedZone("x", 3600)), true, "12 Jan 06:00 UTC"},
	} {
		if got := string(appendClock(nil, tt.at, tt.date)); got != tt.want {
			t.Errorf("%v: %q, want %q", tt.at, got, tt.want)
		}
	}
}

func TestCeilMinute(t *testing.T) {
	for at, want := range map[time.Time]time.Time{
		time.Date(2026, 12, 1, 9, 5, 0, 0, time.UTC):     time.Date(2026, 12, 1, 9, 5, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 9, 5, 0, 1, time.UTC):     time.Date(2026, 12, 1, 9, 6, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 20, 58, 9, 0, time.UTC):   time.Date(2026, 12, 1, 20, 59, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 23, 59, 30, 0, time.UTC):  time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 30, 0, time.UTC): time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		if got := time.Unix(0, ceilMinute(at.UnixNano())).UTC(); !got.Equal(want) {
			t.Errorf("ceilMinute(%v) = %v, want %v", at, got, want)
		}
	}
}
