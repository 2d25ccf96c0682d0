package queue

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEListsReasons: the README's two reason tables list every
// reason code, each in the right table, and no code the queue does not
// have, so that people and scripts can rely on the list.
func TestREADMEListsReasons(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	waiting := table(t, string(b), "A waiting job's:")
	ended := table(t, string(b), "An ended job's:")
	known := map[Reason]bool{}
	for _, r := range Reasons() {
		known[r.Code] = true
		in := ended
		if r.Waiting {
			in = waiting
		}
		if !in[string(r.Code)] {
			t.Errorf("the README's table of reasons of %s jobs does not list %s", map[bool]string{true: "waiting", false: "ended"}[r.Waiting], r.Code)
		}
	}
	for _, tab := range []map[string]bool{waiting, ended} {
		for code := range tab {
			if !known[Reason(code)] {
				t.Errorf("the README lists %s, which is no reason code", code)
			}
		}
	}
}

// table returns the codes of the README table that follows heading.
func table(t *testing.T, readme, heading string) map[string]bool {
	_, rest, ok := strings.Cut(readme, heading)
	if !ok {
		t.Fatalf("the README has no %q", heading)
	}
	codes := map[string]bool{}
	for _, line := range strings.Split(strings.TrimLeft(rest, "\n"), "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if code, ok := strings.CutPrefix(line, "| `"); ok {
			code, _, _ = strings.Cut(code, "`")
			codes[code] = true
		}
	}
	return codes
}
