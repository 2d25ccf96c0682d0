package apitype

import (
	"net/url"
	"testing"
	"unicode/utf8"
)

// FuzzQuery: ParseQuery never panics, refuses what url.ParseQuery cannot
// parse, and what it keeps is valid UTF-8 and what url.ParseQuery reads.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{"by=user&user=alice", "user=alice%zz", "user=alice;x", "a=%ff", "=x&&b", "label=team%3Dnlp&label=x%3Dy"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := ParseQuery(raw)
		want, werr := url.ParseQuery(raw)
		if err != nil {
			return
		}
		if werr != nil {
			t.Fatalf("ParseQuery(%q) accepted what url.ParseQuery refuses: %v", raw, werr)
		}
		for k, vs := range got {
			if !utf8.ValidString(k) {
				t.Fatalf("ParseQuery(%q): key %q is not UTF-8", raw, k)
			}
			for i, v := range vs {
				if !utf8.ValidString(v) || want[k][i] != v {
					t.Fatalf("ParseQuery(%q)[%q][%d] = %q, url.ParseQuery has %q", raw, k, i, v, want[k])
				}
			}
		}
	})
}
