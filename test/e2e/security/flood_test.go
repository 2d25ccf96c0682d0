package security

// End-to-end test of the audit log under a flood: many loopback addresses
// send bad tokens to the real binary over real TCP while an admin stops
// real containers. Every stop must be in the audit log as soon as it is
// answered, and the refusals must be counted, not written one by one.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// flooder sends bad tokens to url from sources loopback addresses
// (127.0.0.2 and up), one keep-alive connection each, until ctx ends.
type flooder struct {
	sent atomic.Int64 // answered 401
	odd  atomic.Int64 // answered otherwise, or not at all
	wg   sync.WaitGroup
}

func startFlood(ctx context.Context, t *testing.T, tc *tls.Config, url string, sources int) *flooder {
	t.Helper()
	f := &flooder{}
	bad := "Bearer gpm_" + strings.Repeat("A", 43)
	for i := range sources {
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))}
		tr := &http.Transport{
			TLSClientConfig: tc,
			DialContext:     (&net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}).DialContext,
		}
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		f.wg.Go(func() {
			defer tr.CloseIdleConnections()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", url+"/api/v1/containers", nil)
				req.Header.Set("Authorization", bad)
				resp, err := c.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						f.odd.Add(1)
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusUnauthorized {
					f.sent.Add(1)
				} else {
					f.odd.Add(1)
				}
			}
		})
	}
	return f
}

// TestSecurityFloodStops: 200 loopback addresses send bad tokens while an
// admin stops ten real containers. All ten stop, every stop is in the
// audit file and the ledger, sampling goes on, and the refusals, every
// one counted, take at most two events per address and minute and 1 MiB
// a minute.
func TestSecurityFloodStops(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	const n = 10
	victims := make([]harness.Sleeper, n)
	for i := range victims {
		victims[i] = harness.StartSleeper(t, cli, dockertest.Spec{Name: fmt.Sprintf("flood-%d", i), Labels: map[string]string{"gpumeter.user": "alice"}})
	}
	// A process of the scenario plays in the first container, so that the
	// agent reads the engine's inventory.
	scenario := pidScenario(t, "e2e-flood", "flood", victims[0].PID)
	_, alice := newTestToken(t, "alice", "alice", config.RoleUser, time.Time{})
	a := startSecure(t, secureSetup{tokens: []config.Token{alice}, sim: scenario, yaml: "api:\n  rate_limit: 0\n", args: []string{"--docker-host", cli.DaemonHost()}})
	dockertest.WaitFor(t, harness.Settle, "the agent to list the containers", func() (bool, string) {
		ids := a.containerIDs(t)
		for _, v := range victims {
			if ids[v.Name] != v.ID {
				return false, fmt.Sprint(ids)
			}
		}
		return true, ""
	})
	auditPath := filepath.Join(a.dataDir, "audit.jsonl")
	before := ticks(t, a.client, a.URL)
	begin := time.Now()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const sources = 200
	flood := startFlood(ctx, t, a.pki.tlsConfig(nil), a.URL, sources)
	// The flood is in full swing once every address of it has its first
	// refusal in the audit file.
	harness.WaitFor(t, 30*time.Second, fmt.Sprintf("a refusal of each of the %d addresses in the audit file", sources), func() bool {
		evs, err := audit.ReadFile(auditPath, time.Time{}, time.Time{})
		if err != nil {
			return false // a line being written
		}
		return len(floodSources(evs)) >= sources
	})

	// The admin stops the ten while the flood goes on, and reads the
	// containers between stops.
	var slowest time.Duration
	for _, v := range victims {
		ans := send(t, a.client, "POST", a.URL+"/api/v1/containers/"+v.ID+"/stop", harness.AdminToken(), []byte(`{"timeout": "2s", "reason": "flood test"}`))
		if ans.status != http.StatusOK {
			t.Fatalf("stopping %s during the flood: %d %s", v.Name, ans.status, ans.body)
		}
		got := send(t, a.client, "GET", a.URL+"/api/v1/containers", harness.AdminToken(), nil)
		got.want(t, "GET /api/v1/containers during the flood", http.StatusOK, "")
		slowest = max(slowest, got.took)
	}
	// The flood goes on for ten more samples after the stops.
	stopped := ticks(t, a.client, a.URL)
	harness.WaitFor(t, 30*time.Second, "ten more samples under the flood", func() bool {
		return ticks(t, a.client, a.URL).taken >= stopped.taken+10
	})
	cancel()
	flood.wg.Wait()
	floodTook := time.Since(begin)
	after := a.wantSampling(t, "the flood", before, 1)
	logMissed(t, "the flood", before, after)
	if flood.sent.Load() < 1000 {
		t.Fatalf("the flood got %d refusals (%d other answers): too few to test anything", flood.sent.Load(), flood.odd.Load())
	}
	for _, v := range victims {
		if st := dockertest.Inspect(t, cli, v.ID).State; st.Running {
			t.Errorf("%s still runs after its stop", v.Name)
		}
	}

	// Every stop is in the ledger as soon as its answer has come.
	ans := send(t, a.client, "GET", a.URL+"/api/v1/audit?since=1h", harness.AdminToken(), nil)
	ans.want(t, "GET /api/v1/audit", http.StatusOK, "")
	// Decoded as the file's lines are, which the API's events match.
	var resp struct {
		Events []audit.Event `json:"events"`
	}
	ans.decode(t, &resp)
	if missing := missingStops(resp.Events, victims); len(missing) > 0 {
		t.Errorf("the ledger's audit events lack the stops of %s", strings.Join(missing, ", "))
	}

	// And in the file, once the agent has stopped and written what it
	// holds.
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Exited:
	case <-time.After(15 * time.Second):
		t.Fatal("the agent did not exit within 15 s of SIGTERM")
	}
	evs, err := audit.ReadFile(auditPath, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if missing := missingStops(evs, victims); len(missing) > 0 {
		t.Errorf("audit.jsonl lacks the stops of %s", strings.Join(missing, ", "))
	}
	st, err := os.Stat(auditPath)
	if err != nil {
		t.Fatal(err)
	}

	// The refusals are summed: each is in the log once, on its own or in
	// a count, in at most two events per address and minute, and the
	// file grew by at most the bound of a minute for each minute the
	// flood touched.
	var refused int64
	floodEvents := 0
	for _, e := range evs {
		if ofFlood(e) {
			refused += max(e.Count, 1)
			floodEvents++
		}
	}
	sent := flood.sent.Load()
	// A refusal whose answer the flood did not wait for at its end is
	// counted by the agent only: at most one per connection.
	if refused < sent || refused > sent+sources {
		t.Errorf("the audit log stands for %d refusals of the flood, want the %d it was answered (and at most %d more)", refused, sent, sources)
	}
	minutes := int(time.Now().Truncate(time.Minute).Sub(begin.Truncate(time.Minute))/time.Minute) + 1
	if floodEvents > 2*sources*minutes {
		t.Errorf("%d events for the flood's refusals, want at most %d: two per address and minute", floodEvents, 2*sources*minutes)
	}
	const bound = 1 << 20 // a minute's observations; the stops and reads come on top
	if st.Size() > int64(minutes*bound) {
		t.Errorf("audit.jsonl is %d bytes after a flood over %d minute(s), more than %d MiB a minute", st.Size(), minutes, bound>>20)
	}
	// The ledger has what the file has.
	store, err := sqlite.Open(context.Background(), filepath.Join(a.dataDir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := store.AuditEvents(context.Background(), audit.Filter{})
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(evs) {
		t.Errorf("the ledger has %d audit events, the file %d; want the same", len(rows), len(evs))
	}
	t.Logf("%d refusals (%d other answers) from 200 addresses in %s; audit.jsonl %d bytes, %d events (%d of the flood, over %d minute(s)); slowest admin read %s; %g ticks, %g missed",
		sent, flood.odd.Load(), floodTook, st.Size(), len(evs), floodEvents, minutes, slowest, after.taken-before.taken, after.missed-before.missed)
}

// ofFlood says whether e is a refusal of the flood: a 401 from a loopback
// address other than 127.0.0.1, which the test's own calls come from.
func ofFlood(e audit.Event) bool {
	return e.Status == http.StatusUnauthorized && strings.HasPrefix(e.Source, "127.0.0.") && !strings.HasPrefix(e.Source, "127.0.0.1:") && e.Source != "127.0.0.1"
}

// floodSources are the addresses that the flood's refusals in evs came
// from.
func floodSources(evs []audit.Event) map[string]bool {
	out := map[string]bool{}
	for _, e := range evs {
		if ofFlood(e) {
			host, _, err := net.SplitHostPort(e.Source)
			if err != nil {
				host = e.Source // a sum of a prefix
			}
			out[host] = true
		}
	}
	return out
}

// missingStops names the victims whose stop by the admin is not among
// evs.
func missingStops(evs []audit.Event, victims []harness.Sleeper) []string {
	var missing []string
	for _, v := range victims {
		found := false
		for _, e := range evs {
			if e.Kind == audit.KindAPI && e.Action == string(auth.ActContainerStop) && e.Status == http.StatusOK &&
				e.Outcome == audit.OutcomeAllowed && strings.HasPrefix(e.Target, "container "+v.ID) {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, v.Name)
		}
	}
	return missing
}

// TestSecurityStopLongGrace: `gpumeter stop --timeout` with a grace
// longer than the server's write timeout (api.read_timeout + 1m, here
// 61 s) of a real container that ignores SIGTERM: the CLI gets its
// answer, says that Docker killed the container at the end of the grace,
// and the audit log has the stop.
func TestSecurityStopLongGrace(t *testing.T) {
	if testing.Short() {
		t.Skip("a stop of more than a minute")
	}
	t.Parallel()
	cli := dockertest.Client(t)
	stubborn := harness.StartSleeper(t, cli, dockertest.Spec{Name: "stubborn", Cmd: []string{"ignore-term"}, Labels: map[string]string{"gpumeter.user": "alice"}})
	scenario := pidScenario(t, "e2e-grace", "stubborn", stubborn.PID)
	a := startSecure(t, secureSetup{sim: scenario, yaml: "api:\n  read_header_timeout: 1s\n  read_timeout: 1s\n", args: []string{"--docker-host", cli.DaemonHost()}})
	dockertest.WaitFor(t, harness.Settle, "the agent to list the container", func() (bool, string) {
		ids := a.containerIDs(t)
		return ids[stubborn.Name] == stubborn.ID, fmt.Sprint(ids)
	})
	const grace = 62 * time.Second
	began := time.Now()
	// The command waits out its grace of over a minute: it gets its own
	// guard, a minute past the grace.
	ctx, cancel := context.WithTimeout(context.Background(), grace+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.Binary(t), "stop", "--timeout", grace.String(), "--reason", "ignores SIGTERM", stubborn.Name)
	cmd.Env = append(os.Environ(), "GPUMETER_URL="+a.URL, "GPUMETER_TOKEN="+harness.AdminToken(), "GPUMETER_CA_FILE="+a.pki.caFile, "GPUMETER_CLIENT_CONFIG=", "XDG_CONFIG_HOME="+t.TempDir())
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	took := time.Since(began)
	out := stdout.String()
	if err != nil {
		t.Fatalf("gpumeter stop: %v after %s: %s%s", err, took, out, stderr.String())
	}
	if took < grace {
		t.Errorf("the stop took %s, less than its grace of %s: the container did not ignore SIGTERM", took, grace)
	}
	if want := "so Docker killed it"; !strings.Contains(out, "stopped "+stubborn.Name) || !strings.Contains(out, want) {
		t.Errorf("gpumeter stop said %q, want it stopped and %q", out, want)
	}
	if st := dockertest.Inspect(t, cli, stubborn.ID).State; st.Running || st.ExitCode != 137 {
		t.Errorf("the container: running %v, exit code %d; want killed (137)", st.Running, st.ExitCode)
	}
	evs, err := a.auditEvents()
	if err != nil {
		t.Fatal(err)
	}
	if missing := missingStops(evs, []harness.Sleeper{stubborn}); len(missing) > 0 {
		t.Errorf("audit.jsonl lacks the stop of %s", stubborn.Name)
	}
	t.Logf("gpumeter stop --timeout %s took %s: %s", grace, took, strings.TrimSpace(out))
}
