package queue

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// The fleet's faults (issue 29, "Faults" and "Tested with real
// components"): a node's agent killed, an agent cut off from PostgreSQL,
// PostgreSQL restarted; and the fleet as one fair queue whose reports
// count every job once. Each test asserts from the job records and from
// the engine's own record of the containers.

// stopGrace is queue.stop_grace in these tests (makeHost's).
const stopGrace = time.Second

// upNodes waits until a sees n nodes up with four GPUs each.
func (f *fleet) upNodes(t *testing.T, a *agent, n int) {
	t.Helper()
	dockertest.WaitFor(t, time.Minute, fmt.Sprintf("%d nodes up", n), func() (bool, string) {
		ns := f.nodes(t, a)
		up := 0
		for _, nd := range ns.Nodes {
			if nd.State == "up" && len(nd.GPUs) == 4 {
				up++
			}
		}
		return up == n, fmt.Sprint(ns)
	})
}

// nodeState is node's state as a sees it, "" when a does not list it.
func (f *fleet) nodeState(t *testing.T, a *agent, node string) string {
	t.Helper()
	for _, n := range f.nodes(t, a).Nodes {
		if n.Node == node {
			return n.State
		}
	}
	return ""
}

// drainAllBut drains (or undrains) every node but keep's, through a, so
// that the jobs submitted meanwhile start on keep and can move once it
// is lost.
func (f *fleet) drainAllBut(t *testing.T, a *agent, keep string, drain bool) {
	t.Helper()
	verb := "drain"
	if !drain {
		verb = "undrain"
	}
	for _, h := range f.hosts {
		if h.node == keep {
			continue
		}
		if status, body := a.call(t, http.MethodPost, "/api/v1/nodes/"+h.node+"/"+verb, a.h.admin, []byte(`{}`)); status != http.StatusOK {
			t.Fatalf("POST /api/v1/nodes/%s/%s: %d %s", h.node, verb, status, body)
		}
	}
}

// leaderIndex is the index of the host whose agent holds the scheduler
// lease.
func (f *fleet) leaderIndex(t *testing.T) int {
	t.Helper()
	leader := f.leader(t)
	k := slices.IndexFunc(f.hosts, func(h *host) bool { return h.node == leader })
	if k < 0 {
		t.Fatalf("the scheduler lease names node %q, none of the fleet's", leader)
	}
	return k
}

// engineRecord is every job container the engine showed over a test, by
// container id: the agents remove containers (a stale one that a node
// stops when it reconciles, an ended one past its retention), and what
// they ran must still be checked. A container that was running when last
// seen and is gone at the next look is taken to have run until that look
// (removed set): the latest it can have ended.
type engineRecord map[string]run

// removed marks a run whose container was removed while it ran: its end
// is the look that missed it, and it did not run to its end.
const removed = -1

// observe adds what the engine shows now to rec.
func (f *fleet) observe(t *testing.T, rec engineRecord) {
	t.Helper()
	runs := f.runs(t)
	now := time.Now()
	seen := map[string]bool{}
	for _, r := range runs {
		seen[r.id] = true
		rec[r.id] = r
	}
	for id, r := range rec {
		if !seen[id] && r.exit != removed && r.to.After(now) {
			r.to, r.exit = now, removed
			rec[id] = r
		}
	}
}

// running says whether the engine's record shows job id running on node
// now, and in which container.
func (rec engineRecord) running(id, node string) (string, bool) {
	for _, r := range rec {
		if r.job == id && r.node == node && r.exit != removed && r.to.After(time.Now()) && !r.from.IsZero() {
			return r.id, true
		}
	}
	return "", false
}

// checkRuns asserts the fleet's invariants over the engine's record: no
// two containers ever held one (node, GPU) at once; every job of jobs ran
// to its end exactly once, in the container its record names, which
// exited 0, and any other run of it did not run to its end; and no two
// runs of one job overlap, but where window allows the pair (a dead or
// cut-off agent's orphan, the documented window).
func checkRuns(t *testing.T, rec engineRecord, jobs map[string]apitype.Job, window func(a, b run) bool) {
	t.Helper()
	byGPU := map[string][]run{}
	byJob := map[string][]run{}
	for _, r := range rec {
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
	for id, j := range jobs {
		rs := byJob[id]
		var done []run
		for _, r := range rs {
			if r.exit == 0 && r.to.Before(time.Now()) {
				done = append(done, r)
			}
		}
		if len(done) != 1 || done[0].id != j.ContainerID {
			t.Errorf("%s (%s in %.12s on %s): its runs to the end are %s; want one, in its container", id, j.State, j.ContainerID, j.Node, fmtRuns(done))
		}
		for a := range rs {
			for b := a + 1; b < len(rs); b++ {
				p, q := rs[a], rs[b]
				if p.from.Before(q.to) && q.from.Before(p.to) && !window(p, q) && !window(q, p) {
					t.Errorf("%s ran twice at once: %s", id, fmtRuns([]run{p, q}))
				}
			}
		}
	}
}

func fmtRuns(rs []run) string {
	if len(rs) == 0 {
		return "none"
	}
	var parts []string
	for _, r := range rs {
		end := fmt.Sprintf("exit %d", r.exit)
		if r.exit == removed {
			end = "removed running"
		}
		parts = append(parts, fmt.Sprintf("%.12s on %s %v %s..%s %s", r.id, r.node, r.gpus, r.from.Format("15:04:05.000"), r.to.Format("15:04:05.000"), end))
	}
	return strings.Join(parts, "; ")
}

// noWindow allows no overlap of two runs of a job.
func noWindow(run, run) bool { return false }

// awaitAll waits until every job of ids succeeded, through a, and
// returns their records.
func awaitAll(t *testing.T, a *agent, ids []string) map[string]apitype.Job {
	t.Helper()
	jobs := map[string]apitype.Job{}
	for _, id := range ids {
		j := a.await(t, id, 3*time.Minute, "succeeded", "failed", "cancelled", "timeout")
		if j.State != "succeeded" {
			t.Errorf("%s ended %s (%s): %s", id, j.State, j.Reason, j.ReasonText)
		}
		jobs[id] = j
	}
	return jobs
}

// TestFleetNodeKilled: the agent of a node that is not the scheduler is
// killed with SIGKILL while it runs three long jobs, one of them pinned
// to its node. Once its lease may be taken over the fleet requeues them:
// the two that may go anywhere run on the other nodes, while their
// orphaned containers keep running on the dead node (nobody can stop
// them: the documented window); the pinned one waits, as its node is
// lost. When the agent comes back it reconciles first: it stops the
// orphans of the jobs that run elsewhere, and adopts the pinned job,
// whose container kept running and which the fleet had not started
// elsewhere. Every job runs to its end exactly once.
func TestFleetNodeKilled(t *testing.T) {
	f := newFleet(t, 3)
	f.start(t)
	f.upNodes(t, f.agents[0], 3)
	lead := f.leaderIndex(t)
	v := (lead + 1) % 3
	a, victim := f.agents[lead], f.hosts[v]

	// The long jobs start on the victim's node: the others are drained
	// while they are placed.
	f.drainAllBut(t, a, victim.node, true)
	long := a.h.request(1, "5m", "exit-after", "25s", "0", "done")
	pinned := long
	pinned.Node = victim.node
	pin := a.submit(t, a.h.alice, pinned)
	movers := []string{a.submit(t, a.h.bob, long).ID, a.submit(t, a.h.alice, long).ID}
	ids := append([]string{pin.ID}, movers...)
	rec := engineRecord{}
	origin := map[string]string{} // job -> its container on the victim
	dockertest.WaitFor(t, time.Minute, "the long jobs running on "+victim.node, func() (bool, string) {
		f.observe(t, rec)
		for _, id := range ids {
			cid, ok := rec.running(id, victim.node)
			if j := a.job(t, id); !ok || j.State != "running" || j.ContainerID != cid {
				return false, id + " " + j.State + " on " + j.Node
			}
			origin[id] = cid
		}
		return true, ""
	})
	f.drainAllBut(t, a, victim.node, false)

	f.agents[v].Kill(t)
	killed := time.Now()
	dockertest.WaitFor(t, time.Minute, "the movable jobs running on other nodes", func() (bool, string) {
		f.observe(t, rec)
		for _, id := range movers {
			if j := a.job(t, id); j.State != "running" || j.Node == victim.node || j.Node == "" {
				return false, id + " " + j.State + " on " + j.Node
			}
		}
		return true, ""
	})
	if s := f.nodeState(t, a, victim.node); s != "lost" {
		t.Errorf("%s is %q after its agent was killed and its jobs moved, want lost", victim.node, s)
	}
	// The orphan window: the dead agent's containers still run, the
	// movers' besides their new runs.
	for _, id := range ids {
		if cid, ok := rec.running(id, victim.node); !ok || cid != origin[id] {
			t.Errorf("%s: its container %.12s on the killed agent's node stopped; nobody could have stopped it", id, origin[id])
		}
	}
	if j := a.job(t, pin.ID); j.State != "queued" || j.Node != "" {
		t.Errorf("%s, pinned to the lost node, is %s on %q (%s: %s); want queued, placed nowhere", pin.ID, j.State, j.Node, j.Reason, j.ReasonText)
	}

	// The agent comes back and reconciles: the movers' orphans stop, the
	// pinned job is adopted in the container that kept running.
	f.agents[v] = victim.start(t)
	var back time.Time
	dockertest.WaitFor(t, time.Minute, "the orphans stopped and the pinned job adopted", func() (bool, string) {
		f.observe(t, rec)
		for _, id := range movers {
			if _, ok := rec.running(id, victim.node); ok {
				return false, id + "'s orphan still runs"
			}
		}
		j := a.job(t, pin.ID)
		back = time.Now()
		return j.State == "running", fmt.Sprintf("%s %s on %s in %.12s: %s", pin.ID, j.State, j.Node, j.ContainerID, j.ReasonText)
	})
	if j := a.job(t, pin.ID); j.Node != victim.node || j.ContainerID != origin[pin.ID] {
		t.Errorf("%s runs on %s in %.12s; want it adopted on %s in %.12s, the container that kept running", pin.ID, j.Node, j.ContainerID, victim.node, origin[pin.ID])
	}

	jobs := awaitAll(t, a, ids)
	f.observe(t, rec)
	// Two runs of one job overlap only in the window: an orphan of the
	// killed agent, started before the kill, gone once it came back.
	window := func(orphan, other run) bool {
		return orphan.node == victim.node && orphan.from.Before(killed) && !orphan.to.After(back) && other.node != victim.node
	}
	checkRuns(t, rec, jobs, window)
	for _, id := range movers {
		if j := jobs[id]; j.Node == victim.node {
			t.Errorf("%s ran to its end on %s, the node it had to leave", id, j.Node)
		}
	}
	t.Logf("killed %s (the scheduler: %s); movers ran on %s and %s; %s adopted", victim.node, f.hosts[lead].node, jobs[movers[0]].Node, jobs[movers[1]].Node, pin.ID)
}

// fenceLine is the cut-off agent's log line for each container it stops.
var fenceLine = regexp.MustCompile(`time=(\S+) .*out of the ledger's reach for \S+: the fleet may take this node for lost`)

// TestFleetPartition: one agent reaches PostgreSQL through a proxy, which
// cuts it off for longer than the lease takeover while it runs two jobs.
// For the others its node is lost: its jobs requeue and run elsewhere.
// For itself the ledger is down: before the takeover can pass it stops
// its job containers (the fence), and from the engine's record no copy
// ran past the fence plus the stop grace, nor beside the job's next run.
// Healed, it reconciles and goes on (a job pinned to it runs there), and
// no job ran to its end twice.
func TestFleetPartition(t *testing.T) {
	f := newFleet(t, 3)
	const v = 2
	proxy := f.throughProxy(t, v)
	f.start(t)
	a, victim := f.agents[0], f.hosts[v]
	f.upNodes(t, a, 3)

	f.drainAllBut(t, a, victim.node, true)
	long := a.h.request(1, "5m", "exit-after", "20s", "0", "done")
	ids := []string{a.submit(t, a.h.alice, long).ID, a.submit(t, a.h.bob, long).ID}
	rec := engineRecord{}
	dockertest.WaitFor(t, time.Minute, "the jobs running on "+victim.node, func() (bool, string) {
		f.observe(t, rec)
		for _, id := range ids {
			if j := a.job(t, id); j.State != "running" || j.Node != victim.node {
				return false, id + " " + j.State + " on " + j.Node
			}
			if _, ok := rec.running(id, victim.node); !ok {
				return false, id + " has no running container"
			}
		}
		return true, ""
	})
	f.drainAllBut(t, a, victim.node, false)

	proxy.Partition()
	cut := time.Now()
	dockertest.WaitFor(t, time.Minute, "the jobs running elsewhere and the cut-off node's copies stopped", func() (bool, string) {
		f.observe(t, rec)
		for _, id := range ids {
			if j := a.job(t, id); j.State != "running" || j.Node == victim.node {
				return false, id + " " + j.State + " on " + j.Node
			}
			if _, ok := rec.running(id, victim.node); ok {
				return false, id + " still runs on " + victim.node
			}
		}
		return true, ""
	})
	var fences []time.Time
	for _, m := range fenceLine.FindAllStringSubmatch(f.agents[v].Stderr.String(), -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("the fence's log line has the time %q: %v", m[1], err)
		}
		fences = append(fences, at)
	}
	if len(fences) == 0 {
		t.Fatalf("the cut-off agent logged no fence; stderr:\n%s", f.agents[v].Stderr)
	}
	fence := slices.MaxFunc(fences, time.Time.Compare)
	for _, r := range rec {
		if r.node != victim.node || !slices.Contains(ids, r.job) {
			continue
		}
		if r.exit == removed || r.to.After(fence.Add(stopGrace)) {
			t.Errorf("%s's copy on the cut-off node ran until %s (%s), past the fence at %s plus the stop grace",
				r.job, r.to.Format("15:04:05.000"), fmtRuns([]run{r}), fence.Format("15:04:05.000"))
		}
		for _, o := range rec {
			if o.job == r.job && o.node != victim.node && !o.from.IsZero() {
				t.Logf("%s: cut at %s, fenced at %s; its copy on %s ended %s, the next started on %s at %s (%+.3fs)", r.job,
					cut.Format("15:04:05.000"), fence.Format("15:04:05.000"), r.node, r.to.Format("15:04:05.000"), o.node, o.from.Format("15:04:05.000"), r.to.Sub(o.from).Seconds())
			}
		}
	}

	proxy.Heal()
	dockertest.WaitFor(t, time.Minute, victim.node+" up again", func() (bool, string) {
		s := f.nodeState(t, a, victim.node)
		return s == "up", s
	})
	after := a.h.request(1, "5m", "exit-after", "1s", "0", "done")
	after.Node = victim.node
	next := a.submit(t, a.h.alice, after)
	jobs := awaitAll(t, a, append(ids, next.ID))
	if j := jobs[next.ID]; j.Node != victim.node {
		t.Errorf("%s, pinned to %s, ran on %q", next.ID, victim.node, j.Node)
	}
	select {
	case <-f.agents[v].Exited:
		t.Errorf("the cut-off agent exited: %v; stderr:\n%s", f.agents[v].Err(), f.agents[v].Stderr)
	default:
	}
	f.observe(t, rec)
	// The fence ends the cut-off copies before the others may take the
	// node for lost: no two copies of a job ran at once.
	checkRuns(t, rec, jobs, noWindow)
}

// TestFleetPostgresRestart: PostgreSQL is restarted while the fleet runs
// jobs and more wait for GPUs. The agents ride it out: the jobs that
// ended meanwhile are recorded, the queued ones start, none is left
// starting, and none ran twice.
func TestFleetPostgresRestart(t *testing.T) {
	f := newFleet(t, 3)
	f.start(t)
	a := f.agents[0]
	f.upNodes(t, a, 3)
	var ids []string
	for i := range 8 { // 16 GPUs asked of 12: some wait
		token := a.h.alice
		if i%2 == 1 {
			token = a.h.bob
		}
		ids = append(ids, a.submit(t, token, a.h.request(2, "5m", "exit-after", "3s", "0", "done")).ID)
	}
	rec := engineRecord{}
	dockertest.WaitFor(t, time.Minute, "jobs running", func() (bool, string) {
		f.observe(t, rec)
		n := 0
		for _, r := range rec {
			if r.to.After(time.Now()) && !r.from.IsZero() {
				n++
			}
		}
		return n > 0, "none yet"
	})
	pgtest.Restart(t)
	t.Logf("PostgreSQL restarted at %s", time.Now().Format("15:04:05.000"))
	// Submitted through another agent once it is back: a request that
	// meets one of the pool's connections the restart ended is refused
	// with 503 ledger_unavailable, and a client tries again.
	b := f.agents[1]
	dockertest.WaitFor(t, time.Minute, "a submission taken after the restart", func() (bool, string) {
		status, body := b.call(t, http.MethodPost, "/api/v1/jobs", b.h.bob, b.h.request(1, "5m", "exit-after", "1s", "0", "done"))
		var j apitype.Job
		if status != http.StatusCreated && status != http.StatusOK || json.Unmarshal(body, &j) != nil || j.ID == "" {
			return false, fmt.Sprintf("%d %s", status, body)
		}
		ids = append(ids, j.ID)
		return true, ""
	})
	jobs := awaitAll(t, b, ids)
	for i, ag := range f.agents {
		select {
		case <-ag.Exited:
			t.Errorf("agent %d exited after the restart: %v; stderr:\n%s", i, ag.Err(), ag.Stderr)
		default:
		}
	}
	f.observe(t, rec)
	checkRuns(t, rec, jobs, noWindow)
	extra := 0
	for _, r := range rec {
		if jobs[r.job].ContainerID != r.id {
			extra++
		}
	}
	t.Logf("%d jobs, %d containers besides theirs", len(jobs), extra)
}

// TestFleetFairShareAndReports: bob has held every GPU of the fleet by
// hand (a container outside the queue that all three nodes see), alice
// none. Bob submits three 4-GPU jobs through one agent, then alice three
// through another; when bob's container goes, alice's jobs all start
// before any of bob's, whichever agent took them: one queue, in fair
// share's order. Then the reports of the one ledger, by node, by user
// and by job, add up to the same totals, and book each job once.
func TestFleetFairShareAndReports(t *testing.T) {
	// A user may hold every GPU of the fleet: the fair share orders, no
	// cap (4 GPUs a user by default, over the fleet).
	f := newFleetWith(t, 3, "  labels: [\"gpumeter.sim.*\"]\n  fair_share:\n    refresh: 1s\n  max_gpus_per_user: {default: 12}\n")
	f.start(t)
	a, b := f.agents[0], f.agents[1]
	f.upNodes(t, a, 3)
	outside, _ := dockertest.Container(t, a.h.cli, dockertest.Spec{
		Name:   "bob-by-hand-" + a.h.node,
		Labels: map[string]string{"gpumeter.user": "bob", "gpumeter.sim.util": "90", "gpumeter.sim.memory": "10GiB"},
		Env:    []string{"NVIDIA_VISIBLE_DEVICES=all"},
		Cmd:    []string{"exit-after", "10m", "0"},
	})
	// Bob's lead must outlast alice's jobs: twice the GPU time all of
	// them take.
	const run = 3 * time.Second
	lead := 2 * 3 * 4 * run.Hours()
	dockertest.WaitFor(t, time.Minute, "bob's use in the fair-share factors", func() (bool, string) {
		fs := a.fairShare(t, a.h.admin)
		r, ok := fairRow(fs, "bob")
		return ok && r.UsageGPUHours > lead && r.Factor < 1, fmt.Sprint(fs.Users)
	})
	job := func(h *host) apitype.JobRequest { return h.request(4, "5m", "exit-after", run.String(), "0", "done") }
	var bobs, alices []string
	for range 3 {
		bobs = append(bobs, a.submit(t, a.h.bob, job(a.h)).ID)
	}
	for range 3 {
		alices = append(alices, b.submit(t, b.h.alice, job(b.h)).ID)
	}
	// The scheduler's ranking, as its agent shows it.
	leader := f.agents[f.leaderIndex(t)]
	dockertest.WaitFor(t, 15*time.Second, "alice's jobs ranked ahead of bob's", func() (bool, string) {
		aj, bj := leader.job(t, alices[2]), leader.job(t, bobs[0])
		return aj.Priority != nil && bj.Priority != nil && *aj.Priority > *bj.Priority, fmtRank(aj) + "; " + fmtRank(bj)
	})
	dockertest.Remove(t, a.h.cli, outside)
	jobs := awaitAll(t, a, append(slices.Clone(alices), bobs...))
	var lastAlice, firstBob time.Time
	for _, id := range alices {
		if s := *jobs[id].StartedAt; s.After(lastAlice) {
			lastAlice = s
		}
	}
	for _, id := range bobs {
		if s := *jobs[id].StartedAt; firstBob.IsZero() || s.Before(firstBob) {
			firstBob = s
		}
	}
	if !lastAlice.Before(firstBob) {
		for _, id := range append(slices.Clone(alices), bobs...) {
			t.Logf("%s %s started %s on %s", id, jobs[id].User, jobs[id].StartedAt.Format("15:04:05.000"), jobs[id].Node)
		}
		t.Errorf("bob's first job started at %s, before alice's last at %s: fair share did not order the fleet as one queue",
			firstBob.Format("15:04:05.000"), lastAlice.Format("15:04:05.000"))
	}
	rec := engineRecord{}
	f.observe(t, rec)
	checkRuns(t, rec, jobs, noWindow)

	// The agents' last flushes first: then the ledger holds all.
	for _, ag := range f.agents {
		ag.Stop(t)
	}
	rep := map[string]report.Report{}
	for _, by := range []string{report.ByNode, report.ByUser, report.ByJob} {
		out, errOut, code := harness.RunCLI(t, nil, "report", "--dsn", f.dsn, "--since", "1h", "--by", by, "--format", "json")
		var r report.Report
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("gpumeter report --by %s: exit %d: %s%s", by, code, out, errOut)
		}
		rep[by] = r
	}
	if g := rep[report.ByNode].Host.GPUs; g != 12 {
		t.Errorf("the fleet's report counts %d GPUs, want 12: three nodes of four", g)
	}
	sum := func(r report.Report) float64 {
		s := 0.0
		for _, row := range r.Rows {
			s += row.GPUHoursAllocated
		}
		return s
	}
	total := sum(rep[report.ByNode])
	for by, r := range rep {
		if s := sum(r); math.Abs(s-total) > 1e-9 || math.Abs(r.Totals.GPUHoursAllocated-total) > 1e-9 {
			t.Errorf("report --by %s: rows add up to %.9f GPU-hours, totals %.9f; --by node adds up to %.9f", by, s, r.Totals.GPUHoursAllocated, total)
		}
	}
	var nodes []string
	for _, row := range rep[report.ByNode].Rows {
		nodes = append(nodes, row.Key)
	}
	for _, h := range f.hosts {
		if !slices.Contains(nodes, h.node) {
			t.Errorf("report --by node has the rows %v, none for %s", nodes, h.node)
		}
	}
	// Each job is one row of its node, booked as long as its container
	// ran, on its four GPUs: within a few samples, never twice over.
	byJob := map[string][]report.Row{}
	for _, row := range rep[report.ByJob].Rows {
		_, id, _ := strings.Cut(row.Key, "/")
		byJob[id] = append(byJob[id], row)
	}
	for id, j := range jobs {
		rows := byJob[id]
		if len(rows) != 1 || rows[0].Key != j.Node+"/"+id {
			t.Errorf("report --by job books %s in %d rows (%v), want one, %s/%s", id, len(rows), rows, j.Node, id)
			continue
		}
		ran := rec[j.ContainerID].to.Sub(rec[j.ContainerID].from).Hours() * 4
		if got := rows[0].GPUHoursAllocated; math.Abs(got-ran) > 4*time.Second.Hours() {
			t.Errorf("report --by job books %s %.6f GPU-hours; its container ran %.6f on four GPUs", id, got, ran)
		}
	}
	var users float64
	for _, row := range rep[report.ByUser].Rows {
		t.Logf("by user: %s %.6f GPU-hours", row.Key, row.GPUHoursAllocated)
		users += row.GPUHoursAllocated
	}
	t.Logf("by node %v: %.6f GPU-hours; by user %.6f", nodes, total, users)
}
