package main

// End-to-end test of the audit log under a flood: many loopback addresses
// send bad tokens to the real binary over real TCP while an admin stops
// real containers. Every stop must be in the audit log, and the refusals
// must be counted, not written one by one.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/dockertest"
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
// audit file and the ledger, and sampling goes on.
func TestSecurityFloodStops(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	const n = 10
	victims := make([]sleeper, n)
	for i := range victims {
		victims[i] = startSleeper(t, cli, dockertest.Spec{Name: fmt.Sprintf("flood-%d", i), Labels: map[string]string{"gpumeter.user": "alice"}})
	}
	// A process of the scenario plays in the first container, so that the
	// agent reads the engine's inventory.
	scenario := filepath.Join(t.TempDir(), "scenario.yaml")
	err := os.WriteFile(scenario, fmt.Appendf(nil, `version: 1
node: e2e-flood
duration: 1h
gpus:
  - count: 1
    model: NVIDIA A100-SXM4-80GB
    memory: 80GiB
    idle_power: 60W
    max_power: 400W
containers:
  - {name: flood, pid: %d, gpus: [0], phases: [{at: 0s, util: 50, memory: 1GiB}]}
`, victims[0].pid), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	_, alice := newTestToken(t, "alice", "alice", auth.RoleUser, time.Time{})
	a := startSecure(t, secureSetup{tokens: []auth.Token{alice}, sim: scenario, yaml: "api:\n  rate_limit: 0\n", args: []string{"--docker-host", cli.DaemonHost()}})
	dockertest.WaitFor(t, settleE2E, "the agent to list the containers", func() (bool, string) {
		ids := a.containerIDs(t)
		for _, v := range victims {
			if ids[v.name] != v.id {
				return false, fmt.Sprint(ids)
			}
		}
		return true, ""
	})
	auditPath := filepath.Join(a.dataDir, "audit.jsonl")
	ticks0, missed0 := ticks(t, a.client, a.URL)
	begin := time.Now()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	flood := startFlood(ctx, t, a.pki.tlsConfig(nil), a.URL, 200)
	time.Sleep(2 * time.Second) // let the flood fill whatever it fills

	// The admin stops the ten while the flood goes on, and reads the
	// containers between stops.
	var slowest time.Duration
	for _, v := range victims {
		ans := send(t, a.client, "POST", a.URL+"/api/v1/containers/"+v.id+"/stop", adminToken, []byte(`{"timeout": "2s", "reason": "flood test"}`))
		if ans.status != http.StatusOK {
			t.Fatalf("stopping %s during the flood: %d %s", v.name, ans.status, ans.body)
		}
		got := send(t, a.client, "GET", a.URL+"/api/v1/containers", adminToken, nil)
		got.want(t, "GET /api/v1/containers during the flood", http.StatusOK, "")
		slowest = max(slowest, got.took)
	}
	time.Sleep(2 * time.Second)
	cancel()
	flood.wg.Wait()
	floodTook := time.Since(begin)
	ticks1, missed1 := ticks(t, a.client, a.URL)
	if missed1 != missed0 {
		t.Errorf("gpumeter_ticks_missed_total went from %g to %g during the flood, want no missed ticks", missed0, missed1)
	}
	if want := 0.8 * float64(floodTook/(200*time.Millisecond)); ticks1-ticks0 < want {
		t.Errorf("%g ticks in %s of flood, want at least %g", ticks1-ticks0, floodTook, want)
	}
	if flood.sent.Load() < 1000 {
		t.Fatalf("the flood got %d refusals (%d other answers): too few to test anything", flood.sent.Load(), flood.odd.Load())
	}
	for _, v := range victims {
		if st := dockertest.Inspect(t, cli, v.id).State; st.Running {
			t.Errorf("%s still runs after its stop", v.name)
		}
	}

	// Every stop is in the ledger as soon as its answer has come.
	ans := send(t, a.client, "GET", a.URL+"/api/v1/audit?since=1h", adminToken, nil)
	ans.want(t, "GET /api/v1/audit", http.StatusOK, "")
	var resp api.AuditResponse
	ans.decode(t, &resp)
	if missing := missingStops(resp.Events, victims); len(missing) > 0 {
		t.Errorf("the ledger's audit events lack the stops of %s", strings.Join(missing, ", "))
	}

	// And in the file, once the agent has stopped and written what it
	// holds.
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.exited:
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
	t.Logf("%d refusals (%d other answers) from 200 addresses in %s; audit.jsonl %d bytes, %d events; slowest admin read %s; %g ticks, %g missed",
		flood.sent.Load(), flood.odd.Load(), floodTook, st.Size(), len(evs), slowest, ticks1-ticks0, missed1-missed0)
}

// missingStops names the victims whose stop by the admin is not among
// evs.
func missingStops(evs []audit.Event, victims []sleeper) []string {
	var missing []string
	for _, v := range victims {
		found := false
		for _, e := range evs {
			if e.Kind == audit.KindAPI && e.Action == string(auth.ActContainerStop) && e.Status == http.StatusOK &&
				e.Outcome == audit.OutcomeAllowed && strings.HasPrefix(e.Target, "container "+v.id) {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, v.name)
		}
	}
	return missing
}
