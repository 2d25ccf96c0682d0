package api

// End-to-end tests of where report, waste and audit read: a real agent on
// its socket, the ledger it writes, the line each command prints about
// what it read, a stale token on the root socket, and a user other than
// root (run with setpriv) turned away with what to do.

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// localAgent is an agent whose data directory, and so whose socket and
// ledger, the test knows.
type localAgent struct {
	*harness.Agent
	data, socket, ledger string
	// env is what a CLI on this host needs to find the agent as an
	// operator's would: its data directory, and no client settings.
	env []string
}

func startLocalAgent(t *testing.T, node string) *localAgent {
	t.Helper()
	// A short directory: a socket's path may not be longer than 107 bytes.
	data, err := os.MkdirTemp("", "gpm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(data) })
	a := &localAgent{data: data, socket: filepath.Join(data, "api.sock"), ledger: filepath.Join(data, "ledger.db")}
	a.Agent = harness.Serve(t, []string{"GPUMETER_DATA_DIR=" + data},
		"--sim", harness.RepoFile("testdata/shared.yaml"), "--interval", "100ms", "--ledger-flush-interval", "200ms", "--hostname", node)
	a.env = []string{"GPUMETER_DATA_DIR=" + data, "GPUMETER_URL=", "GPUMETER_TOKEN=", "GPUMETER_CA_FILE=",
		"GPUMETER_CLIENT_CONFIG=", "GPUMETER_CONFIG=", "XDG_CONFIG_HOME=/nonexistent"}
	// The ledger has the agent's rows once it has flushed.
	harness.WaitFor(t, 10*time.Second, "the first rows in the ledger", func() bool {
		_, stderr, code := harness.RunCLI(t, a.env, "report", "--db", a.ledger, "--since", "1h")
		return code == 0 && strings.Contains(stderr, "(nodes: "+node+")")
	})
	return a
}

// firstLine is the first line of s.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// TestReportWasteAuditReadTheLocalAgent: with no flag naming a source,
// the three commands read the agent on its socket and say so; a flag the
// agent cannot serve reads its ledger, and says so; --db reads the ledger
// named, audit's included.
func TestReportWasteAuditReadTheLocalAgent(t *testing.T) {
	a := startLocalAgent(t, "gpu-e2e")
	fromAgent := "reading the agent at unix://" + a.socket + " (node gpu-e2e)"
	fromLedger := "reading the ledger " + a.ledger + " (nodes: gpu-e2e)"

	// A refused call leaves an audit event, in the ledger too.
	resp, err := harness.GetAs(a.URL+"/api/v1/whoami", "gpm_"+strings.Repeat("x", 43))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("whoami with a wrong token: %s, want 401", resp.Status)
	}

	for _, tt := range []struct {
		name  string
		args  []string
		first string // stderr's first line
		out   string // in stdout
	}{
		{"report", []string{"report", "--since", "1h"}, fromAgent, "alice"},
		{"report as JSON", []string{"report", "--since", "1h", "--format", "json", "--by", "node"}, fromAgent, `"key": "gpu-e2e"`},
		{"report from the ledger named", []string{"report", "--since", "1h", "--db", a.ledger}, fromLedger, "alice"},
		{"waste: the live findings", []string{"waste", "--format", "json"}, fromAgent, `"findings"`},
		{"waste over a window: the ledger", []string{"waste", "--since", "1h", "--format", "json"}, fromLedger, `"findings"`},
		{"waste with a rule: the ledger", []string{"waste", "--waste-idle-window", "5m", "--format", "json"}, fromLedger, `"findings"`},
		{"audit", []string{"audit"}, fromAgent, "401 denied"},
		{"audit from the ledger", []string{"audit", "--db", a.ledger}, fromLedger, "401 denied"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, stderr string
			harness.WaitFor(t, 10*time.Second, "the answer", func() bool {
				var code int
				out, stderr, code = harness.RunCLI(t, a.env, tt.args...)
				return code == 0 && strings.Contains(out, tt.out)
			})
			if got := firstLine(stderr); got != tt.first {
				t.Errorf("stderr begins %q, want %q; stdout:\n%s", got, tt.first, out)
			}
		})
	}

	// An agent named by the user is asked even with the socket there, and
	// a flag it cannot serve is refused, not quietly sent to a ledger.
	named := append(a.env, "GPUMETER_URL="+a.URL, "GPUMETER_TOKEN="+a.Token)
	out, stderr, code := harness.RunCLI(t, named, "report", "--since", "1h")
	if code != 0 || firstLine(stderr) != "reading the agent at "+a.URL+" (node gpu-e2e)" || !strings.Contains(out, "alice") {
		t.Errorf("report with GPUMETER_URL: exit %d, stderr %q, stdout:\n%s", code, stderr, out)
	}
	_, stderr, code = harness.RunCLI(t, named, "waste", "--since", "1h")
	if code != 1 || !strings.Contains(stderr, "--since: the agent's live findings have no window; --db or --dsn reads the ledger over one") {
		t.Errorf("waste --since with GPUMETER_URL: exit %d, stderr %q; want the window refused", code, stderr)
	}
}

// TestSocketStaleTokenAsRoot: root on the socket with a token the agent
// does not accept is still admin, by the kernel's word, and told that the
// token was ignored.
func TestSocketStaleTokenAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the socket admits root and the agent's own user, and the test is both only as root")
	}
	a := startLocalAgent(t, "gpu-stale")
	env := append(a.env, "GPUMETER_TOKEN=gpm_"+strings.Repeat("x", 43))
	warning := "gpumeter: warning: the token was ignored (the token is not accepted: it is wrong or has been removed): uid 0 on the agent's socket is admin by its kernel identity; the token came from GPUMETER_TOKEN"
	for _, args := range [][]string{{"whoami"}, {"ps"}, {"report", "--since", "1h"}} {
		out, stderr, code := harness.RunCLI(t, env, args...)
		if code != 0 {
			t.Errorf("%s with a stale token: exit %d: %s", args[0], code, stderr)
			continue
		}
		if !strings.Contains(stderr, warning+"\n") {
			t.Errorf("%s with a stale token: stderr %q, want the warning %q", args[0], stderr, warning)
		}
		if args[0] == "whoami" && !strings.Contains(out, "role:             admin") {
			t.Errorf("whoami with a stale token:\n%s\nwant admin", out)
		}
	}
	// Over TCP the kernel vouches for nobody: the token decides.
	_, stderr, code := harness.RunCLI(t, append(env, "GPUMETER_URL="+a.URL), "whoami")
	if code != 1 || !strings.Contains(stderr, "401 Unauthorized") {
		t.Errorf("whoami over TCP with a stale token: exit %d, stderr %q; want 401", code, stderr)
	}
}

// TestSocketAndLedgerDeniedToOthers: a user who may not open the agent's
// socket, or read its ledger, is told so and what to do, and is not sent
// to http://localhost:9400.
func TestSocketAndLedgerDeniedToOthers(t *testing.T) {
	harness.NeedNobody(t)
	a := startLocalAgent(t, "gpu-denied")
	socketDenied := "gpumeter: the agent's socket " + a.socket + ": permission denied: only root and the agent's own user may use it; run this with sudo, or use a token over the agent's listen address: GPUMETER_TOKEN=gpm_… and --url http(s)://HOST:PORT (an admin makes a token with `gpumeter token create`)\n"
	ledgerDenied := "gpumeter: the ledger " + a.ledger + ": permission denied: only root and the agent's own user may read it (and members of the agent's data_group, when it sets one); run this with sudo, join data_group, or ask the agent with a token: GPUMETER_TOKEN=gpm_… and --url http(s)://HOST:PORT (an admin makes a token with `gpumeter token create`)\n"
	check := func(t *testing.T, args []string, want string) {
		t.Helper()
		out, stderr, code := harness.RunAsNobody(t, a.env, args...)
		if code != 1 || stderr != want {
			t.Errorf("%s as nobody: exit %d, stderr %q; want 1, %q; stdout:\n%s", strings.Join(args, " "), code, stderr, want, out)
		}
		if strings.Contains(stderr, "9400") && !strings.Contains(stderr, "HOST:PORT") {
			t.Errorf("%s as nobody was sent to localhost:9400: %s", args[0], stderr)
		}
	}

	// The data directory is the agent's alone (0700, as t.TempDir and
	// os.MkdirTemp make it): nobody cannot even see whether the socket is
	// there.
	for _, args := range [][]string{{"report", "--since", "1h"}, {"waste"}, {"audit"}, {"ps"}, {"whoami"}} {
		t.Run(args[0]+" in a closed data directory", func(t *testing.T) { check(t, args, socketDenied) })
	}

	// A data directory others may enter, with a 0600 socket and ledger.
	if err := os.Chmod(a.data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a.ledger, 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(a.socket)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the socket: %v, mode %v; want 0600", err, fi.Mode())
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"report", "--since", "1h"}, socketDenied},
		{[]string{"ps"}, socketDenied},
		{[]string{"waste", "--since", "1h"}, ledgerDenied},
		{[]string{"report", "--db", a.ledger}, ledgerDenied},
		{[]string{"audit", "--db", a.ledger}, ledgerDenied},
	} {
		t.Run(strings.Join(tt.args, " ")+" in an open data directory", func(t *testing.T) { check(t, tt.args, tt.want) })
	}

	// Root is let in all along.
	if _, stderr, code := harness.RunCLI(t, a.env, "report", "--since", "1h"); code != 0 || !strings.HasPrefix(stderr, "reading the agent at unix://"+a.socket) {
		t.Errorf("report as root: exit %d, stderr %q", code, stderr)
	}
}

// TestReportReadsTheDemo is the README's first run: while the demo runs,
// report reads it over the socket in its own directory, which its record
// in the runtime directory names, not a ledger left in the data
// directory, where the demo puts nothing; waste over a window, which only
// a ledger can serve, names the ledger it tried and the agent it passed
// over.
func TestReportReadsTheDemo(t *testing.T) {
	data, err := os.MkdirTemp("", "gpm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(data) })
	runtime := t.TempDir()
	harness.Serve(t, []string{"GPUMETER_DATA_DIR=" + data, "XDG_RUNTIME_DIR=" + runtime}, "--demo", "--interval", "100ms", "--ledger-flush-interval", "200ms")
	env := []string{"GPUMETER_DATA_DIR=" + data, "XDG_RUNTIME_DIR=" + runtime, "GPUMETER_URL=", "GPUMETER_TOKEN=", "GPUMETER_CLIENT_CONFIG=", "GPUMETER_CONFIG=", "XDG_CONFIG_HOME=/nonexistent"}
	var socket string
	harness.WaitFor(t, 10*time.Second, "the demo's record of its socket", func() bool {
		b, err := os.ReadFile(filepath.Join(runtime, "gpumeter", "demo-socket"))
		socket = strings.TrimSpace(string(b))
		return err == nil && socket != ""
	})
	if filepath.Dir(socket) == data {
		t.Errorf("the demo's socket is %s, in the data directory", socket)
	}

	var out, stderr string
	harness.WaitFor(t, 10*time.Second, "the demo's first rows", func() bool {
		var code int
		out, stderr, code = harness.RunCLI(t, env, "report", "--since", "7d", "--by", "team")
		return code == 0 && strings.Contains(out, "nlp")
	})
	if want := "reading the agent at unix://" + socket + " (node demo)\n"; stderr != want {
		t.Errorf("report during the demo: stderr %q, want %q", stderr, want)
	}
	_, stderr, code := harness.RunCLI(t, env, "waste", "--since", "7d")
	for _, w := range []string{"ledger " + filepath.Join(data, "ledger.db"), "no such file", "--since reads a ledger, not the agent running at unix://" + socket + ": leave it out to ask the agent"} {
		if code != 1 || !strings.Contains(stderr, w) {
			t.Errorf("waste --since during the demo: exit %d, stderr %q; want it to say %q", code, stderr, w)
		}
	}
}
