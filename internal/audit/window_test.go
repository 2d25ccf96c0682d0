package audit

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestPrefixOf(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":          "192.0.2.0/24",
		"::ffff:192.0.2.7":   "192.0.2.0/24",
		"2001:db8:1:2:3::4":  "2001:db8:1:2::/64",
		"fe80::1%eth0":       "fe80::/64",
		"unix uid 1000":      "unix uid 1000",
		"":                   "",
		"not an address 1.2": "not an address 1.2",
	} {
		if got := prefixOf(in); got != want {
			t.Errorf("prefixOf(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"192.0.2.7:80": "192.0.2.7", "[2001:db8::1]:443": "2001:db8::1", "unix uid 0": "unix uid 0"} {
		if got := hostOf(in); got != want {
			t.Errorf("hostOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestClip: a clipped string takes at most its cap in JSON, whatever it
// holds, and one that fits is left alone.
func TestClip(t *testing.T) {
	for _, s := range []string{"", "short", strings.Repeat("a", 128), strings.Repeat("a", 129), strings.Repeat("<", 100),
		strings.Repeat("\x00", 100), strings.Repeat("\xff", 100), strings.Repeat("é", 100), strings.Repeat("\"\\", 100), "a\u2028b"} {
		got := clip(s, capText)
		b, _ := json.Marshal(got)
		if len(b)-2 > capText {
			t.Errorf("clip(%q) = %q takes %d bytes in JSON, more than %d", s, got, len(b)-2, capText)
		}
		if full, _ := json.Marshal(s); len(full)-2 <= capText && got != s {
			t.Errorf("clip(%q) = %q, want it left alone", s, got)
		}
		if !strings.HasPrefix(s, strings.TrimSuffix(got, "…")) || !utf8.ValidString(strings.TrimSuffix(got, "…")) && utf8.ValidString(s) {
			t.Errorf("clip(%q) = %q, not a prefix of it", s, got)
		}
	}
}

// TestObservedLineBound: the JSON line of a clipped event takes at most
// maxLine0 bytes, every field at its longest.
func TestObservedLineBound(t *testing.T) {
	long := strings.Repeat("<", 10_000)
	e := clipEvent(Event{
		Time: time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -12*3600-59*60)), Kind: long, Rule: long, FindingID: long,
		Node: long, ContainerID: long, Container: long, Owner: long, Evidence: map[string]float64{long: 1}, DryRun: true, Outcome: long,
		Attempts: -1 << 63, Error: long, Caller: long, Role: long, Source: long, Action: long, Target: long, Status: -1 << 63, Count: -1 << 63,
	})
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if len(b)+1 > maxLine0 {
		t.Errorf("a clipped event takes %d bytes, more than maxLine0 %d:\n%s", len(b)+1, maxLine0, b)
	}
}
