package run

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// TestMemoryContract runs a memory job on the real engine and reports its
// measured GPU memory as a tick would: under its declaration nothing
// happens; over it, the job is warned (its sentence, an audit row, the
// webhook's event) and, still over after the grace, stopped as failed
// with memory_overrun.
func TestMemoryContract(t *testing.T) {
	e := newEngineEnv(t, 2, func(c *Config) {
		c.Sched.SharedGPUs = []string{"1"}
		c.MemoryOverrunGrace = 2 * time.Second
	})
	req := e.sleeper()
	req.GPUs, req.GPUMemory = 0, 10<<30
	j := e.waitState(t, e.submit(t, "alice", req).ID, queue.Running)
	if !slices.Equal(j.GPUs, []string{"GPU-test-1"}) {
		t.Fatalf("memory job on %v, want the shared GPU-test-1", j.GPUs)
	}
	obs := func(mem uint64) {
		e.q.Observe(Observation{GPUs: gpus(2), JobMemory: map[string]uint64{j.ID: mem}})
	}
	obs(8 << 30)
	time.Sleep(300 * time.Millisecond)
	if got, _ := e.q.Job(context.Background(), j.ID); got.State != "running" || strings.Contains(got.ReasonText, "more than") {
		t.Fatalf("under its declaration: %s %q", got.State, got.ReasonText)
	}
	over := time.Now()
	obs(12 << 30)
	dockertest.WaitFor(t, 10*time.Second, "the warning", func() (bool, string) {
		got, _ := e.q.Job(context.Background(), j.ID)
		return strings.Contains(got.ReasonText, "more than the 10GiB it declared"), got.ReasonText
	})
	got := e.waitState(t, j.ID, queue.Failed)
	if got.Reason != queue.ReasonMemoryOverrun || !strings.Contains(got.ReasonText, "queue.memory_overrun_grace") {
		t.Errorf("ended %s %q, want memory_overrun", got.Reason, got.ReasonText)
	}
	// The grace is waited out; how soon after it the stop came is the
	// machine's figure, not asserted.
	if d := got.EndedAt.Sub(over); d < 2*time.Second {
		t.Errorf("stopped %v after going over, want after the 2s grace", d)
	}
	acts := e.auditActions(t)
	if !slices.Contains(acts, "jobs.memory_warn "+j.ID) || !slices.Contains(acts, "jobs.memory_overrun "+j.ID) {
		t.Errorf("audit actions %v, want jobs.memory_warn and jobs.memory_overrun", acts)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	warned := false
	for _, ev := range e.events {
		warned = warned || ev.Event == EventWarn && ev.Job.ID == j.ID
	}
	if !warned {
		t.Error("no warn event reached the webhook's hook")
	}
}

// TestMemoryContractWarnOnly: with the action warn, a job over its
// declaration is warned and keeps running.
func TestMemoryContractWarnOnly(t *testing.T) {
	e := newEngineEnv(t, 1, func(c *Config) {
		c.Sched.SharedGPUs = []string{"all"}
		c.MemoryOverrunGrace = time.Second
		c.MemoryOverrunAction = config.OverrunWarn
	})
	req := e.sleeper()
	req.GPUs, req.GPUMemory = 0, 1<<30
	j := e.waitState(t, e.submit(t, "alice", req).ID, queue.Running)
	e.q.Observe(Observation{GPUs: gpus(1), JobMemory: map[string]uint64{j.ID: 2 << 30}})
	dockertest.WaitFor(t, 10*time.Second, "the warning", func() (bool, string) {
		got, _ := e.q.Job(context.Background(), j.ID)
		return strings.Contains(got.ReasonText, "it is not stopped"), got.ReasonText
	})
	time.Sleep(2 * time.Second)
	if got, _ := e.q.Job(context.Background(), j.ID); got.State != "running" {
		t.Errorf("warn only: job %s, want running", got.State)
	}
}
