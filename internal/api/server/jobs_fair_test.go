package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/queue/run"
)

// sharedRules let memory jobs of up to 40GiB in, and root's jobs run the
// sleeper, so that the admin's token (user root) may submit.
func sharedRules(c *run.Config) {
	c.Rules.MaxGPUMemory = 40 << 30
	c.Rules.RunAsRootImages = []string{"gpumeter/sleeper:*"}
}

// TestJobMemoryAndPriority: a memory job and a priority class go from the
// request to the stored job and back to its JSON; the bad combinations
// are refused with the field at fault.
func TestJobMemoryAndPriority(t *testing.T) {
	f := servertest.NewJobsFixture(t, sharedRules)
	mem := strings.Replace(servertest.GoodJob, `"gpus":1,`, `"gpu_memory":"20GiB","priority":"low",`, 1)
	j := f.Submit(t, servertest.AsAlice, mem)
	if j.GPUMemoryRequested != 20<<30 || j.GPUsRequested != 0 || j.Class != "low" {
		t.Errorf("memory job: gpu_memory_requested %d gpus_requested %d class %q, want %d, 0, low", j.GPUMemoryRequested, j.GPUsRequested, j.Class, uint64(20<<30))
	}
	var again apitype.Job
	f.Get(t, servertest.AsAlice, "/api/v1/jobs/"+j.ID).Decode(t, &again)
	if again.GPUMemoryRequested != 20<<30 || again.Class != "low" {
		t.Errorf("read back: gpu_memory_requested %d class %q", again.GPUMemoryRequested, again.Class)
	}

	with := func(edit string) string { return strings.Replace(servertest.GoodJob, `"gpus":1,`, edit, 1) }
	tests := []struct {
		name, caller, body  string
		code, reason, field string
		says                string
	}{
		{"gpus and gpu memory", servertest.AsAlice, with(`"gpus":1,"gpu_memory":"20GiB",`), "bad_request", "", "gpus", "--gpus and --gpu-memory together"},
		{"gpu memory that does not parse", servertest.AsAlice, with(`"gpu_memory":"20 gigs",`), "bad_request", "", "gpu_memory", "gpu_memory"},
		{"more than a shared GPU gives", servertest.AsAlice, with(`"gpu_memory":"41GiB",`), "refused", "too_big", "gpu_memory", "40GiB"},
		{"an unknown class", servertest.AsAlice, with(`"gpus":1,"priority":"urgent",`), "bad_request", "", "priority", "not a priority class"},
		{"high for a user", servertest.AsAlice, with(`"gpus":1,"priority":"high",`), "refused", "priority_not_allowed", "priority", "queue.priority.high_users"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := f.Do(t, tt.caller, http.MethodPost, "/api/v1/jobs", strings.NewReader(tt.body), "")
			var e apitype.Error
			a.Decode(t, &e)
			if a.Status != http.StatusBadRequest || e.Code != tt.code || e.Reason != tt.reason || e.Field != tt.field || !strings.Contains(e.Message, tt.says) {
				t.Errorf("%d %s, want 400 %s reason %q field %q saying %q", a.Status, a.Body, tt.code, tt.reason, tt.field, tt.says)
			}
		})
	}
	high := f.Submit(t, servertest.AsAdmin, with(`"gpus":1,"priority":"high",`))
	if high.Class != "high" {
		t.Errorf("admin's high job has class %q", high.Class)
	}
	// No shared GPU: a memory job is refused and told why.
	g := servertest.NewJobsFixture(t, nil)
	e := g.Do(t, servertest.AsAlice, http.MethodPost, "/api/v1/jobs", strings.NewReader(mem), "").APIError(t, http.StatusBadRequest, apitype.CodeRefused)
	if e.Reason != "too_big" || !strings.Contains(e.Message, "queue.shared_gpus") {
		t.Errorf("memory job without a shared GPU: %+v, want too_big naming queue.shared_gpus", e)
	}
}

// TestJobRanks: a ranked queued job shows its priority, position and
// estimated start; an unranked one null for each.
func TestJobRanks(t *testing.T) {
	est := time.Date(2026, 12, 1, 14, 20, 0, 0, time.FixedZone("CET", 3600))
	ranks := servertest.RankTable{"j-000001": {Prio: 0.75, Pos: 2, Est: est}}
	f := servertest.NewJobsFixtureServer(t, nil, func(c *server.Config) { c.Ranks = ranks })
	ranked := f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	plain := f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	if ranked.Priority == nil || *ranked.Priority != 0.75 || ranked.Position == nil || *ranked.Position != 2 ||
		ranked.EstimatedStart == nil || !ranked.EstimatedStart.Equal(est) || ranked.EstimatedStart.Location() != time.UTC {
		t.Errorf("ranked job: priority %v position %v estimated %v, want 0.75, 2, %v in UTC", ranked.Priority, ranked.Position, ranked.EstimatedStart, est.UTC())
	}
	if plain.Priority != nil || plain.Position != nil || plain.EstimatedStart != nil {
		t.Errorf("unranked job: priority %v position %v estimated %v, want null", plain.Priority, plain.Position, plain.EstimatedStart)
	}
	// A held job starts only when released: no estimate, though the
	// table still has one.
	var held apitype.Job
	f.Post(t, servertest.AsAlice, "/api/v1/jobs/"+ranked.ID+"/hold").Decode(t, &held)
	if !held.Held || held.EstimatedStart != nil {
		t.Errorf("held job: held %v estimated %v, want held and no estimate", held.Held, held.EstimatedStart)
	}
	f.Post(t, servertest.AsAlice, "/api/v1/jobs/"+ranked.ID+"/release")
	// An ended job has no position, though the table still ranks it.
	var cancelled apitype.Job
	f.Post(t, servertest.AsAlice, "/api/v1/jobs/"+ranked.ID+"/cancel").Decode(t, &cancelled)
	if cancelled.Position != nil {
		t.Errorf("cancelled job: position %d, want null", *cancelled.Position)
	}
	// Nor a priority: the rank is a queued job's, and the pass that
	// started a job is the last to rank it, so jobs that left the queue
	// show none, alike.
	if cancelled.Priority != nil {
		t.Errorf("cancelled job: priority %v, want null", *cancelled.Priority)
	}
}
