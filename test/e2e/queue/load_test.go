package queue

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

// The load figures of BENCHMARKS.md, through the binary. They take a
// minute or more, so they run only when scripts/queue-load.sh (or
// GPUMETER_LOAD=1, as for every load run, or E2E_QUEUE_LOAD=1) asks;
// the figures are logged, and the test fails only where the queue
// misbehaves (a lost submission, a job that never starts), not where a
// figure misses its target.
func TestQueueLoad(t *testing.T) {
	if os.Getenv("GPUMETER_LOAD") != "1" && os.Getenv("E2E_QUEUE_LOAD") != "1" {
		t.Skip("a load run: scripts/queue-load.sh runs it (GPUMETER_LOAD=1)")
	}
	t.Run("submit", testSubmitLoad)
	t.Run("release to start", testReleaseToStart)
}

// envInt reads a positive whole number from the environment.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a whole number above 0", name, s)
	}
	return n
}

// testSubmitLoad: N submissions over TCP from C concurrent clients, into
// SQLite with api.rate_limit 0, while four long jobs hold every GPU, so
// that each waits (and each submission wakes a scheduling pass over all
// of them, as on a busy host).
func testSubmitLoad(t *testing.T) {
	t.Logf("FIGURE submit: %s", singleSubmitLoad(t, envInt(t, "SUBMITS", 2000), envInt(t, "CONCURRENCY", 16)))
}

// singleSubmitLoad is submitLoad on a host of its own whose four GPUs
// long jobs hold.
func singleSubmitLoad(t *testing.T, n, conc int) string {
	h := newHost(t, "  max_gpus_per_user: {default: 8}\n")
	a := h.start(t)
	for range 4 {
		j := a.submit(t, h.bob, h.request(1, "1h", long...))
		a.await(t, j.ID, 30*time.Second, "running")
	}
	return submitLoad(t, a, n, conc)
}

// testReleaseToStart: 4 GPUs, RELEASES+4 one-GPU jobs of about a second
// each; each job after the first four starts when one before it ends.
// The latency is the job JSON's: the next job's started_at less the
// ended_at of the job whose GPU it took.
func testReleaseToStart(t *testing.T) {
	n := envInt(t, "RELEASES", 34)
	h := newHost(t, "  max_gpus_per_user: {default: 8}\n")
	a := h.start(t)
	ids := make([]string, n+4)
	for i := range ids {
		ids[i] = a.submit(t, h.alice, h.request(1, "5m", "exit-after", "1s", "0")).ID
	}
	jobs := make([]apitype.Job, len(ids))
	for i, id := range ids {
		jobs[i] = a.await(t, id, 2*time.Minute, "succeeded", "failed", "timeout", "cancelled")
		if jobs[i].State != "succeeded" || jobs[i].StartedAt == nil || jobs[i].EndedAt == nil || len(jobs[i].GPUs) != 1 {
			t.Fatalf("%s: %s %s, gpus %v", id, jobs[i].State, jobs[i].ReasonText, jobs[i].GPUs)
		}
	}
	// Each start after the first four follows the latest end on its GPU
	// before it.
	var lat []time.Duration
	for i := 4; i < len(jobs); i++ {
		var prev *apitype.Job
		for k := range i {
			p := &jobs[k]
			if p.GPUs[0] == jobs[i].GPUs[0] && !p.EndedAt.After(*jobs[i].StartedAt) && (prev == nil || p.EndedAt.After(*prev.EndedAt)) {
				prev = p
			}
		}
		if prev == nil {
			t.Fatalf("%s started on %s before any job there ended", jobs[i].ID, jobs[i].GPUs[0])
		}
		lat = append(lat, jobs[i].StartedAt.Sub(*prev.EndedAt))
	}
	slices.Sort(lat)
	p := func(q int) time.Duration { return lat[min(len(lat)-1, len(lat)*q/100)].Round(time.Millisecond) }
	t.Logf("FIGURE release to start: %d releases: p50 %s, p90 %s, p99 %s, max %s", len(lat), p(50), p(90), p(99), lat[len(lat)-1].Round(time.Millisecond))
}

// submitLoad posts n jobs from conc clients to a, each with one request
// in flight, and says how fast; every job must wait.
func submitLoad(t *testing.T, a *agent, n, conc int) string {
	t.Helper()
	h := a.h
	http.DefaultTransport.(*http.Transport).MaxIdleConnsPerHost = conc
	var next, failed atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	begin := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				status, body := a.call(t, http.MethodPost, "/api/v1/jobs", h.alice, h.request(1, "1h", long...))
				lat[i] = time.Since(t0)
				if status != http.StatusOK && status != http.StatusCreated {
					if failed.Add(1) == 1 {
						t.Errorf("submit: %d %s", status, body)
					}
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(begin)
	slices.Sort(lat)
	if got := len(a.list(t, h.alice, "state=queued")); got != n {
		t.Errorf("alice has %d queued jobs after %d submissions", got, n)
	}
	return fmt.Sprintf("%d jobs from %d clients in %s: %.0f jobs/s; latency p50 %s, p99 %s; %d failed",
		n, conc, ms(el), float64(n)/el.Seconds(), lat[n/2].Round(time.Microsecond), lat[n*99/100].Round(time.Microsecond), failed.Load())
}
