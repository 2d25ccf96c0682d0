package dashboard

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// fleetRow is the title of the dashboard's row of a fleet's nodes.
const fleetRow = "Fleet nodes"

// fleetNode is one agent of the test's fleet.
type fleetNode struct {
	name, dataDir string
	agent         *harness.Agent
}

// startFleet runs n agents of one fleet on a PostgreSQL of the test's,
// each a node of its own with two simulated GPUs whose use comes from the
// labels of the engine's containers (a job's gpumeter.sim.util).
func startFleet(t *testing.T, n int) []*fleetNode {
	t.Helper()
	dsn := pgtest.DSN(t)
	cli := dockertest.Client(t)
	image := dockertest.SleeperImage(t, cli)
	dockertest.LockGPUs(t)
	var nodes []*fleetNode
	for range n {
		suffix := make([]byte, 4)
		_, _ = rand.Read(suffix)
		fn := &fleetNode{name: "e2e-dash-" + hex.EncodeToString(suffix)}
		// Registered first, so run last: after the agent has stopped.
		t.Cleanup(func() { harness.RemoveNodeJobs(t, cli, fn.name) })
		var err error
		// A short directory: a socket's path has at most 107 bytes.
		if fn.dataDir, err = os.MkdirTemp("", "gf"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(fn.dataDir) })
		if err := os.Chmod(fn.dataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		sc := harness.WriteText(t, filepath.Join(dir, "scenario.yaml"), fmt.Sprintf(`version: 1
node: %s
duration: 24h
docker:
  containers: from_labels
gpus:
  - count: 2
    model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    idle_power: 100W
    max_power: 500W
`, fn.name))
		cfg := harness.WriteFile(t, filepath.Join(dir, "gpumeter.yaml"), fmt.Sprintf(`hostname: %s
docker:
  enabled: true
queue:
  enabled: true
  fleet: true
  images: [%q]
  run_as_root_images: [%q]
  labels: ["gpumeter.sim.*"]
  gpu_passing: env
  stop_grace: 1s
ledger:
  dsn: %q
  flush_interval: 1s
  lease_takeover: 5s
`, fn.name, image, image, dsn), 0o600)
		fn.agent = harness.Launch(t, fn.dataDir, "--config", cfg, "--sim", sc, "--interval", "200ms")
		t.Cleanup(func() {
			select {
			case <-fn.agent.Exited:
			default:
				fn.agent.Stop(t)
			}
		})
		nodes = append(nodes, fn)
	}
	return nodes
}

// TestDashboardFleet checks the row of a fleet's nodes against a real
// Prometheus scraping a fleet of two agents on one PostgreSQL, with one
// job submitted through the first and placed on the second (--node):
// both nodes up, one scheduler, the job counted on its node only, and
// each node's utilisation beside the target.
func TestDashboardFleet(t *testing.T) {
	d := loadDashboard(t)
	var row []panel
	in := false
	for _, pn := range d.Panels {
		if pn.Type == "row" {
			in = pn.Title == fleetRow
			continue
		}
		if in {
			row = append(row, pn)
		}
	}
	if len(row) == 0 {
		t.Fatalf("the dashboard has no row %q", fleetRow)
	}

	nodes := startFleet(t, 2)
	a, b := nodes[0], nodes[1]
	image := dockertest.SleeperImage(t, dockertest.Client(t))
	env := []string{"GPUMETER_URL=unix://" + filepath.Join(a.dataDir, "api.sock"), "GPUMETER_DATA_DIR=" + a.dataDir}
	out, errOut, code := harness.RunCLI(t, env, "submit", "--node", b.name, "--gpus", "1", "--time-limit", "1h", "--image", image,
		"--label", "gpumeter.sim.util=80", "--", "sleep", "600")
	if code != 0 || !strings.HasPrefix(strings.TrimSpace(out), "j-") {
		t.Fatalf("submit --node %s: exit %d, stdout %q, stderr %s", b.name, code, out, errOut)
	}
	p := startProm(t, strings.TrimPrefix(a.agent.URL, "http://"), strings.TrimPrefix(b.agent.URL, "http://"))
	p.waitFor(t, `gpumeter_fleet_nodes{state="up"} == 2`, 60*time.Second)
	p.waitFor(t, `gpumeter_queue_jobs{Hostname="`+b.name+`", state="running"} == 1`, 60*time.Second)
	p.waitFor(t, `DCGM_FI_DEV_GPU_UTIL{Hostname="`+b.name+`"} > 0`, 30*time.Second)
	// What each panel's queries answer, by legend: the Hostname label's
	// value, or the query's own where it has none.
	want := map[string]map[string]float64{
		"Nodes up":              {"": 2},
		"Nodes draining":        {"": 0},
		"Nodes lost":            {"": 0},
		"Schedulers":            {"": 1},
		"Jobs running per node": {a.name: 0, b.name: 1},
		"Utilisation per node":  {a.name: 0, b.name: 0.4, "": 0.7},
	}
	for _, pn := range row {
		w, ok := want[pn.Title]
		if !ok {
			t.Errorf("panel %q of the fleet row is not checked here", pn.Title)
			continue
		}
		got := map[string]float64{}
		for _, tg := range pn.Targets {
			res, err := p.instant(subst(t, tg.Expr, allValues()))
			if err != nil {
				t.Errorf("panel %q: %v", pn.Title, err)
				continue
			}
			for _, s := range res {
				v, err := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
				if err != nil {
					t.Errorf("panel %q: %v in %v", pn.Title, err, s)
				}
				got[s.Metric["Hostname"]] = v
			}
		}
		if len(got) != len(w) {
			t.Errorf("panel %q answers %v, want %v", pn.Title, got, w)
			continue
		}
		for k, v := range w {
			if g, ok := got[k]; !ok || !harness.CloseTo(g, v, 0.01) && !(v == 0 && g == 0) {
				t.Errorf("panel %q answers %v, want %v", pn.Title, got, w)
				break
			}
		}
	}
}
