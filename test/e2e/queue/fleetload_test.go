package queue

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	mcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestFleetLoad is the fleet's runtime figures of BENCHMARKS.md ("Fleet
// runtime"), through the binary: three agents on one PostgreSQL, four
// simulated GPUs each, real job containers. Like TestQueueLoad it runs
// only when scripts/fleet-load.sh (GPUMETER_LOAD=1, as for every load
// run) asks, logs its figures on lines starting FIGURE and fails only
// where the fleet misbehaves.
func TestFleetLoad(t *testing.T) {
	if os.Getenv("GPUMETER_LOAD") != "1" {
		t.Skip("a load run: scripts/fleet-load.sh runs it (GPUMETER_LOAD=1)")
	}
	n := envInt(t, "SUBMITS", 1000)
	conc := envInt(t, "CONCURRENCY", 16)
	// The single node on SQLite first, then the fleet, in the same run.
	t.Run("single node submit", func(t *testing.T) {
		figure(t, "single node (SQLite) submit: %s", singleSubmitLoad(t, n, conc))
	})
	t.Run("single node release", func(t *testing.T) {
		// The same releases on one host of four GPUs, for the engine's and
		// one agent's share of the fleet's figure.
		h := newHost(t, "  max_gpus_per_user: {default: 16}\n")
		one := &fleet{hosts: []*host{h}, agents: []*agent{h.start(t)}}
		one.releaseToStart(t, "single node (SQLite):", h.node, envInt(t, "RELEASES", 48)/3)
	})
	t.Run("fleet", func(t *testing.T) {
		f := newFleetWith(t, 3, "  max_gpus_per_user: {default: 16}\n")
		dir := os.Getenv("FLEET_LOAD_LOGS")
		for _, h := range f.hosts {
			if dir == "" {
				break // at the single node's log level, for a fair comparison
			}
			b, err := os.ReadFile(h.config)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(h.config, append([]byte("log_level: debug\n"), b...), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		f.start(t)
		if dir != "" {
			// The agents' logs, at debug, for the figures' causes.
			t.Cleanup(func() {
				for _, h := range f.hosts {
					_ = os.WriteFile(filepath.Join(dir, h.node+".log"), []byte(h.agent.Stderr.String()), 0o644)
				}
			})
		}
		f.awaitUp(t)
		dockerStart(t, f.hosts[0])
		f.releaseToStart(t, "fleet (3 nodes):", f.leader(t), envInt(t, "RELEASES", 48))
		f.failover(t, envInt(t, "FAILOVERS", 3))
		f.passCost(t, "after the releases and failovers")
		f.submitLoad(t, n, conc)
		f.passCost(t, fmt.Sprintf("with the %d submissions waiting", n))
	})
}

// figure logs one of the run's figures with the machine's load.
func figure(t *testing.T, format string, args ...any) {
	t.Helper()
	load, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(load))
	if len(f) > 3 {
		f = f[:3]
	}
	t.Logf("FIGURE "+format+" (load %s)", append(args, strings.Join(f, " "))...)
}

// awaitUp waits until every node of the fleet is up with its four GPUs.
func (f *fleet) awaitUp(t *testing.T) {
	t.Helper()
	dockertest.WaitFor(t, time.Minute, "every node up", func() (bool, string) {
		ns := f.nodes(t, f.agents[0])
		up := 0
		for _, n := range ns.Nodes {
			if n.State == "up" && len(n.GPUs) == 4 {
				up++
			}
		}
		return up == len(f.hosts), fmt.Sprint(ns)
	})
}

// dockerStart times Docker's own create and start of the sleeper, alone:
// what every job start on this engine costs whatever the queue does.
func dockerStart(t *testing.T, h *host) {
	t.Helper()
	var lat []time.Duration
	for i := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t0 := time.Now()
		res, err := h.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Name:   fmt.Sprintf("gpumeter-test-fleetload-%s-%d", h.node, i),
			Config: &mcontainer.Config{Image: h.image, Cmd: []string{"exit-after", "0s", "0"}},
		})
		if err == nil {
			_, err = h.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{})
		}
		lat = append(lat, time.Since(t0))
		cancel()
		if err != nil {
			t.Fatalf("docker create+start of the sleeper: %v", err)
		}
		dockertest.Remove(t, h.cli, res.ID)
	}
	slices.Sort(lat)
	figure(t, "docker create+start of the sleeper alone, 10 runs: p50 %s, p90 %s", ms(lat[5]), ms(lat[9]))
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// pq is the q-th percentile of sorted d.
func pq(d []time.Duration, q int) time.Duration { return d[min(len(d)-1, len(d)*q/100)] }

// releaseToStart: every GPU of f busy with one-GPU jobs of four to seven
// seconds (staggered, so that deaths rarely meet and each start is mostly
// alone at the engine) and a queue behind them; each death frees one GPU
// of its node, which only the next job can take. The latency is the
// engine's: from a container's FinishedAt to the StartedAt of the next
// container on the same GPU of the same node. A death on a node other
// than the scheduler's (leader) crosses the fleet twice: its agent writes
// the end (a NOTIFY), the scheduler's agent passes and writes the intent
// (a NOTIFY), the node's agent claims and starts it.
func (f *fleet) releaseToStart(t *testing.T, what, leader string, releases int) {
	t.Helper()
	a := f.agents[0]
	gpus := 4 * len(f.hosts)
	ids := make([]string, releases+gpus)
	for i := range ids {
		tok := a.h.alice
		if i%2 == 1 {
			tok = a.h.bob
		}
		d := 4*time.Second + time.Duration(i*373%3000)*time.Millisecond
		ids[i] = a.submit(t, tok, a.h.request(1, "5m", "exit-after", d.String(), "0")).ID
	}
	for _, id := range ids {
		if j := a.await(t, id, 3*time.Minute, "succeeded", "failed", "cancelled", "timeout"); j.State != "succeeded" {
			t.Fatalf("%s: %s %s", id, j.State, j.ReasonText)
		}
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	byGPU := map[string][]run{}
	for _, r := range f.runs(t) {
		if want[r.job] && !r.from.IsZero() && len(r.gpus) == 1 {
			byGPU[r.node+"/"+r.gpus[0]] = append(byGPU[r.node+"/"+r.gpus[0]], r)
		}
	}
	// Per release: death to start, death to the next container's
	// creation (the agents' share, with Docker's create), and creation to
	// start (Docker's start, with the mount check between).
	type lats struct{ total, toCreate, start []time.Duration }
	var cross, local lats
	for _, rs := range byGPU {
		slices.SortFunc(rs, func(p, q run) int { return p.from.Compare(q.from) })
		for i := 1; i < len(rs); i++ {
			l := &cross
			if rs[i].node == leader {
				l = &local
			}
			l.total = append(l.total, rs[i].from.Sub(rs[i-1].to))
			l.toCreate = append(l.toCreate, rs[i].created.Sub(rs[i-1].to))
			l.start = append(l.start, rs[i].from.Sub(rs[i].created))
		}
	}
	for _, c := range []struct {
		where string
		l     lats
	}{{"on a node other than the scheduler's (death, pass and start on two agents)", cross}, {"on the scheduler's own node", local}} {
		if len(c.l.total) == 0 {
			continue
		}
		for _, d := range [][]time.Duration{c.l.total, c.l.toCreate, c.l.start} {
			slices.Sort(d)
		}
		figure(t, "%s release to start %s: %d releases: p50 %s, p90 %s, max %s; death to create p50 %s, p90 %s; create to start p50 %s, p90 %s",
			what, c.where, len(c.l.total), ms(pq(c.l.total, 50)), ms(pq(c.l.total, 90)), ms(c.l.total[len(c.l.total)-1]),
			ms(pq(c.l.toCreate, 50)), ms(pq(c.l.toCreate, 90)), ms(pq(c.l.start, 50)), ms(pq(c.l.start, 90)))
	}
	// The agents' own start traces: the engine's calls among the steps.
	for _, ag := range f.agents {
		m := ag.Scrape(t)
		var parts []string
		for _, step := range []string{"die_to_pass", "pass_to_intent", "intent_to_create", "create_to_check", "start_call"} {
			sum, n := stepSum(m, step)
			if n > 0 {
				parts = append(parts, fmt.Sprintf("%s %.0f ms", step, 1000*sum/n))
			}
		}
		figure(t, "%s start trace of %s (mean per start, since the agent started): %s", what, ag.h.node, strings.Join(parts, ", "))
	}
}

// stepSum is the sum and count of one step of the agent's start trace.
func stepSum(m harness.Metrics, step string) (sum, n float64) {
	for k, v := range m {
		if !strings.Contains(k, `step="`+step+`"`) {
			continue
		}
		switch {
		case strings.HasPrefix(k, "gpumeter_queue_start_step_seconds_sum{"):
			sum += v
		case strings.HasPrefix(k, "gpumeter_queue_start_step_seconds_count{"):
			n += v
		}
	}
	return sum, n
}

// failover kills the scheduler's agent with SIGKILL while jobs wait,
// rounds times, and times from the kill to the next container start of a
// job that a later scheduler placed (an intent under a newer token; a
// start of an intent the dead one wrote does not count), and to the
// takeover of the lease. The killed agent comes back before the next
// round.
func (f *fleet) failover(t *testing.T, rounds int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var toStart, toTakeover []time.Duration
	for round := range rounds {
		k := slices.IndexFunc(f.hosts, func(h *host) bool { return h.node == f.leader(t) })
		live := f.agents[(k+1)%len(f.agents)]
		// A queue of six-second jobs that outlasts the round.
		for i := range 40 {
			tok := live.h.alice
			if i%2 == 1 {
				tok = live.h.bob
			}
			live.submit(t, tok, live.h.request(1, "5m", "exit-after", "6s", "0"))
		}
		f.awaitBusy(t, live)
		var token, heartbeat int64
		if err := conn.QueryRow(ctx, `SELECT token, heartbeat_us FROM scheduler_lease`).Scan(&token, &heartbeat); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		f.agents[k].Kill(t)
		// Poll the intents for the first written under a newer token:
		// an intent lives until its job ends, six seconds at least.
		var placed []string
		var acquired int64
		dockertest.WaitFor(t, time.Minute, "a start under a new scheduler", func() (bool, string) {
			rows, err := conn.Query(ctx, `SELECT j.id FROM job_intents i JOIN jobs j ON j.seq = i.job_seq WHERE i.token > $1`, token)
			if err != nil {
				return false, err.Error()
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return false, err.Error()
			}
			placed = ids
			return len(ids) > 0, "no intent yet"
		})
		if err := conn.QueryRow(ctx, `SELECT acquired_us FROM scheduler_lease WHERE token > $1`, token).Scan(&acquired); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // the claims of the first pass
		first := time.Time{}
		// A job placed anew may have run before the kill: a job of the
		// killed node, lost and requeued. Only runs after the kill count.
		for _, r := range f.runs(t) {
			if slices.Contains(placed, r.job) && r.from.After(killed) && (first.IsZero() || r.from.Before(first)) {
				first = r.from
			}
		}
		if first.IsZero() {
			// Claimed, not started yet: wait for it.
			dockertest.WaitFor(t, 30*time.Second, "the new scheduler's first start", func() (bool, string) {
				for _, r := range f.runs(t) {
					if slices.Contains(placed, r.job) && r.from.After(killed) {
						first = r.from
						return true, ""
					}
				}
				return false, "none started"
			})
		}
		toStart = append(toStart, first.Sub(killed))
		toTakeover = append(toTakeover, time.UnixMicro(acquired).Sub(killed))
		figure(t, "failover %d: killed the scheduler on %s, its lease last renewed %s before; lease taken over after %s (%s after that renewal), next start after %s",
			round+1, f.hosts[k].node, ms(killed.Sub(time.UnixMicro(heartbeat))), ms(toTakeover[round]), ms(time.UnixMicro(acquired).Sub(time.UnixMicro(heartbeat))), ms(toStart[round]))
		// The node's own lease must lapse before its agent may start again.
		dockertest.WaitFor(t, time.Minute, "the killed agent's node lost", func() (bool, string) {
			for _, n := range f.nodes(t, live).Nodes {
				if n.Node == f.hosts[k].node {
					return n.State == "lost", n.State
				}
			}
			return false, "not listed"
		})
		f.agents[k] = f.hosts[k].start(t)
		f.awaitUp(t)
	}
	slices.Sort(toStart)
	slices.Sort(toTakeover)
	figure(t, "failover over %d kills (ledger.lease_takeover %s): kill to takeover %s..%s, kill to next start %s..%s",
		rounds, fleetTakeover, ms(toTakeover[0]), ms(toTakeover[rounds-1]), ms(toStart[0]), ms(toStart[rounds-1]))
	// Let the queue drain, so the submissions wait behind long jobs only.
	a := f.agents[0]
	dockertest.WaitFor(t, 3*time.Minute, "the queue empty", func() (bool, string) {
		n := len(a.list(t, a.h.admin, "state=queued&all_users=1")) + len(a.list(t, a.h.admin, "state=running&all_users=1")) + len(a.list(t, a.h.admin, "state=starting&all_users=1"))
		return n == 0, fmt.Sprint(n, " active")
	})
}

// awaitBusy waits until all but two of the fleet's GPUs run jobs; if
// they never do, it says why the first waiting job waits, and has every
// agent print its goroutines (SIGQUIT) into its log before failing.
func (f *fleet) awaitBusy(t *testing.T, live *agent) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		n := len(live.list(t, live.h.admin, "state=running&all_users=1"))
		if n >= 4*len(f.hosts)-2 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	starting := live.list(t, live.h.admin, "state=starting&all_users=1")
	queued := live.list(t, live.h.admin, "state=queued&all_users=1")
	why := ""
	for _, id := range append(starting, queued...)[:min(3, len(starting)+len(queued))] {
		j := live.job(t, id)
		why += fmt.Sprintf("; %s %s on %q: %s %s", j.ID, j.State, j.Node, j.Reason, j.ReasonText)
	}
	for _, a := range f.agents {
		_ = a.Cmd.Process.Signal(syscall.SIGQUIT)
	}
	time.Sleep(2 * time.Second)
	t.Fatalf("the fleet never got busy: %d starting, %d queued%s", len(starting), len(queued), why)
}

// passCost is the scheduler's mean pass time, from the summary on its
// agent's /metrics, and how many nodes it saw.
func (f *fleet) passCost(t *testing.T, when string) {
	t.Helper()
	leader := f.leader(t)
	for _, a := range f.agents {
		if a.h.node != leader {
			continue
		}
		m := a.Scrape(t)
		sum, n := m.Sum("gpumeter_fleet_pass_seconds_sum"), m.Sum("gpumeter_fleet_pass_seconds_count")
		if n > 0 {
			figure(t, "fleet pass on the scheduler %s %s: %.0f passes since it took the lease, mean %.2f ms", leader, when, n, 1000*sum/n)
		}
	}
}

// submitLoad: the fleet's twelve GPUs held by long jobs, then n
// submissions through one agent's API.
func (f *fleet) submitLoad(t *testing.T, n, conc int) {
	t.Helper()
	a := f.agents[0]
	for range 4 * len(f.hosts) {
		a.submit(t, a.h.bob, a.h.request(1, "1h", long...))
	}
	dockertest.WaitFor(t, time.Minute, "every GPU held", func() (bool, string) {
		got := len(a.list(t, a.h.admin, "state=running&all_users=1"))
		return got == 4*len(f.hosts), fmt.Sprint(got, " running")
	})
	figure(t, "fleet (PostgreSQL, 3 agents) submit through %s: %s", a.h.node, submitLoad(t, a, n, conc))
}
