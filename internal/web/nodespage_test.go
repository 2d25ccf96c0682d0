package web_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/run"
)

// fleetFixture is the API over a real queue on a real SQLite ledger in
// which three nodes registered: gpu-a (two GPUs, GPU-a0 held by alice's
// running job) and gpu-b (one GPU, held by a container outside the
// queue, drained) hold their leases; gpu-c never took one, so it is
// lost. It returns the running job's id.
func fleetFixture(t *testing.T) (*servertest.JobsFixture, string) {
	t.Helper()
	nodes := &run.Nodes{Takeover: time.Hour}
	f := servertest.NewJobsFixtureServer(t, nil, func(c *server.Config) { c.Nodes = nodes })
	nodes.Fleet, nodes.Jobs = f.Store, f.Store
	ctx := context.Background()
	gpu := func(uuid string, i int, util float64) ledger.NodeGPU {
		return ledger.NodeGPU{UUID: uuid, Index: i, Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, Util: util}
	}
	b := ledger.NodeInfo{Node: "gpu-b", AgentVersion: "1.4.1", GPUs: []ledger.NodeGPU{gpu("GPU-b0", 0, 0.2)}}
	b.GPUs[0].OutsideContainer = "notebook"
	for _, n := range []ledger.NodeInfo{
		{Node: "gpu-a", AgentVersion: "1.4.0", GPUs: []ledger.NodeGPU{gpu("GPU-a0", 0, 0.9), gpu("GPU-a1", 1, 0.5)}},
		b, {Node: "gpu-c", AgentVersion: "1.3.0"},
	} {
		if err := f.Store.RegisterNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range []string{"gpu-a", "gpu-b"} {
		if _, err := f.Store.Acquire(ctx, ledger.Lease{Node: node, Instance: node + "-1", Host: node, PID: os.Getpid()}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Store.SetDrained(ctx, "gpu-b", true, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	j := f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	if _, err := f.Store.UpdateJob(ctx, j.ID, "queued", func(q *queue.Job) {
		q.State, q.StartedAt, q.Node, q.GPUs, q.Reason, q.ReasonText = "running", time.Now().UTC(), "gpu-a", []string{"GPU-a0"}, "", "running on GPU-a0"
	}, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	return f, j.ID
}

var (
	nodeTileRE = regexp.MustCompile(`(?s)<li class="tile node-tile" id="node-([^"]+)" data-state="([^"]+)">.*?</li>\n`)
	gpuRowRE   = regexp.MustCompile(`(?s)<tr id="gpu-(\d+)" class="gpu-row">(.*?)</tr>`)
	tagRE      = regexp.MustCompile(`<[^>]+>`)
)

// nodeTiles are the nodes page's tiles: state by node, and each tile's
// HTML.
func nodeTiles(body string) (map[string]string, map[string]string) {
	states, tiles := map[string]string{}, map[string]string{}
	for _, m := range nodeTileRE.FindAllStringSubmatch(body, -1) {
		states[m[1]], tiles[m[1]] = m[2], m[0]
	}
	return states, tiles
}

// text is HTML without its tags and with its spaces folded.
func text(h string) string { return strings.Join(strings.Fields(tagRE.ReplaceAllString(h, " ")), " ") }

// TestNodesPage: every role sees a tile per node with its state, its
// GPUs by state, lease age, score and jobs; the navigation has the page
// in a fleet.
func TestNodesPage(t *testing.T) {
	f, _ := fleetFixture(t)
	for _, caller := range []string{servertest.AsAdmin, servertest.AsViewer, servertest.AsAlice, servertest.AsBob} {
		body := checkHTMLPage(t, f.Get(t, caller, "/nodes"), http.StatusOK)
		states, tiles := nodeTiles(body)
		if want := map[string]string{"gpu-a": "up", "gpu-b": "draining", "gpu-c": "lost"}; !maps.Equal(states, want) {
			t.Fatalf("%s: node states %v, want %v:\n%s", caller, states, want, body)
		}
		if !strings.Contains(body, `<a href="/nodes" aria-current="page">Nodes</a>`) {
			t.Errorf("%s: the navigation does not mark the nodes page", caller)
		}
		for node, want := range map[string][]string{
			"gpu-a": {"2 GPUs: 1 free · 1 held · 0 outside", "Score 100 SM 70 %", "Jobs running 1", "Agent 1.4.0"},
			"gpu-b": {"1 GPU: 0 free · 0 held · 1 outside", "Jobs running 0", "Agent 1.4.1"},
			"gpu-c": {"0 GPUs: 0 free · 0 held · 0 outside", "Agent 1.3.0"},
		} {
			for _, w := range want {
				if got := text(tiles[node]); !strings.Contains(got, w) {
					t.Errorf("%s: tile %s says %q, want it to say %q", caller, node, got, w)
				}
			}
			if !strings.Contains(tiles[node], `<a href="/nodes/`+node+`">`) {
				t.Errorf("%s: tile %s does not link to its node's page", caller, node)
			}
		}
		if !strings.Contains(tiles["gpu-a"], `class="node-gpu gpu-held"`) || !strings.Contains(tiles["gpu-b"], `class="node-gpu gpu-outside"`) {
			t.Errorf("%s: the GPUs are not drawn by state:\n%s%s", caller, tiles["gpu-a"], tiles["gpu-b"])
		}
	}
	if status, body := page(t, f.Fixture, servertest.AsAdmin, "/nodes?x=1"); status != http.StatusBadRequest || !strings.Contains(message(body), "takes no parameters") {
		t.Errorf("/nodes?x=1: %d %q, want 400", status, message(body))
	}
	if status, body := page(t, f.Fixture, servertest.AsNone, "/nodes"); status != http.StatusUnauthorized || !strings.Contains(body, `id="login"`) {
		t.Errorf("/nodes without a token: %d, want the sign-in form", status)
	}
}

// TestNodePage: a node's page lists its GPUs with model, memory, state
// and the job that holds each, as the reader may see it; an unknown node
// is a 404 that says so.
func TestNodePage(t *testing.T) {
	f, id := fleetFixture(t)
	rows := func(caller, path string) map[string]string {
		body := checkHTMLPage(t, f.Get(t, caller, path), http.StatusOK)
		out := map[string]string{}
		for _, m := range gpuRowRE.FindAllStringSubmatch(body, -1) {
			out[m[1]] = text(m[2])
		}
		if !strings.Contains(body, `<a href="/nodes" aria-current="page">Nodes</a>`) {
			t.Errorf("%s: the navigation does not mark the nodes page", path)
		}
		return out
	}
	for _, tc := range []struct {
		caller string
		want   map[string]string
	}{
		{servertest.AsAdmin, map[string]string{"0": "GPU 0 NVIDIA H100 80GB HBM3 80 GiB held " + id + " train alice", "1": "GPU 1 NVIDIA H100 80GB HBM3 80 GiB free –"}},
		{servertest.AsAlice, map[string]string{"0": "GPU 0 NVIDIA H100 80GB HBM3 80 GiB held " + id + " train alice", "1": "GPU 1 NVIDIA H100 80GB HBM3 80 GiB free –"}},
		// Bob sees that the GPU is held, not by whom.
		{servertest.AsBob, map[string]string{"0": "GPU 0 NVIDIA H100 80GB HBM3 80 GiB held another user's job", "1": "GPU 1 NVIDIA H100 80GB HBM3 80 GiB free –"}},
	} {
		if got := rows(tc.caller, "/nodes/gpu-a"); !maps.Equal(got, tc.want) {
			t.Errorf("/nodes/gpu-a as %s: %q, want %q", tc.caller, got, tc.want)
		}
	}
	body := checkHTMLPage(t, f.Get(t, servertest.AsAdmin, "/nodes/gpu-a"), http.StatusOK)
	if !strings.Contains(body, `<a href="/jobs#job-`+id+`">`) || !strings.Contains(body, "<title>Node gpu-a · gpumeter</title>") {
		t.Errorf("the node's page does not link the job, or is not titled by the node:\n%s", body)
	}
	if got := rows(servertest.AsViewer, "/nodes/gpu-b"); got["0"] != "GPU 0 NVIDIA H100 80GB HBM3 80 GiB outside –" {
		t.Errorf("/nodes/gpu-b: %q", got)
	}
	if body := checkHTMLPage(t, f.Get(t, servertest.AsViewer, "/nodes/gpu-c"), http.StatusOK); !strings.Contains(body, "This node registered no GPUs.") {
		t.Errorf("/nodes/gpu-c does not say it has no GPUs:\n%s", body)
	}
	status, body := page(t, f.Fixture, servertest.AsAdmin, "/nodes/gpu-z")
	if status != http.StatusNotFound || !strings.Contains(message(body), `node "gpu-z" is not in the fleet`) {
		t.Errorf("/nodes/gpu-z: %d %q, want 404 saying it is not in the fleet", status, message(body))
	}
}

// TestJobsPageInFleet: in a fleet the jobs page has a Node column, the
// node a job runs on linked to its page and a dash while it waits, and
// a job's GPUs on another node are named by that node's registration.
func TestJobsPageInFleet(t *testing.T) {
	f, id := fleetFixture(t)
	// A job submitted in a fleet has no node until the scheduler places
	// it: as another agent of the fleet writes it.
	queued, err := f.Store.SubmitJob(context.Background(), queue.Job{Name: "waits", User: "bob", State: "queued", GPUsRequested: 1,
		Image: "gpumeter/sleeper:1", TimeLimit: time.Hour, SubmittedAt: time.Now().UTC(), Reason: "resources"}, audit.Event{})
	if err != nil {
		t.Fatal(err)
	}
	body := checkHTMLPage(t, f.Get(t, servertest.AsAdmin, "/jobs"), http.StatusOK)
	if !strings.Contains(body, `<th scope="col">Node</th>`) {
		t.Fatalf("no Node column:\n%s", body)
	}
	row := func(job string) string {
		return regexp.MustCompile(`(?s)<tr id="job-` + job + `".*?</tr>`).FindString(body)
	}
	if r := row(id); !strings.Contains(r, `<td data-label="Node" class="node"><a href="/nodes/gpu-a">gpu-a</a></td>`) ||
		!strings.Contains(r, `<abbr class="gpu" title="GPU-a0">GPU 0</abbr>`) {
		t.Errorf("the running job's row does not name its node and its GPU:\n%s", r)
	}
	if r := row(queued.ID); !strings.Contains(r, `<td data-label="Node" class="node"><span class="muted">–</span></td>`) {
		t.Errorf("the queued job's row has a node:\n%s", r)
	}
}

// TestNodesPageOutsideFleet: an agent that is not in a fleet has no
// nodes page in its navigation, says why on /nodes, and answers a
// node's page with 404.
func TestNodesPageOutsideFleet(t *testing.T) {
	f := servertest.NewJobsFixture(t, nil)
	body := checkHTMLPage(t, f.Get(t, servertest.AsAdmin, "/jobs"), http.StatusOK)
	if strings.Contains(body, `href="/nodes"`) || strings.Contains(body, `<th scope="col">Node</th>`) {
		t.Errorf("outside a fleet the jobs page has nodes:\n%s", body)
	}
	body = checkHTMLPage(t, f.Get(t, servertest.AsAdmin, "/nodes"), http.StatusOK)
	if !strings.Contains(body, `id="fleet-off"`) || !strings.Contains(body, "queue.fleet: true") {
		t.Errorf("/nodes outside a fleet does not say so:\n%s", body)
	}
	if status, body := page(t, f.Fixture, servertest.AsAdmin, "/nodes/gpu-a"); status != http.StatusNotFound || !strings.Contains(message(body), "not in a fleet") {
		t.Errorf("/nodes/gpu-a outside a fleet: %d %q", status, message(body))
	}
}

// downFleet is a fleet whose database cannot be reached: a fake, as
// the store's own tests make the outage real.
type downFleet struct{}

func (downFleet) Nodes(context.Context) ([]queue.NodeView, error) {
	return nil, fmt.Errorf("nodes: %w", ledger.ErrUnavailable)
}

func (downFleet) SetDrained(context.Context, string, bool, audit.Event) error {
	return fmt.Errorf("drain: %w", ledger.ErrUnavailable)
}

func (downFleet) Consolidate(context.Context) ([]queue.ConsolidateAdvice, error) {
	return nil, fmt.Errorf("consolidate: %w", ledger.ErrUnavailable)
}

// TestNodesPageLedgerDown: a fleet's database out of reach is a 503 that
// says to try again, on both pages, and the jobs page still lists the
// jobs.
func TestNodesPageLedgerDown(t *testing.T) {
	f := servertest.NewJobsFixtureServer(t, nil, func(c *server.Config) { c.Nodes = downFleet{} })
	for _, path := range []string{"/nodes", "/nodes/gpu-a"} {
		if status, body := page(t, f.Fixture, servertest.AsAdmin, path); status != http.StatusServiceUnavailable || !strings.Contains(message(body), "try again") {
			t.Errorf("%s with the fleet's database down: %d %q, want 503 saying to try again", path, status, message(body))
		}
	}
	j := f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	if got := jobIDs(checkHTMLPage(t, f.Get(t, servertest.AsAdmin, "/jobs"), http.StatusOK)); !slices.Equal(got, []string{j.ID}) {
		t.Errorf("jobs %v with the fleet's database down, want %s", got, j.ID)
	}
}
