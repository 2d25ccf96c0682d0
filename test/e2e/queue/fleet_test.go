package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// fleetTakeover is the fleet's ledger.lease_takeover in these tests: how
// long a killed agent's node stays up before it is lost.
const fleetTakeover = "5s"

// fleet is three agents, one per node, on one PostgreSQL ledger and one
// engine, each with four simulated GPUs, its own data directory and its
// own jobs network.
type fleet struct {
	dsn    string
	hosts  []*host
	agents []*agent
}

// newFleet makes the hosts of a fleet of n nodes; start starts them.
func newFleet(t *testing.T, n int) *fleet {
	t.Helper()
	return newFleetWith(t, n, "")
}

// newFleetWith is newFleet with extra (YAML under queue:) added to every
// node's queue section.
func newFleetWith(t *testing.T, n int, extra string) *fleet {
	t.Helper()
	f := &fleet{dsn: pgtest.DSN(t)}
	dockertest.LockGPUs(t)
	// The lock may be waited for behind other checkouts' tests: what
	// the test itself takes is from here to its last cleanup.
	locked := time.Now()
	t.Cleanup(func() { t.Logf("the fleet held the GPU lock for %s", time.Since(locked).Round(100*time.Millisecond)) })
	for range n {
		port := freePort(t)
		h := makeHost(t, fmt.Sprintf("  fleet: true\n  log_retention: 1h\n  fleet_api: http://127.0.0.1:%d\n", port)+extra)
		h.listen = fmt.Sprintf("127.0.0.1:%d", port)
		// Each node's simulated GPUs take their UUIDs from its name.
		sc := strings.Replace(scenario, "node: e2e-queue", "node: "+h.node, 1)
		if err := os.WriteFile(filepath.Join(h.dir, "scenario.yaml"), []byte(sc), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := os.ReadFile(h.config)
		if err != nil {
			t.Fatal(err)
		}
		text := string(cfg) + fmt.Sprintf("ledger:\n  dsn: %q\n  flush_interval: 1s\n  lease_takeover: %s\n", f.dsn, fleetTakeover)
		if len(f.hosts) > 0 {
			// One fleet, one set of tokens: a request an agent passes on
			// to the job's node is checked there with the caller's own.
			first := f.hosts[0]
			text = tokensOf(t, first.config) + text[strings.Index(text, "queue:\n"):]
			text = strings.Replace(text, "hostname: "+first.node, "hostname: "+h.node, 1)
			h.alice, h.bob, h.carol, h.viewer, h.rooty = first.alice, first.bob, first.carol, first.viewer, first.rooty
		}
		if err := os.WriteFile(h.config, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		f.hosts = append(f.hosts, h)
	}
	return f
}

// tokensOf is the config at path up to its queue section: the host
// files and the tokens.
func tokensOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	return text[:strings.Index(text, "queue:\n")]
}

// throughProxy points host i's ledger.dsn at a pgtest proxy in front of
// the fleet's database, so that a test can cut that agent off from
// PostgreSQL and let it back; call it before start.
func (f *fleet) throughProxy(t *testing.T, i int) *pgtest.Proxy {
	t.Helper()
	proxy, via := pgtest.NewProxy(t, f.dsn)
	h := f.hosts[i]
	cfg, err := os.ReadFile(h.config)
	if err != nil {
		t.Fatal(err)
	}
	from, to := fmt.Sprintf("dsn: %q", f.dsn), fmt.Sprintf("dsn: %q", via)
	if !strings.Contains(string(cfg), from) {
		t.Fatalf("%s has no %s", h.config, from)
	}
	if err := os.WriteFile(h.config, []byte(strings.Replace(string(cfg), from, to, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return proxy
}

func (f *fleet) start(t *testing.T) {
	t.Helper()
	f.agents = nil
	for _, h := range f.hosts {
		f.agents = append(f.agents, h.start(t))
	}
}

// nodes asks agent a for the fleet's nodes.
func (f *fleet) nodes(t *testing.T, a *agent) apitype.Nodes {
	t.Helper()
	status, body := a.call(t, http.MethodGet, "/api/v1/nodes", a.h.admin, nil)
	if status != http.StatusOK {
		t.Fatalf("GET /api/v1/nodes: %d %s", status, body)
	}
	var ns apitype.Nodes
	if err := json.Unmarshal(body, &ns); err != nil {
		t.Fatalf("GET /api/v1/nodes: %v: %s", err, body)
	}
	return ns
}

// leader is the node whose agent holds the scheduler lease now, as the
// ledger says.
func (f *fleet) leader(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var node string
	if err := conn.QueryRow(ctx, `SELECT node FROM scheduler_lease WHERE NOT released`).Scan(&node); err != nil {
		t.Fatalf("read the scheduler lease: %v", err)
	}
	return node
}

// run is one of a job's containers, as the engine keeps it.
type run struct {
	job, node, id string
	gpus          []string
	// created is when the engine created the container; from and to
	// when it started and ended.
	created, from, to time.Time
	exit              int
}

// runs are every job container of the fleet's nodes.
func (f *fleet) runs(t *testing.T) []run {
	t.Helper()
	var out []run
	for _, h := range f.hosts {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := h.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
			Filters: make(client.Filters).Add("label", spec.NodeLabel+"="+h.node)})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range res.Items {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			res, err := h.cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
			cancel()
			if cerrdefs.IsNotFound(err) {
				continue // removed since the listing: a start that failed, never run
			}
			if err != nil {
				t.Fatalf("inspect %.12s: %v", c.ID, err)
			}
			in := res.Container
			r := run{job: in.Config.Labels["gpumeter.job"], node: h.node, id: c.ID}
			for _, kv := range in.Config.Env {
				if v, ok := strings.CutPrefix(kv, "NVIDIA_VISIBLE_DEVICES="); ok && v != "" && v != "none" {
					r.gpus = strings.Split(v, ",")
				}
			}
			r.created, _ = time.Parse(time.RFC3339Nano, in.Created)
			r.from, _ = time.Parse(time.RFC3339Nano, in.State.StartedAt)
			r.to, _ = time.Parse(time.RFC3339Nano, in.State.FinishedAt)
			if in.State.Running || r.to.Year() < 2000 {
				r.to = time.Now().Add(time.Hour)
			}
			r.exit = in.State.ExitCode
			out = append(out, r)
		}
	}
	return out
}

// TestFleetOneQueue: three agents share one queue on PostgreSQL. Jobs
// submitted through one agent run on every node, a 4-GPU job on one
// node, a --node job where it asked; the scheduler is killed with SIGKILL
// mid-run and another agent takes over; its node's jobs requeue once its
// lease expires, and when it comes back nothing runs twice. From the
// engine's own records: no two containers ever held one GPU of one node
// at once, and every job succeeded in exactly one run that ended.
func TestFleetOneQueue(t *testing.T) {
	f := newFleet(t, 3)
	f.start(t)
	a := f.agents[0]
	dockertest.WaitFor(t, time.Minute, "three nodes up", func() (bool, string) {
		ns := f.nodes(t, a)
		up := 0
		for _, n := range ns.Nodes {
			if n.State == "up" && len(n.GPUs) == 4 {
				up++
			}
		}
		return up == 3, fmt.Sprint(ns)
	})

	var ids []string
	submit := func(token string, req apitype.JobRequest) apitype.Job {
		j := a.submit(t, token, req)
		ids = append(ids, j.ID)
		return j
	}
	job := func(gpus int, d string) apitype.JobRequest {
		return a.h.request(gpus, "5m", "exit-after", d, "0", "done")
	}
	// One job on each node first, whose logs every agent then shows.
	var onNode []apitype.Job
	for _, h := range f.hosts {
		req := job(1, "100ms")
		req.Node = h.node
		onNode = append(onNode, submit(a.h.alice, req))
	}
	for i, j := range onNode {
		if j = a.await(t, j.ID, time.Minute, "succeeded", "failed"); j.State != "succeeded" || j.Node != f.hosts[i].node {
			t.Fatalf("%s asked for node %s: %s on %q: %s", j.ID, f.hosts[i].node, j.State, j.Node, j.ReasonText)
		}
		status, body := a.call(t, http.MethodGet, "/api/v1/jobs/"+j.ID+"/logs", a.h.alice, nil)
		if status != http.StatusOK || strings.TrimSpace(string(body)) != "done" {
			t.Errorf("logs of %s (node %s) through %s: %d %q, want its output", j.ID, j.Node, a.h.node, status, body)
		}
	}
	// A job no node may take waits, and every agent's API says where it
	// stands and why, as the scheduler ranked it.
	nowhere := job(1, "1s")
	nowhere.Node = "no-such-node"
	stray := a.submit(t, a.h.alice, nowhere)
	for _, ag := range f.agents {
		dockertest.WaitFor(t, time.Minute, ag.h.node+" ranks "+stray.ID, func() (bool, string) {
			j := ag.job(t, stray.ID)
			return j.State == "queued" && j.Position != nil && j.Reason == "node_constraint",
				fmt.Sprintf("%s, position %v: %s %s", j.State, j.Position, j.Reason, j.ReasonText)
		})
	}
	if status, e := a.post(t, stray.ID, "cancel", a.h.alice); status != http.StatusOK {
		t.Errorf("cancel %s: %d %+v", stray.ID, status, e)
	}
	for i := range 12 {
		submit(a.h.alice, job(1+i%2, "3s"))
		submit(a.h.bob, job(1, "2s"))
		if i%3 == 0 {
			submit(a.h.carol, job(2, "1s"))
		}
	}
	big := submit(a.h.bob, job(4, "2s"))
	pinned := job(1, "1s")
	pinned.Node = f.hosts[2].node
	pin := submit(a.h.alice, pinned)
	chain := job(1, "1s")
	first := submit(a.h.alice, chain)
	chain.After = []apitype.Dependency{{Type: "ok", ID: first.ID}}
	second := submit(a.h.alice, chain)

	// Kill the scheduler once jobs run.
	dockertest.WaitFor(t, time.Minute, "a job running", func() (bool, string) {
		for _, r := range f.runs(t) {
			if r.to.After(time.Now()) {
				return true, ""
			}
		}
		return false, "none yet"
	})
	leader := f.leader(t)
	k := slices.IndexFunc(f.hosts, func(h *host) bool { return h.node == leader })
	if k < 0 {
		t.Fatalf("the scheduler lease names node %q, none of the fleet's", leader)
	}
	f.agents[k].Kill(t)
	live := f.agents[(k+1)%3]
	dockertest.WaitFor(t, time.Minute, "the killed agent's node lost", func() (bool, string) {
		for _, n := range f.nodes(t, live).Nodes {
			if n.Node == leader {
				return n.State == "lost", n.State
			}
		}
		return false, "not listed"
	})
	if status, body := live.call(t, http.MethodGet, "/api/v1/jobs/"+onNode[k].ID+"/logs", live.h.alice, nil); status != http.StatusServiceUnavailable || !strings.Contains(string(body), `"node_lost"`) {
		t.Errorf("logs of %s, on the lost node %s: %d %s, want 503 node_lost", onNode[k].ID, leader, status, body)
	}
	for _, id := range ids {
		j := live.await(t, id, 3*time.Minute, "succeeded", "failed", "cancelled", "timeout")
		if j.State != "succeeded" {
			t.Errorf("%s ended %s (%s): %s", id, j.State, j.Reason, j.ReasonText)
		}
	}
	if next := f.leader(t); next == leader {
		t.Errorf("the scheduler lease stayed with the killed agent's node %s", leader)
	}
	// The killed agent comes back and reconciles; more jobs run.
	restarted := time.Now()
	f.agents[k] = f.hosts[k].start(t)
	for range 6 {
		j := live.submit(t, live.h.alice, job(1, "1s"))
		ids = append(ids, j.ID)
	}
	for _, id := range ids[len(ids)-6:] {
		if j := live.await(t, id, 3*time.Minute, "succeeded", "failed"); j.State != "succeeded" {
			t.Errorf("%s ended %s: %s", id, j.State, j.ReasonText)
		}
	}
	// A job running on another node is cancelled through this agent: the
	// job's node stops it.
	other := f.hosts[(slices.Index(f.agents, live)+1)%3]
	long := live.h.request(1, "5m", "exit-after", "5m", "0")
	long.Node = other.node
	lj := live.submit(t, live.h.alice, long)
	live.await(t, lj.ID, time.Minute, "running")
	if status, e := live.post(t, lj.ID, "cancel", live.h.alice); status != http.StatusOK {
		t.Errorf("cancel %s, running on %s, through %s: %d %+v", lj.ID, other.node, live.h.node, status, e)
	}
	if j := live.await(t, lj.ID, time.Minute, "cancelled", "succeeded", "failed"); j.State != "cancelled" {
		t.Errorf("%s: %s after its cancel, want cancelled: %s", lj.ID, j.State, j.ReasonText)
	}

	jobs := map[string]apitype.Job{}
	for _, id := range ids {
		jobs[id] = live.job(t, id)
	}
	if j := jobs[big.ID]; len(j.GPUs) != 4 {
		t.Errorf("%s asked for 4 GPUs and holds %v", big.ID, j.GPUs)
	}
	for _, j := range jobs {
		p := j.Placement
		if p == nil || len(p.Nodes) == 0 || !p.Nodes[0].Chosen || p.Nodes[0].Node != j.Node {
			t.Errorf("%s ran on %s; its placement's nodes, the chosen first: %+v", j.ID, j.Node, p)
		}
	}
	if j := jobs[pin.ID]; j.Node != f.hosts[2].node || j.NodeConstraint != f.hosts[2].node {
		t.Errorf("%s asked for node %s and ran on %q (constraint %q)", pin.ID, f.hosts[2].node, j.Node, j.NodeConstraint)
	}
	if s, e := jobs[second.ID], jobs[first.ID]; s.StartedAt == nil || e.EndedAt == nil || s.StartedAt.Before(*e.EndedAt) {
		t.Errorf("%s waits for %s, and started at %v, before it ended at %v", second.ID, first.ID, s.StartedAt, e.EndedAt)
	}
	nodesUsed := map[string]int{}
	for _, j := range jobs {
		nodesUsed[j.Node]++
	}
	t.Logf("jobs per node %v; the scheduler was %s, killed", nodesUsed, leader)
	if len(nodesUsed) < 2 {
		t.Errorf("every job ran on %v: one queue over three nodes should use more than one", nodesUsed)
	}

	// The engine's record: per (node, GPU), the runs never overlap; per
	// job, exactly one run succeeded, and no two of its runs overlap.
	runs := f.runs(t)
	byGPU := map[string][]run{}
	byJob := map[string][]run{}
	for _, r := range runs {
		if r.from.IsZero() {
			continue // created, never started
		}
		byJob[r.job] = append(byJob[r.job], r)
		for _, g := range r.gpus {
			byGPU[r.node+"/"+g] = append(byGPU[r.node+"/"+g], r)
		}
	}
	for key, rs := range byGPU {
		if o := overlap(rs); o != "" {
			t.Errorf("GPU %s held by two containers at once: %s", key, o)
		}
	}
	for _, id := range ids {
		rs, j := byJob[id], jobs[id]
		for _, r := range rs {
			switch {
			case r.id == j.ContainerID:
				if r.exit != 0 || !r.to.Before(time.Now()) {
					t.Errorf("%s: its container %.12s on %s exited %d at %v, want 0, ended", id, r.id, r.node, r.exit, r.to)
				}
			case r.node != leader || !r.from.Before(restarted):
				// Only the killed agent's node may hold an earlier run:
				// the one its death orphaned (a start the engine made
				// as the agent died included), requeued after its lease.
				t.Errorf("%s ran in container %.12s on %s besides %.12s on %s", id, r.id, r.node, j.ContainerID, j.Node)
			}
		}
		if !slices.ContainsFunc(rs, func(r run) bool { return r.id == j.ContainerID }) {
			t.Errorf("%s: the engine has no container %.12s, which the job names", id, j.ContainerID)
		}
		if o := overlap(rs); o != "" && !slices.ContainsFunc(rs, func(r run) bool { return r.node == leader }) {
			t.Errorf("%s ran twice at once: %s", id, o)
		}
	}
}

// overlap names two runs of rs that overlap in time, "" when none do.
func overlap(rs []run) string {
	sort.Slice(rs, func(i, j int) bool { return rs[i].from.Before(rs[j].from) })
	for i := 1; i < len(rs); i++ {
		if rs[i].from.Before(rs[i-1].to) {
			p, q := rs[i-1], rs[i]
			return fmt.Sprintf("%s on %s %s..%s and %s on %s %s..%s", p.job, p.node, p.from.Format("15:04:05.000"), p.to.Format("15:04:05.000"),
				q.job, q.node, q.from.Format("15:04:05.000"), q.to.Format("15:04:05.000"))
		}
	}
	return ""
}

// TestFleetPreempts: the scheduler preempts a preemptible job that runs
// on another node than its own: it writes the preemption on the job, the
// job's node stops its container with the preempt grace and puts it back
// in the queue, the waiting job starts there, and the preempted one runs
// again to its end.
func TestFleetPreempts(t *testing.T) {
	f := newFleetWith(t, 2, preemptConfig("1s")+"  max_gpus_per_user: {default: 8}\n")
	f.start(t)
	a := f.agents[0]
	var leader string
	dockertest.WaitFor(t, time.Minute, "two nodes up and a scheduler", func() (bool, string) {
		up := 0
		for _, n := range f.nodes(t, a).Nodes {
			if n.State == "up" && len(n.GPUs) == 4 {
				up++
			}
		}
		if up < 2 {
			return false, fmt.Sprintf("%d up", up)
		}
		leader = f.leader(t)
		return true, ""
	})
	other := f.hosts[0].node
	if other == leader {
		other = f.hosts[1].node
	}
	// The scheduler's node is full with a job that may not be preempted;
	// the other node's with one that may.
	held := a.h.request(4, "5m", "exit-after", "5m", "0")
	held.Node = leader
	hj := a.submit(t, a.h.bob, held)
	victim := a.h.request(4, "5m", "exit-after", "20s", "0")
	victim.Node, victim.Preemptible = other, true
	vj := a.submit(t, a.h.bob, victim)
	first := a.await(t, vj.ID, time.Minute, "running")
	a.await(t, hj.ID, time.Minute, "running")

	w := a.submit(t, a.h.alice, a.h.request(4, "5m", "exit-after", "1s", "0"))
	back := a.await(t, vj.ID, time.Minute, "queued")
	if back.Reason != "preempted" {
		t.Errorf("%s back in the queue: reason %q (%s), want preempted", vj.ID, back.Reason, back.ReasonText)
	}
	done := a.await(t, w.ID, time.Minute, "succeeded", "failed")
	if done.State != "succeeded" || done.Node != other {
		t.Errorf("%s, waiting for the preempted GPUs: %s on %q, want succeeded on %s", w.ID, done.State, done.Node, other)
	}
	end := a.await(t, vj.ID, 2*time.Minute, "succeeded", "failed")
	if end.State != "succeeded" || end.ContainerID == first.ContainerID {
		t.Errorf("%s after its preemption: %s in %.12s (first run %.12s), want succeeded in a new container", vj.ID, end.State, end.ContainerID, first.ContainerID)
	}
	if j := a.job(t, hj.ID); j.State != "running" || j.ContainerID == "" {
		t.Errorf("%s, not preemptible, on the scheduler's node: %s, want it still running", hj.ID, j.State)
	}
	if _, e := a.post(t, hj.ID, "cancel", a.h.admin); e.Code != "" {
		t.Errorf("cancel %s: %+v", hj.ID, e)
	}
}
