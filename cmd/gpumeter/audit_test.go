package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/audit"

	"github.com/gpumeter/gpumeter/internal/testenv"
)

// auditEvents are an API call refused, one let through and a policy stop,
// in the last day, and one API call two days ago.
func auditEvents(now time.Time) []audit.Event {
	return []audit.Event{
		{Time: now.Add(-48 * time.Hour), Kind: audit.KindAPI, Caller: "carol (token carol-1)", Role: "admin", Source: "10.0.0.9:5000", Action: "containers.stop", Target: "container old", Status: 200, Outcome: audit.OutcomeAllowed},
		{Time: now.Add(-3 * time.Hour), Kind: audit.KindAPI, Caller: "bob (token bob-1)", Role: "user", Source: "10.0.0.7:41000", Action: "containers.stop", Target: "container 0123456789ab\t\x1b[31m(alice-train)", Status: 403, Outcome: audit.OutcomeDenied, Error: "users may stop only their own containers"},
		{Time: now.Add(-2 * time.Hour), Kind: "stop", Rule: "idle", ContainerID: "0123456789abcdef", Container: "alice-train", Owner: "alice", Outcome: "stopped", DryRun: true},
		{Time: now.Add(-1 * time.Hour), Kind: audit.KindAPI, Caller: "alice (token alice-1)", Role: "user", Source: "unix uid 1000", Action: "containers.stop", Target: "container 0123456789ab (alice-train)", Status: 200, Outcome: audit.OutcomeAllowed, Error: "reason: done"},
	}
}

func writeAuditFile(t *testing.T, events []audit.Event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		line, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return testenv.WriteFile(t, t.TempDir(), "audit.jsonl", b.String(), 0o600)
}

func TestAuditFile(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	events := auditEvents(now)
	path := writeAuditFile(t, events)

	out, stderr, err := runCmd(t, "audit", "--file", path)
	if err != nil {
		t.Fatal(err)
	}
	if stderr != "" {
		t.Errorf("stderr: %s", stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want a header and the 3 events of the last day:\n%s", len(lines), out)
	}
	for i, want := range []*regexp.Regexp{
		regexp.MustCompile(`^TIME\s+KIND\s+CALLER\s+ROLE\s+SOURCE\s+ACTION\s+TARGET\s+STATUS/OUTCOME\s+DETAIL$`),
		regexp.MustCompile(`^\S+ \S+\s+api\s+bob \(token bob-1\)\s+user\s+10\.0\.0\.7:41000\s+containers\.stop\s+container 0123456789ab  \[31m\(alice-train\)\s+403 denied\s+users may stop only their own containers$`),
		regexp.MustCompile(`^\S+ \S+\s+stop\s+policy\s+-\s+-\s+stop\s+alice-train of alice\s+stopped \(dry run\)\s+rule idle$`),
		regexp.MustCompile(`^\S+ \S+\s+api\s+alice \(token alice-1\)\s+user\s+unix uid 1000\s+containers\.stop\s+container 0123456789ab \(alice-train\)\s+200 allowed\s+reason: done$`),
	} {
		if !want.MatchString(lines[i]) {
			t.Errorf("line %d does not match %s:\n%s", i, want, lines[i])
		}
	}
	if strings.ContainsAny(out, "\x1b\t") {
		t.Errorf("the table holds an escape or a tab:\n%q", out)
	}

	out, stderr, err = runCmd(t, "audit", "--file", path, "--since", "7d", "--limit", "2", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got apitype.AuditResponse
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if diff := cmp.Diff(server.AuditFromLog(events[2:]), got.Events); diff != "" || !got.Truncated {
		t.Errorf("truncated %v, events (-want +got):\n%s", got.Truncated, diff)
	}
	if !strings.Contains(stderr, "more events fell in the window than the 2 shown") {
		t.Errorf("stderr does not say the list was cut: %q", stderr)
	}

	out, _, err = runCmd(t, "audit", "--file", path, "--from", now.Add(-150*time.Minute).Format(time.RFC3339), "--to", now.Add(-90*time.Minute).Format(time.RFC3339))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "\n"); n != 2 || !strings.Contains(out, "rule idle") {
		t.Errorf("--from --to: want the header and the policy event:\n%s", out)
	}
}

func TestAuditErrors(t *testing.T) {
	bad := testenv.WriteFile(t, t.TempDir(), "audit.jsonl", `{"time":"2026-11-02T00:00:00Z","kind":"api"}`+"\nnot json\n", 0o600)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--since", "1h", "--from", "2026-11-02"}, "--since and --from exclude each other"},
		{[]string{"--since", "soon"}, "--since:"},
		{[]string{"--since", "0s"}, `--since: "0s" is not a duration above 0`},
		{[]string{"--from", "yesterday"}, "--from:"},
		{[]string{"--from", "2026-11-03", "--to", "2026-11-02"}, "--from: 2026-11-03T00:00:00Z is not before --to 2026-11-02T00:00:00Z"},
		{[]string{"--limit", "0"}, "--limit: 0 is not 1 or more"},
		{[]string{"--format", "csv"}, `--format: "csv" is not table or json`},
		{[]string{"--file", bad, "--url", "http://127.0.0.1:1"}, "--file reads the log on this host"},
		{[]string{"--file", filepath.Join(os.TempDir(), "nonexistent-audit.jsonl")}, "nonexistent-audit.jsonl"},
		{[]string{"--file", bad, "--from", "2026-11-01"}, bad + ": line 2"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if !slices.Contains(tt.args, "--file") {
				tt.args = append(tt.args, "--url", "http://127.0.0.1:1")
			}
			_, _, err := runCmd(t, append([]string{"audit"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want one saying %q", err, tt.want)
			}
		})
	}
}
