package run

import (
	"context"
	"errors"
	"testing"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

const sharedGPU = "GPU-5f3c2a7e-0b1d-4c2e-9a8f-1e2d3c4b5a60"

// TestSubmitMemoryJob: a memory job is stored with no whole GPU asked
// for, its memory and class in the request, and builds on one GPU.
func TestSubmitMemoryJob(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Rules.MaxGPUMemory = 40 << 30 })
	req := request()
	req.GPUs, req.GPUMemory, req.Class = 0, 20<<30, spec.ClassLow
	j := e.submit(t, "alice", req)
	if j.GPUsRequested != 0 {
		t.Errorf("GPUsRequested %d, want 0 for a memory job", j.GPUsRequested)
	}
	stored, err := e.q.Job(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := specRequest(stored)
	if err != nil {
		t.Fatal(err)
	}
	if got.GPUMemory != 20<<30 || got.Class != spec.ClassLow || got.GPUs != 0 {
		t.Errorf("stored request: gpus %d, gpu memory %d, class %q; want 0, %d, low", got.GPUs, got.GPUMemory, got.Class, uint64(20<<30))
	}
	s, err := e.q.buildSpec(stored, []string{sharedGPU})
	if err != nil {
		t.Fatalf("buildSpec: %v", err)
	}
	if v := s.Config.Labels[spec.GPUMemoryLabel]; v != "21474836480" {
		t.Errorf("label %s = %q, want 21474836480", spec.GPUMemoryLabel, v)
	}

	req.GPUMemory = 41 << 30
	_, err = e.q.Submit(context.Background(), Submission{Request: req, User: "alice", Audit: audit.Event{Kind: "api"}})
	var r *spec.Refusal
	if !errors.As(err, &r) || r.Reason != spec.TooBig || r.Field != "gpu_memory" {
		t.Errorf("Submit of 41GiB on 40GiB: %v, want too_big on gpu_memory", err)
	}
}

// TestSubmitHighClass: high needs Submission.High, and a job submitted
// with it starts without asking again.
func TestSubmitHighClass(t *testing.T) {
	e := newEnv(t, nil)
	req := request()
	req.Class = spec.ClassHigh
	_, err := e.q.Submit(context.Background(), Submission{Request: req, User: "bob", Audit: audit.Event{Kind: "api"}})
	var r *spec.Refusal
	if !errors.As(err, &r) || r.Reason != spec.PriorityNotAllowed {
		t.Fatalf("Submit high without the right: %v, want priority_not_allowed", err)
	}
	j, err := e.q.Submit(context.Background(), Submission{Request: req, User: "bob", High: true, Audit: audit.Event{Kind: "api"}})
	if err != nil {
		t.Fatalf("Submit high with the right: %v", err)
	}
	got, err := specRequest(j)
	if err != nil || got.Class != spec.ClassHigh {
		t.Errorf("stored class %q (%v), want high", got.Class, err)
	}
	if _, err := e.q.buildSpec(j, []string{sharedGPU}); err != nil {
		t.Errorf("buildSpec of a high job: %v", err)
	}
}

// TestMemoryLimitFromSharedGPUs: with queue.shared_gpus set, the most a
// job may declare is the largest shared GPU's memory times the fraction,
// from the GPUs the queue sees; a GPU named by index counts.
func TestMemoryLimitFromSharedGPUs(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Sched.SharedGPUs = []string{"1"}
		c.Sched.SharedMemoryFraction = 0.5
	})
	e.q.Observe(Observation{GPUs: []queue.GPU{
		{UUID: "GPU-a", Index: 0, MemoryTotal: 80 << 30},
		{UUID: "GPU-b", Index: 1, MemoryTotal: 48 << 30},
	}})
	req := request()
	req.GPUs, req.GPUMemory = 0, 24<<30
	e.submit(t, "alice", req)
	req.GPUMemory = 24<<30 + 1
	_, err := e.q.Submit(context.Background(), Submission{Request: req, User: "alice"})
	var rf *spec.Refusal
	if !errors.As(err, &rf) || rf.Reason != spec.TooBig {
		t.Fatalf("a job over half of the shared 48 GiB: %v, want too_big", err)
	}
}

// TestSubmitMoreGPUsThanTheNode: a job within queue.max_gpus but larger
// than the node's GPUs for whole-GPU jobs is refused at submit (too_big),
// not queued to wait forever; shared GPUs do not count.
func TestSubmitMoreGPUsThanTheNode(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Sched.SharedGPUs = []string{"1"} })
	req := request()
	req.GPUs = 2
	e.submit(t, "alice", req) // before the first tick the size is unknown
	e.q.Observe(Observation{GPUs: []queue.GPU{{UUID: "GPU-a", Index: 0}, {UUID: "GPU-b", Index: 1}}})
	_, err := e.q.Submit(context.Background(), Submission{Request: req, User: "alice"})
	var rf *spec.Refusal
	if !errors.As(err, &rf) || rf.Reason != spec.TooBig || rf.Field != "gpus" {
		t.Fatalf("2 GPUs on a node with one exclusive GPU: %v, want too_big on gpus", err)
	}
	req.GPUs = 1
	e.submit(t, "alice", req)
}
