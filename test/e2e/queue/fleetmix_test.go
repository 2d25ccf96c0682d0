package queue

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/dockertest"
)

// TestFleetLoadMix is the fleet issue's run of 300 jobs, a load run
// (GPUMETER_LOAD=1, as scripts/fleet-load.sh sets) for its length: three
// agents on one PostgreSQL, four simulated GPUs each (the third node's
// GPU 3 shared for memory jobs); jobs of three users submitted through all
// three agents: one-, two- and four-GPU jobs, memory jobs, an array of 17
// tasks at most 3 at once, and a chain of three, with the scheduler
// killed with SIGKILL a third of the way in and started again once its
// node is lost. It asserts, from the job records and the engine's own:
// every job succeeded, once, in the container its record names; no two
// containers held one GPU of one node whole at once; the array never ran
// more than 3 tasks at once; the chain ran in order.
func TestFleetLoadMix(t *testing.T) {
	if os.Getenv("GPUMETER_LOAD") != "1" {
		t.Skip("a load run: GPUMETER_LOAD=1 go test -run TestFleetLoadMix ./test/e2e/queue/")
	}
	f := newFleetWith(t, 3, "  max_gpus_per_user: {default: 12}\n")
	shared := f.hosts[2]
	b, err := os.ReadFile(shared.config)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "ledger:\n", "  shared_gpus: [\"3\"]\nledger:\n", 1)
	if err := os.WriteFile(shared.config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	f.awaitUp(t)
	rec := engineRecord{}
	users := []func(a *agent) string{func(a *agent) string { return a.h.alice }, func(a *agent) string { return a.h.bob },
		func(a *agent) string { return a.h.carol }}
	var ids []string
	memory := map[string]bool{}
	n := 0
	dead := -1 // the agent killed, while it is down
	submit := func(req apitype.JobRequest) apitype.Job {
		if n%3 == dead {
			n++
		}
		a := f.agents[n%3]
		j := a.submit(t, users[n/3%3](a), req)
		n++
		ids = append(ids, j.ID)
		return j
	}
	job := func(gpus int, d time.Duration) apitype.JobRequest {
		return f.agents[0].h.request(gpus, "5m", "exit-after", d.String(), "0")
	}
	var killedAt time.Time
	var chain []string
	var array string
	for i := range 280 {
		switch {
		case i%27 == 0:
			m := job(0, 700*time.Millisecond)
			m.GPUMemory = "10GiB"
			memory[submit(m).ID] = true
		case i%9 == 0:
			submit(job(4, 500*time.Millisecond))
		case i%4 == 0:
			submit(job(2, 600*time.Millisecond))
		default:
			submit(job(1, time.Duration(300+i%5*100)*time.Millisecond))
		}
		if i == 90 {
			dead = f.leaderIndex(t)
			f.agents[dead].Kill(t)
			killedAt = time.Now()
			t.Logf("killed the scheduler, %s, after %d submissions", f.hosts[dead].node, len(ids))
		}
		if i == 180 {
			// Back once its node is lost: it reconciles and takes jobs.
			node := f.hosts[dead].node
			dockertest.WaitFor(t, time.Minute, node+" lost", func() (bool, string) {
				for _, nd := range f.nodes(t, f.agents[(dead+1)%3]).Nodes {
					if nd.Node == node {
						return nd.State == "lost", nd.State
					}
				}
				return false, "not listed"
			})
			f.agents[dead] = f.hosts[dead].start(t)
			dead = -1
		}
		if i%30 == 0 {
			f.observe(t, rec)
		}
	}
	arr := job(1, 400*time.Millisecond)
	arr.Array = "0-16%3"
	status, body := f.agents[0].call(t, http.MethodPost, "/api/v1/jobs", f.agents[0].h.alice, arr)
	var aj apitype.ArrayJob
	if err := json.Unmarshal(body, &aj); status != http.StatusOK || err != nil || len(aj.Tasks) != 17 {
		t.Fatalf("submit the array 0-16%%3: %d %s", status, body)
	}
	array = aj.ID
	for _, task := range aj.Tasks {
		ids = append(ids, task.ID)
	}
	prev := ""
	for range 3 {
		c := job(1, 300*time.Millisecond)
		if prev != "" {
			c.After = []apitype.Dependency{{Type: "ok", ID: prev}}
		}
		// The chain is one user's: a job waits only for its user's own.
		prev = f.agents[0].submit(t, f.agents[0].h.alice, c).ID
		ids = append(ids, prev)
		chain = append(chain, prev)
	}
	t.Logf("%d jobs submitted (%d memory jobs, an array of 17, a chain of 3)", len(ids), len(memory))

	live := f.agents[0]
	jobs := map[string]apitype.Job{}
	deadline := time.Now().Add(10 * time.Minute)
	for _, id := range ids {
		for {
			f.observe(t, rec)
			j := live.job(t, id)
			if j.State == "succeeded" || j.State == "failed" || j.State == "cancelled" || j.State == "timeout" {
				jobs[id] = j
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still %s after 10 minutes: %s", id, j.State, j.ReasonText)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	f.observe(t, rec)
	failed := 0
	for id, j := range jobs {
		if j.State != "succeeded" {
			failed++
			t.Errorf("%s ended %s (%s): %s", id, j.State, j.Reason, j.ReasonText)
		}
	}
	// Memory jobs share their GPU by design: the whole-GPU check leaves
	// their runs out of the GPUs, and keeps them for the runs of each job.
	whole := engineRecord{}
	for id, r := range rec {
		if memory[r.job] {
			r.gpus = nil
		}
		whole[id] = r
	}
	checkRuns(t, whole, jobs, func(a, b run) bool {
		// A killed agent's orphans run until it is back.
		return a.from.Before(killedAt.Add(time.Second))
	})
	var tasks []run
	for _, r := range rec {
		if strings.HasPrefix(r.job, array+"_") && !r.from.IsZero() {
			tasks = append(tasks, r)
		}
	}
	for _, r := range tasks {
		at := 0
		for _, q := range tasks {
			if !q.from.After(r.from) && q.to.After(r.from) {
				at++
			}
		}
		if at > 3 {
			t.Errorf("%d tasks of %s ran at once when %s started, over its cap of 3", at, array, r.job)
		}
	}
	for i := 1; i < len(chain); i++ {
		a, b := jobs[chain[i-1]], jobs[chain[i]]
		if b.StartedAt == nil || a.EndedAt == nil || b.StartedAt.Before(*a.EndedAt) {
			t.Errorf("%s waits for %s, and started %v, before it ended %v", b.ID, a.ID, b.StartedAt, a.EndedAt)
		}
	}
	perNode := map[string]int{}
	for _, j := range jobs {
		perNode[j.Node]++
	}
	t.Logf("%d jobs ended, %d not succeeded; per node %v; the engine showed %d containers", len(jobs), failed, perNode, len(rec))
}
