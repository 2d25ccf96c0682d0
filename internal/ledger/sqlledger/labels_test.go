package sqlledger

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeLabels(t *testing.T) {
	for _, l := range []map[string]string{
		nil,
		{"gpumeter.user": "alice"},
		{"gpumeter.user": "alice", "gpumeter.team": "vision", "": ""},
		{"quote": `say "hi"`, "html": "<b>&</b>", "tab": "a\tb", "unicode": "GPU ✓ 名前"},
	} {
		got, err := DecodeLabels(EncodeLabels(l))
		if err != nil {
			t.Fatal(err)
		}
		if len(l) == 0 {
			l = nil
		}
		if diff := cmp.Diff(l, got); diff != "" {
			t.Errorf("labels changed through encode and decode (-want +got):\n%s", diff)
		}
	}
	for _, bad := range []string{`{`, `{"a"}`, `{"a":}`, `{"a":"b",}`, `{"a":"b""c":"d"}`, `{"a":1}`, `[]`, "{\"a\":\"\x01\"}"} {
		if _, err := DecodeLabels(bad); err == nil {
			t.Errorf("DecodeLabels(%q) succeeded", bad)
		}
	}
}

// FuzzDecodeLabels checks the fast path against encoding/json: whatever it
// decodes, json.Unmarshal decodes the same.
func FuzzDecodeLabels(f *testing.F) {
	for _, s := range []string{`{"a":"b"}`, `{"a":"b","c":"d"}`, `{"a":"b","a":"c"}`, `{"\u00e9":"x"}`, "{\"a\":\"\xff\"}", `{ "a":"b"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fast, ok := plainLabels(s)
		if !ok {
			return
		}
		var want map[string]string
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatalf("plainLabels(%q) decoded what json refuses: %v", s, err)
		}
		if !cmp.Equal(want, fast) {
			t.Fatalf("plainLabels(%q) = %v, json says %v", s, fast, want)
		}
	})
}
