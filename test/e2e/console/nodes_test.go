package console

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// fleetScenario is a node of two GPUs; on the first node a container
// outside the queue holds GPU 0.
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
%s`

const fleetOutside = `containers:
  - name: notebook
    labels: {gpumeter.user: carol}
    gpus: [0]
    phases: [{at: 0s, util: 30, memory: 20GiB}]
`

// nodeTilesJS is each tile of the nodes page: its state and its GPUs'
// states, by node.
const nodeTilesJS = `Object.fromEntries([...document.querySelectorAll("li.node-tile")].map(t => [t.id.replace(/^node-/, ""),
	[t.dataset.state, ...[...t.querySelectorAll("li.node-gpu")].map(g => g.classList.contains("gpu-outside") ? "outside" : g.classList.contains("gpu-held") ? "held" : "free")]]))`

// TestConsoleNodes runs a fleet of two agents on one throwaway
// PostgreSQL (queue.fleet) and visits the Nodes page of the first in
// Chromium: a tile per node with its state and its GPUs by state, at
// both sizes in both themes without errors, overflow or low contrast;
// a tile's link leads to the node's GPUs; an unknown node is a 404 that
// says so; the jobs page has the Node column and still fits.
func TestConsoleNodes(t *testing.T) {
	dsn := pgtest.DSN(t)
	roles, tokens := demoRoles(t)
	admin, alice := roles[0], roles[1]
	dir := t.TempDir()
	passwd := harness.WriteText(t, filepath.Join(dir, "passwd"), "root:x:0:0::/root:/bin/sh\nalice:x:2001:2001::/home/alice:/bin/sh\n")
	group := harness.WriteText(t, filepath.Join(dir, "group"), "root:x:0:\nalice:x:2001:\n")
	var agents []*harness.Agent
	for i, node := range []string{"fleet-a", "fleet-b"} {
		extra := ""
		if i == 0 {
			extra = fleetOutside
		}
		scenario := filepath.Join(dir, node+".yaml")
		if err := os.WriteFile(scenario, []byte(fmt.Sprintf(fleetScenario, node, extra)), 0o644); err != nil {
			t.Fatal(err)
		}
		// No engine: no job can start, so the fleet's job waits, as the
		// page shows it.
		agents = append(agents, harness.Serve(t, []string{tokens, "GPUMETER_HOSTNAME=" + node,
			"GPUMETER_QUEUE_ENABLED=true", "GPUMETER_QUEUE_FLEET=true", "GPUMETER_LEDGER_DSN=" + dsn, "GPUMETER_LEDGER_FLUSH_INTERVAL=1s",
			"GPUMETER_QUEUE_IMAGES=pytorch/*", "GPUMETER_QUEUE_DEFAULT_TIME_LIMIT=1h",
			"GPUMETER_HOST_PASSWD_FILE=" + passwd, "GPUMETER_HOST_GROUP_FILE=" + group,
			"GPUMETER_DOCKER_HOST=unix://" + filepath.Join(dir, node+"-no-docker.sock")}, "--sim", scenario, "--interval", "200ms"))
	}
	a := agents[0]
	harness.WaitFor(t, 60*time.Second, "both nodes up, fleet-a's GPU 0 outside the queue", func() bool {
		var ns apitype.Nodes
		getJSON(t, a.URL+"/api/v1/nodes", admin.secret, &ns)
		up := 0
		outside := false
		for _, n := range ns.Nodes {
			if n.State == apitype.NodeUp && len(n.GPUs) == 2 {
				up++
			}
			outside = outside || n.Node == "fleet-a" && n.GPUs[0].State == apitype.GPUOutside
		}
		return up == 2 && outside
	})
	// Three GPUs fit on no node: the job waits, placed nowhere.
	waiting := submitJobID(t, a.URL, alice.secret, apitype.JobRequest{GPUs: 3, Image: "pytorch/pytorch:2.4.0", Name: "too-big", Command: []string{"python", "train.py"}})

	b := harness.NewBrowser(t)
	ctx := b.Ctx
	harness.SignIn(t, ctx, a.URL, admin.secret, admin.as)
	shots := artefactDir(t)
	want := map[string][]string{"fleet-a": {"up", "outside", "free"}, "fleet-b": {"up", "free", "free"}}
	for _, vp := range viewports {
		for _, theme := range themes {
			where := fmt.Sprintf("/nodes at %dx%d, %s", vp.width, vp.height, theme)
			emulate(t, ctx, vp, theme)
			if status := open(t, ctx, a.URL+"/nodes"); status != 200 {
				t.Errorf("%s: status %d, want 200", where, status)
			}
			st := state(t, ctx)
			if !strings.Contains(st.Status, "signed in as "+admin.as) || st.Message != "" {
				t.Errorf("%s: status %q, message %q", where, st.Status, st.Message)
			}
			got := evaluate[map[string][]string](t, ctx, "tiles", nodeTilesJS)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: tiles %v, want %v", where, got, want)
			}
			if over := overflow(t, ctx, vp); len(over) > 0 {
				t.Errorf("%s: wider than the viewport: %s", where, strings.Join(over, "; "))
			}
			c := evaluate[contrast](t, ctx, "contrast", contrastJS)
			if c.Checked == 0 {
				t.Errorf("%s: no text to check the contrast of", where)
			}
			for _, l := range c.Low {
				t.Errorf("%s: low contrast: %s", where, l)
			}
			screenshot(t, ctx, shots, fmt.Sprintf("nodes-%dx%d-%s", vp.width, vp.height, theme))
			if *updateDocs && !vp.phone && theme == "light" {
				t.Logf("wrote %s", screenshot(t, ctx, docsDir(t), "nodes"))
			}
			noErrors(t, b, where)
		}
	}

	// The navigation has the page; a tile's link leads to its node.
	emulate(t, ctx, viewports[0], "light")
	open(t, ctx, a.URL+"/")
	if nav := evaluate[[]string](t, ctx, "nav", `[...document.querySelectorAll("header nav a")].map(a => a.getAttribute("href"))`); !strings.Contains(strings.Join(nav, " "), "/nodes") {
		t.Errorf("the navigation %v has no Nodes page in a fleet", nav)
	}
	open(t, ctx, a.URL+"/nodes")
	harness.Step(t, ctx, "follow fleet-b's link", chromedp.Click(chromedp.CSS(`#node-fleet-b h2 a`)))
	harness.Step(t, ctx, "wait for fleet-b's page", chromedp.WaitVisible(chromedp.CSS(`#node-gpus`)))
	rows := evaluate[[]string](t, ctx, "GPU rows", `[...document.querySelectorAll("#node-gpus tbody tr")].map(r => r.innerText.replace(/\s+/g, " ").trim())`)
	if want := []string{"GPU 0 NVIDIA H100 80GB HBM3 80 GiB free –", "GPU 1 NVIDIA H100 80GB HBM3 80 GiB free –"}; fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("fleet-b's GPUs %q, want %q", rows, want)
	}
	if u := evaluate[string](t, ctx, "url", `location.pathname`); u != "/nodes/fleet-b" {
		t.Errorf("the tile's link led to %s", u)
	}
	noErrors(t, b, "/nodes/fleet-b")

	// An unknown node is a 404 that says so.
	resp := harness.Step(t, ctx, "open /nodes/nope", chromedp.NavigateResponse(a.URL+"/nodes/nope"))
	if st := state(t, ctx); resp.Status != 404 || !strings.Contains(st.Message, `node "nope" is not in the fleet`) {
		t.Errorf("/nodes/nope: %d %q, want 404 saying it is not in the fleet", resp.Status, st.Message)
	}
	b.FailedLoads() // the 404 itself
	noErrors(t, b, "/nodes/nope")

	// The jobs page names the node, a dash for the waiting job, and
	// still fits at a desktop and a phone width.
	for _, vp := range []viewport{{"desktop", 1280, 800, false}, {"phone", 390, 844, true}} {
		where := fmt.Sprintf("/jobs at %d px", vp.width)
		emulate(t, ctx, vp, "light")
		open(t, ctx, a.URL+"/jobs")
		node := evaluate[string](t, ctx, "node cell", `(document.querySelector("#job-`+waiting+` td.node") || {}).textContent || "none"`)
		if node != "–" {
			t.Errorf("%s: the waiting job's node is %q, want –", where, node)
		}
		for _, p := range evaluate[[]string](t, ctx, "fit", fitJS) {
			t.Errorf("%s: %s", where, p)
		}
		noErrors(t, b, where)
	}
}
