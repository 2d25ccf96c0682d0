package agent

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// TestReportByJob: the API's report by job, through the agent, has the
// job store's facts of the job in the agent's own SQLite ledger.
func TestReportByJob(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	t0 := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	job, err := store.SubmitJob(ctx, queue.Job{Node: "n1", User: "alice", State: "queued", GPUsRequested: 1,
		Image: "train:1", Command: []string{"train"}, TimeLimit: time.Hour, SubmittedAt: t0.Add(-time.Minute)},
		audit.Event{Time: t0, Node: "n1", Kind: "api", Caller: "alice", Role: "user", Source: "unix uid 1000", Action: "jobs.submit", Status: 201})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.UpdateJob(ctx, job.ID, "queued", func(j *queue.Job) { j.State, j.StartedAt = "running", t0 }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	gpu := ledger.GPU{Node: "n1", UUID: "GPU-0", Index: 0, Model: "NVIDIA A100-SXM4-80GB", MemoryTotal: 80 << 30}
	ctr := ledger.Container{Node: "n1", ID: strings.Repeat("ab", 32), Name: "gpumeter-job-" + job.ID, Image: "train:1",
		Labels: map[string]string{container.JobLabel: job.ID}, User: "alice", FirstSeen: t0, LastSeen: t0.Add(time.Minute)}
	if err := store.Write(ctx, ledger.Batch{
		Nodes: []ledger.Node{{Name: "n1", FirstSeen: t0, LastSeen: t0}}, GPUs: []ledger.GPU{gpu}, Containers: []ledger.Container{ctr},
		Usage: []ledger.Usage{{Node: "n1", Start: t0, OwnerKind: ledger.KindContainer, OwnerID: ctr.ID, GPU: gpu.UUID,
			Sums: ledger.Sums{AllocatedSeconds: 60, HeldSeconds: 60, PresentSeconds: 60, UsedSeconds: 30}}},
		GPUUsage: []ledger.GPUUsage{{Node: "n1", Start: t0, GPU: gpu.UUID, GPUSums: ledger.GPUSums{Seconds: 60, AllocatedSeconds: 60, UsedSeconds: 30}}},
	}); err != nil {
		t.Fatal(err)
	}

	a := &Agent{cfg: config.Default(), log: slog.New(slog.DiscardHandler), sampler: sampler.New(sampler.Config{}), store: store}
	req := report.Request{By: report.ByJob, Format: "json"}
	if err := req.Validate(t0.Add(10 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Report(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Key != job.ID || rep.Rows[0].Job == nil {
		t.Fatalf("rows %+v, want one for %s with its job", rep.Rows, job.ID)
	}
	j := rep.Rows[0].Job
	if j.User != "alice" || j.State != "running" || j.GPUsRequested != 1 || j.WaitedSeconds == nil || *j.WaitedSeconds != 60 || j.RanSeconds == nil || *j.RanSeconds != 600 {
		t.Errorf("job %+v, want alice's running job that asked for 1 GPU, waited 60 s and has run 600 s", *j)
	}
}
