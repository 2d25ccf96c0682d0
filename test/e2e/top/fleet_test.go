package top

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// fleetScenario is a node of two simulated GPUs.
const fleetScenario = `version: 1
node: %s
duration: 1h
interval: 1s
gpus:
  - count: 2
    model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    idle_power: 70W
    max_power: 700W
`

// serveFleet runs two agents, fleet-a and fleet-b, in a fleet on one
// throwaway PostgreSQL, and returns the first.
func serveFleet(t *testing.T) *harness.Agent {
	t.Helper()
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	var first *harness.Agent
	for _, node := range []string{"fleet-a", "fleet-b"} {
		scenario := filepath.Join(dir, node+".yaml")
		if err := os.WriteFile(scenario, []byte(fmt.Sprintf(fleetScenario, node)), 0o644); err != nil {
			t.Fatal(err)
		}
		a := harness.Serve(t, []string{"GPUMETER_HOSTNAME=" + node, "GPUMETER_QUEUE_ENABLED=true", "GPUMETER_QUEUE_FLEET=true",
			"GPUMETER_LEDGER_DSN=" + dsn, "GPUMETER_QUEUE_IMAGES=pytorch/*",
			"GPUMETER_DOCKER_HOST=unix://" + filepath.Join(dir, node+"-no-docker.sock")}, "--sim", scenario, "--interval", "200ms")
		if first == nil {
			first = a
		}
	}
	return first
}

var fleetRowRE = regexp.MustCompile(`(?m)^(fleet-[ab]) +up +\d+s +\d+ +\d+ +·· +2 +0 +0 +0 +dev$`)

// fleetRows are the nodes whose rows say up with two free GPUs.
func fleetRows(frame string) []string {
	var out []string
	for _, m := range fleetRowRE.FindAllStringSubmatch(frame, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestFleet: top --fleet shows a row per node of a real fleet, with
// --once and in a real terminal, where enter shows a node's GPUs and q
// leaves the terminal as it was; on an agent outside a fleet it exits 1
// with the agent's sentence.
func TestFleet(t *testing.T) {
	a := serveFleet(t)
	env := []string{"GPUMETER_TOKEN=" + harness.AdminToken()}
	var out string
	harness.WaitFor(t, 60*time.Second, "both nodes in top --fleet --once", func() bool {
		var errOut string
		var code int
		out, errOut, code = harness.RunCLI(t, env, "top", "--fleet", "--once", "--url", a.URL)
		if code != 0 {
			t.Fatalf("top --fleet --once: exit %d, stderr %s", code, errOut)
		}
		return strings.Join(fleetRows(out), " ") == "fleet-a fleet-b"
	})
	if !strings.Contains(out, "2 nodes: 2 up") || strings.Contains(out, "\x1b") {
		t.Errorf("top --fleet --once:\n%q", out)
	}

	term := newTerminal(t, env...)
	cmdline := harness.Binary(t) + " top --fleet --url " + a.URL
	term.keys(cmdline, "Enter")
	s := term.await("a row per node", func(s string) bool { return len(fleetRows(s)) == 2 })
	if !term.altScreen() || !strings.Contains(s, "NODE") || !strings.Contains(s, "q quit") {
		t.Errorf("top --fleet in a terminal:\n%s", s)
	}
	term.keys("Down", "Enter")
	term.await("fleet-b's GPUs", func(s string) bool {
		return strings.Contains(s, "node fleet-b") && strings.Contains(s, "GPU 0  NVIDIA H100 80GB HBM3    80G      free")
	})
	term.keys("Escape")
	term.await("the rows again", func(s string) bool { return len(fleetRows(s)) == 2 })
	term.keys("q")
	term.shellBack()
	s = term.await("the shell again", func(s string) bool { return !strings.Contains(s, "q quit") })
	if term.altScreen() {
		t.Errorf("q left the terminal in the alternate screen:\n%s", s)
	}

	// Outside a fleet: status 1 and the agent's sentence.
	d := serveDemo(t)
	_, errOut, code := harness.RunCLI(t, []string{"GPUMETER_TOKEN=" + d.admin}, "top", "--fleet", "--once", "--url", d.URL)
	if code != 1 || !strings.Contains(errOut, "this agent is not in a fleet: it needs queue.fleet: true") {
		t.Errorf("top --fleet on the demo: exit %d, stderr %s; want 1 and the fleet_off sentence", code, errOut)
	}
}
