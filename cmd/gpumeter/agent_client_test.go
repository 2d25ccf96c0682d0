package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/listener"
	"github.com/gpumeter/gpumeter/internal/waste"

	"github.com/gpumeter/gpumeter/internal/testenv"
)

// seen is one request the fake agent answered.
type seen struct {
	Method, Path, Query, Auth, Body string
}

// fakeAgent answers the API's endpoints with fixed answers on a Unix
// socket, refusing requests without the token gpm_test, and keeps what
// it was asked.
type fakeAgent struct {
	URL      string
	requests chan seen
	waste    *waste.Report
	audit    apitype.AuditResponse
}

func startFakeAgent(t *testing.T) *fakeAgent {
	t.Helper()
	since := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	fa := &fakeAgent{
		requests: make(chan seen, 16),
		waste: &waste.Report{From: since, To: since.Add(time.Hour), Currency: "USD",
			Findings: []waste.Finding{
				{ID: "f1", Rule: "idle", Node: "n1", OwnerKind: "container", ContainerID: "0123456789abcdef", Container: "alice-train", Owner: "alice",
					GPUs: []waste.GPURef{{Index: 0, UUID: "GPU-0"}}, Since: since, FirstSeen: since, Until: since.Add(time.Hour), Active: true,
					Evidence: map[string]float64{waste.EvSMPercent: 0.4, waste.EvDuration: 3600}, WastedGPUHours: 1, Cost: 2.5},
				{ID: "f2", Rule: "idle", Node: "n2", OwnerKind: "host", Owner: "dave",
					GPUs: []waste.GPURef{{Index: 1, UUID: "GPU-1"}}, Since: since, FirstSeen: since, Until: since.Add(time.Hour),
					Evidence: map[string]float64{waste.EvSMPercent: 0, waste.EvDuration: 3600}, WastedGPUHours: 1, Cost: 2.5},
			},
			Totals: []waste.Total{{Rule: "idle", Findings: 2, Active: 1, WastedGPUHours: 2, Cost: 5}, {Rule: waste.TotalKey, Findings: 2, Active: 1, WastedGPUHours: 2, Cost: 5}},
		},
		audit: apitype.AuditResponse{From: since, To: since.Add(time.Hour), Events: []apitype.AuditEvent{
			{Time: since.Add(time.Minute), Kind: apitype.AuditKindAPI, Caller: "bob (token bob-1)", Role: "user", Source: "10.0.0.7:1", Action: "containers.stop", Target: "container x", Status: 403, Outcome: apitype.OutcomeDenied},
		}, Truncated: true},
	}
	answer := func(v any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /api/v1/whoami", answer(apitype.Whoami{User: "alice", Role: "user", Method: "token", Name: "alice-1"}))
	mux.Handle("GET /api/v1/containers", answer(apitype.ContainersResponse{Node: "n1", Containers: []apitype.Container{{
		ID: "0123456789abcdef", Name: "alice-train", User: "alice", Team: "nlp", Running: true, GPURequest: "all",
		GPUs: []apitype.GPUShare{{OwnerKind: "container", GPU: 0, Share: 1, SMPercent: 55, MemoryBytes: 2 << 30}},
	}}}))
	mux.Handle("POST /api/v1/containers/{id}/stop", answer(apitype.StopResponse{ID: "0123456789abcdef", Name: "alice-train", Stopped: true}))
	// The findings go through the server's conversion, so that what the
	// CLI prints of them is checked against the agent's own.
	mux.Handle("GET /api/v1/waste", answer(server.WasteFromReport(fa.waste)))
	mux.Handle("GET /api/v1/audit", answer(fa.audit))
	mux.HandleFunc("GET /api/v1/usage", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		io.WriteString(w, "team,gpu_hours\nnlp,3.5\n")
	})
	ln, path := testenv.ListenUnix(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fa.requests <- seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), string(body)}
		if r.Header.Get("Authorization") != "Bearer gpm_test" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"code":"bad_token","message":"the token is not accepted: it is wrong or has been removed"}`)
			return
		}
		w.Header().Set(apitype.NodeHeader, "n1")
		mux.ServeHTTP(w, r)
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	fa.URL = "unix://" + path
	return fa
}

// next is the request the agent answered last.
func (fa *fakeAgent) next(t *testing.T) seen {
	t.Helper()
	select {
	case r := <-fa.requests:
		return r
	default:
		t.Fatal("the agent was asked nothing")
		return seen{}
	}
}

// clientEnvironment keeps the tests from the developer's own client
// settings: no client config, and the token the fake agent accepts.
func clientEnvironment(t testing.TB, url string) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("GPUMETER_CLIENT_CONFIG", "")
	t.Setenv("GPUMETER_CA_FILE", "")
	t.Setenv("GPUMETER_TOKEN", "gpm_test")
	t.Setenv("GPUMETER_URL", url)
}

func TestCommandsAskTheAgent(t *testing.T) {
	fa := startFakeAgent(t)
	clientEnvironment(t, fa.URL)

	var wasteTable, wasteN1 bytes.Buffer
	if err := fa.waste.WriteTable(&wasteTable); err != nil {
		t.Fatal(err)
	}
	if err := fa.waste.Only(func(f *waste.Finding) bool { return f.Node == "n1" }).WriteTable(&wasteN1); err != nil {
		t.Fatal(err)
	}
	var wasteJSON bytes.Buffer
	if err := fa.waste.WriteJSON(&wasteJSON); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		args []string
		want seen
		out  *regexp.Regexp
	}{
		{"whoami", []string{"whoami"}, seen{Method: "GET", Path: "/api/v1/whoami"},
			regexp.MustCompile(`^user: +alice\nrole: +user\nauthenticated by: token alice-1\nagent: +unix://\S+\n$`)},
		{"ps", []string{"ps", "--url", fa.URL}, seen{Method: "GET", Path: "/api/v1/containers"},
			regexp.MustCompile(`(?m)^0123456789ab\s+alice-train\s+alice\s+nlp\s+0\s+1\.00\s+55%\s+2\.0 GiB`)},
		{"stop", []string{"stop", "alice-train", "--timeout", "30s", "--reason", "done"},
			seen{Method: "POST", Path: "/api/v1/containers/alice-train/stop", Body: `{"timeout":"30s","reason":"done"}`},
			regexp.MustCompile(`^stopped alice-train \(0123456789ab\)\n$`)},
		{"report", []string{"report", "--by", "team", "--since", "7d", "--label", "a=b", "--label", "c=d", "--node", "n1", "--format", "csv"},
			seen{Method: "GET", Path: "/api/v1/usage", Query: "by=team&format=csv&label=a%3Db&label=c%3Dd&node=n1&since=7d"},
			regexp.MustCompile(`^team,gpu_hours\nnlp,3\.5\n$`)},
		{"report defaults", []string{"report", "--url", fa.URL, "--from", "2026-11-01", "--to", "2026-11-02T12:00:00Z", "--user", "alice"},
			seen{Method: "GET", Path: "/api/v1/usage", Query: "by=user&format=table&from=2026-11-01&to=2026-11-02T12%3A00%3A00Z&user=alice"},
			regexp.MustCompile(`nlp,3\.5`)},
		{"waste", []string{"waste"}, seen{Method: "GET", Path: "/api/v1/waste"},
			regexp.MustCompile(`^` + regexp.QuoteMeta(wasteTable.String()) + `$`)},
		{"waste on a node", []string{"waste", "--node", "n1"}, seen{Method: "GET", Path: "/api/v1/waste"},
			regexp.MustCompile(`^` + regexp.QuoteMeta(wasteN1.String()) + `$`)},
		{"waste json", []string{"waste", "--format", "json"}, seen{Method: "GET", Path: "/api/v1/waste"},
			regexp.MustCompile(`^` + regexp.QuoteMeta(wasteJSON.String()) + `$`)},
		{"audit", []string{"audit", "--since", "2d", "--limit", "1"}, seen{Method: "GET", Path: "/api/v1/audit", Query: "limit=1&since=2d"},
			regexp.MustCompile(`(?m)^2026-11-02 09:01:00\s+api\s+bob \(token bob-1\)\s+user\s+10\.0\.0\.7:1\s+containers\.stop\s+container x\s+403 denied\s+-$`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, err := runCmd(t, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			// The commands that could read a ledger say first that they
			// read the agent; the others say nothing of it.
			want := ""
			if cmd := tt.args[0]; cmd == "report" || cmd == "waste" || cmd == "audit" {
				want = "reading the agent at " + fa.URL + " (node n1)"
			}
			if first, _, _ := strings.Cut(stderr, "\n"); first != want {
				t.Errorf("stderr begins %q, want %q", first, want)
			}
			got := fa.next(t)
			tt.want.Auth = "Bearer gpm_test"
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
			if !tt.out.MatchString(out) {
				t.Errorf("output does not match %s:\n%s", tt.out, out)
			}
		})
	}
}

// TestCommandsFindTheDemo is the README's "While it runs": with no flag,
// no GPUMETER_URL and no agent's socket where the config puts it, ps and
// report reach the demo through the socket its record names.
func TestCommandsFindTheDemo(t *testing.T) {
	fa := startFakeAgent(t)
	clientEnvironment(t, "")
	t.Setenv("GPUMETER_CONFIG", "")
	t.Setenv("GPUMETER_API_SOCKET", "")
	t.Setenv("GPUMETER_DATA_DIR", t.TempDir())
	runtime := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", runtime)
	demo := strings.TrimPrefix(fa.URL, "unix://")
	if _, err := listener.Advertise(filepath.Join(runtime, "gpumeter", "demo-socket"), demo); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"ps"}, {"report", "--by", "team", "--since", "7d"}} {
		out, stderr, err := runCmd(t, args...)
		if err != nil {
			t.Fatalf("%s: %v; stderr:\n%s", args[0], err, stderr)
		}
		if got := fa.next(t); !strings.HasPrefix(got.Path, "/api/v1/") {
			t.Errorf("%s asked the demo for %s", args[0], got.Path)
		}
		if args[0] == "report" && !strings.HasPrefix(stderr, "reading the agent at "+fa.URL) {
			t.Errorf("report: stderr %q, want it to read the demo at %s", stderr, fa.URL)
		}
		if out == "" {
			t.Errorf("%s printed nothing", args[0])
		}
	}
}

func TestCommandsAgentErrors(t *testing.T) {
	fa := startFakeAgent(t)
	clientEnvironment(t, fa.URL)
	tests := []struct {
		name  string
		token string
		args  []string
		want  []string
	}{
		{"refused token", "gpm_wrong", []string{"whoami"}, []string{"401 Unauthorized", "not accepted", "the token came from GPUMETER_TOKEN"}},
		{"no token", "", []string{"ps"}, []string{"401", "no token was sent: set GPUMETER_TOKEN", "gpumeter token create"}},
		{"waste window", "gpm_test", []string{"waste", "--since", "2h"}, []string{"--since: the agent's live findings have no window", "--db or --dsn"}},
		{"waste rules", "gpm_test", []string{"waste", "--waste-idle-window", "5m"}, []string{"--waste-idle-window: the agent judges by its own waste rules"}},
		{"report and a ledger", "gpm_test", []string{"report", "--url", fa.URL, "--db", "x.db"}, []string{"--url asks the agent, --db and --dsn read a ledger here"}},
		{"report config", "gpm_test", []string{"report", "--config", "gpumeter.yaml"}, []string{"--config: the agent (from GPUMETER_URL) uses its own config"}},
		{"report bad flag", "gpm_test", []string{"report", "--by", "colour"}, []string{`--by: "colour" is not one of`}},
		{"stop bad timeout", "gpm_test", []string{"stop", "x", "--timeout", "1h"}, []string{"--timeout: 1h is longer than 10m"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GPUMETER_TOKEN", tt.token)
			_, _, err := runCmd(t, tt.args...)
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err %v, want one saying %q", err, w)
				}
			}
		})
	}
}

// TestChooseSource: report, waste and audit read the ledger a flag
// names, else an agent someone named, else the local agent when one
// answers on its socket and the flags ask nothing of the ledger, else the
// config's ledger.
func TestChooseSource(t *testing.T) {
	ln, running := testenv.ListenUnix(t)
	_ = ln
	stale, path := testenv.ListenUnix(t)
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	noSocket := filepath.Join(t.TempDir(), "api.sock")
	home := t.TempDir()
	clientConfig := testenv.WriteFile(t, home, "client.yaml", "url: http://file:1\n", 0o600)

	tests := []struct {
		name   string
		env    map[string]string
		socket string
		waste  bool // the command is waste, with its ledger-only flags
		args   []string
		want   string // the agent's URL, "" for the ledger
		passed bool   // the local agent was passed over for the ledger
		err    string // what the error says
	}{
		{name: "nothing, no agent", socket: noSocket},
		{name: "nothing, the local agent", socket: running, want: "unix://" + running},
		{name: "a socket nobody serves on", socket: path},
		{name: "--url", socket: noSocket, args: []string{"--url", "http://a:1"}, want: "http://a:1"},
		{name: "GPUMETER_URL", socket: running, env: map[string]string{"GPUMETER_URL": "http://env:1"}, want: "http://env:1"},
		{name: "the client config's url", socket: running, env: map[string]string{"GPUMETER_CLIENT_CONFIG": clientConfig}, want: "http://file:1"},
		{name: "GPUMETER_URL and --db", socket: running, env: map[string]string{"GPUMETER_URL": "http://a:1"}, args: []string{"--db", "x.db"}},
		{name: "GPUMETER_URL and --dsn", socket: running, env: map[string]string{"GPUMETER_URL": "http://a:1"}, args: []string{"--dsn", "postgres://x"}},
		{name: "the local agent and --db", socket: running, args: []string{"--db", "x.db"}},
		{name: "the local agent and --config", socket: running, args: []string{"--config", "gpumeter.yaml"}, passed: true},
		{name: "the local agent and a window for waste", socket: running, waste: true, args: []string{"--since", "7d"}, passed: true},
		{name: "the local agent and a rule", socket: running, waste: true, args: []string{"--waste-idle-window", "5m"}, passed: true},
		{name: "the local agent and a window for report", socket: running, args: []string{"--since", "7d"}, want: "unix://" + running},
		{name: "--url and --db", socket: running, args: []string{"--url", "http://a:1", "--db", "x.db"}, err: "--url asks the agent, --db and --dsn read a ledger here"},
		{name: "--db and --dsn", socket: running, args: []string{"--db", "x.db", "--dsn", "postgres://x"}, err: "--db and --dsn exclude each other"},
		{name: "an agent named and --config", socket: running, env: map[string]string{"GPUMETER_URL": "http://a:1"}, args: []string{"--config", "x.yaml"}, err: "--config: the agent (from GPUMETER_URL) uses its own config"},
		{name: "an agent named and a window for waste", socket: running, waste: true, args: []string{"--url", "http://a:1", "--since", "7d"}, err: "--since: the agent's live findings have no window"},
		{name: "--ca-file without an agent named", socket: running, args: []string{"--ca-file", "ca.pem"}, err: "--ca-file is for an agent named by --url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lf ledgerFlags
			var cf clientFlags
			cmd := &cobra.Command{}
			cmd.SetContext(context.Background())
			lf.register(cmd, "x")
			cf.register(cmd)
			unserved := unservedFunc(nil)
			if tt.waste {
				cmd.Flags().String("waste-idle-window", "", "")
				unserved = wasteUnserved
			}
			if err := cmd.ParseFlags(tt.args); err != nil {
				t.Fatal(err)
			}
			env := client.Env{Getenv: mapEnv(tt.env), ConfigDir: t.TempDir(), Socket: tt.socket}
			got, err := chooseSource(cmd, &lf, &cf, env, unserved)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("err %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			url := ""
			if got != nil {
				url = got.settings.URL
			}
			if url != tt.want {
				t.Errorf("source %q, want %q (\"\" is the ledger)", url, tt.want)
			}
			if passed := strings.Contains(lf.passedOver, "reads a ledger, not the agent running at unix://"+running); passed != tt.passed {
				t.Errorf("passed over %q, want it said: %v", lf.passedOver, tt.passed)
			}
		})
	}
}

// mapEnv is a Getenv over m.
func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestWasteFromWire: the agent's findings turn back into the report they
// were converted from, every field of it.
func TestWasteFromWire(t *testing.T) {
	for _, rep := range []*waste.Report{{}, {Findings: []waste.Finding{{}}}, testenv.Filled[*waste.Report](t)} {
		if diff := cmp.Diff(rep, wasteFromWire(server.WasteFromReport(rep))); diff != "" {
			t.Errorf("back from the wire (-want +got):\n%s", diff)
		}
	}
}
