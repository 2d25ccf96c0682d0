package apitype

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseAuditQuery(t *testing.T) {
	now := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	good := []struct {
		query string
		want  AuditQuery
	}{
		{"", AuditQuery{From: now.Add(-24 * time.Hour), To: now, Limit: 100}},
		{"since=1h&limit=5", AuditQuery{From: now.Add(-time.Hour), To: now, Limit: 5}},
		{"since=7d&to=2026-11-01", AuditQuery{From: time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), Limit: 100}},
		{"from=2026-11-01T10:00:00%2B02:00", AuditQuery{From: time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC), To: now, Limit: 100}},
		{"limit=100", AuditQuery{From: now.Add(-24 * time.Hour), To: now, Limit: 100}},
	}
	for _, tt := range good {
		q, err := url.ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseAuditQuery(q, now, 100)
		if err != nil {
			t.Errorf("ParseAuditQuery(%q) = %v", tt.query, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseAuditQuery(%q) (-want +got):\n%s", tt.query, diff)
		}
	}
	for query, want := range map[string]string{
		"since=0s":                  `since: "0s" is not a duration above 0`,
		"since=-1h":                 `since: "-1h" is not a duration above 0`,
		"since=1h&since=2h":         "since: given 2 times",
		"from=yesterday":            `from: "yesterday" is neither RFC 3339`,
		"to=2026-13-01":             `to: "2026-13-01" is neither RFC 3339`,
		"limit=x":                   `limit: "x" is not a number from 1 to 100`,
		"limit=101":                 `limit: "101" is not a number from 1 to 100`,
		"limit=-1":                  `limit: "-1" is not a number from 1 to 100`,
		"from=2026-11-02T12:00:00Z": "from: 2026-11-02T12:00:00Z is not before to 2026-11-02T12:00:00Z",
		"=x":                        "\"\" is not a parameter of /api/v1/audit",
	} {
		q, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseAuditQuery(q, now, 100); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseAuditQuery(%q) = %v, want an error containing %q", query, err, want)
		}
	}
}

func FuzzAuditQuery(f *testing.F) {
	for _, s := range []string{"", "since=1h", "since=7d&limit=10", "from=2026-11-01&to=2026-11-02", "from=2026-11-01T10:00:00%2B02:00",
		"to=0001-01-01", "since=65535d", "since=2562047h", "limit=0", "limit=99999999999999999999", "from=2026-11-03", "since=1h&from=2026-11-01", "a=1&a=2", "%zz"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	const max = 1000
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		aq, err := ParseAuditQuery(q, now, max)
		if err != nil {
			// The error starts with the parameter at fault, which is the
			// caller's to name as they like.
			msg := err.Error()
			named := msg == "since and from exclude each other"
			for k := range q {
				if rest, ok := strings.CutPrefix(msg, k+": "); ok {
					named = true
					checkOwnWords(t, rest)
				}
			}
			if !named {
				t.Errorf("ParseAuditQuery(%q) = %q, which names no parameter", raw, msg)
			}
			return
		}
		if !aq.From.Before(aq.To) {
			t.Errorf("ParseAuditQuery(%q): from %s is not before to %s", raw, aq.From, aq.To)
		}
		if aq.Limit < 1 || aq.Limit > max {
			t.Errorf("ParseAuditQuery(%q): limit %d outside 1..%d", raw, aq.Limit, max)
		}
	})
}

// TestAuditQueryYearOne: from=0001-01-01 is a from like any other, not the
// default of the last day.
func TestAuditQueryYearOne(t *testing.T) {
	now := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	q, err := ParseAuditQuery(url.Values{"from": {"0001-01-01"}}, now, 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC); !q.From.Equal(want) || !q.To.Equal(now) {
		t.Errorf("window %s..%s, want %s..%s", q.From, q.To, want, now)
	}
}

// TestParseAuditQueryNamed: a command line that took the parameters as
// flags has its errors name the flags.
func TestParseAuditQueryNamed(t *testing.T) {
	now := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	flag := func(p string) string { return "--" + p }
	for query, want := range map[string]string{
		"since=soon":                    `--since: "soon" is not a duration above 0 like 1h or 7d`,
		"since=1h&from=2026-11-01":      "--since and --from exclude each other",
		"from=2026-11-03&to=2026-11-02": "--from: 2026-11-03T00:00:00Z is not before --to 2026-11-02T00:00:00Z",
		"to=2026-13-01":                 `--to: "2026-13-01" is neither RFC 3339`,
		"since=1h&since=2h":             "--since: given 2 times",
	} {
		q, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseAuditQueryNamed(q, now, 100, flag); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ParseAuditQueryNamed(%q) = %v, want an error starting %q", query, err, want)
		}
	}
	got, err := ParseAuditQueryNamed(url.Values{"since": {"2h"}}, now, 100, flag)
	if want := (AuditQuery{From: now.Add(-2 * time.Hour), To: now, Limit: 100}); err != nil || got != want {
		t.Errorf("since=2h: %+v, %v; want %+v", got, err, want)
	}
}

// checkOwnWords fails when an error message shows Go's insides: error
// prefixes, types, files or stacks. Only the message's own words are
// checked, not the caller's input it quotes, which may hold anything.
func checkOwnWords(t *testing.T, msg string) {
	t.Helper()
	if msg == "" {
		t.Errorf("an error without a message")
	}
	msg = quoted.ReplaceAllString(msg, `""`)
	for _, bad := range []string{"json:", "reflect", ".go:", "goroutine", "runtime", "panic", "%!", "0x", "*"} {
		if strings.Contains(msg, bad) {
			t.Errorf("error message %q shows %q", msg, bad)
		}
	}
	if m := goType.FindString(msg); m != "" {
		t.Errorf("error message %q shows the Go type %s", msg, m)
	}
}

// goType matches a package-qualified Go type such as apitype.AuditQuery.
var goType = regexp.MustCompile(`\b[a-z][a-z0-9]*\.[A-Z][A-Za-z0-9]*`)

// quoted matches a Go-quoted string, in which a message repeats what the
// caller sent.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
