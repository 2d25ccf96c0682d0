package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
)

// TestMessagesGolden holds what jobs, wait, fairshare and nodes say to
// testdata/messages/*.golden: each thing once, and nothing that reads as
// none when it is a little; go test -update rewrites them.
func TestMessagesGolden(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := now.Add(-d); return &x }
	prio, pos, code143, code0 := 0.5, 1, 143, 0
	// The API ranks queued jobs only: a running job has no priority, the
	// one the last pass started no more than the others.
	jobs := []apitype.Job{
		{ID: "j-000001", Name: "train", User: "alice", State: "running", GPUsRequested: 1, SubmittedAt: at(time.Hour)},
		{ID: "j-000002", Name: "eval", User: "alice", State: "running", GPUsRequested: 2, SubmittedAt: at(30 * time.Minute)},
		{ID: "j-000003", User: "alice", State: "queued", GPUsRequested: 1, SubmittedAt: at(time.Minute), Priority: &prio, Position: &pos,
			Reason: "resources", ReasonText: "waiting for 1 free GPU; none is free; j-000001 (alice) reaches its time limit in 4 min 5 s; no job ahead of you waits for GPUs"},
		{ID: "j-000004", User: "alice", State: "cancelled", GPUsRequested: 1, SubmittedAt: at(2 * time.Hour), ExitCode: &code143,
			Reason: "cancelled", ReasonText: "cancelled by alice (token alice-9ede82) (exit code 143)"},
	}
	ended := []apitype.Job{
		jobs[3],
		{ID: "j-000005", User: "alice", State: "succeeded", ExitCode: &code0, Reason: "exited", ReasonText: "exited with code 0"},
		{ID: "j-000006", User: "alice", State: "failed", ExitCode: &code143, Reason: "exited", ReasonText: "exited"},
	}
	fs := apitype.FairShare{
		Users: []apitype.FairShareRow{
			{Name: "alice", Kind: apitype.FairShareUser, Team: "nlp", Share: 1, NormShare: 0.5, UsageGPUHours: 0.031, NormUsage: 0.62, Factor: 0.42},
			{Name: "bob", Kind: apitype.FairShareUser, Share: 1, NormShare: 0.5, UsageGPUHours: 0.019, NormUsage: 0.38, Factor: 0.59},
		},
		Totals: apitype.FairShareRow{Name: "(total)", Kind: apitype.FairShareTotal, Share: 2, NormShare: 1, UsageGPUHours: 0.05, NormUsage: 1, Factor: 1},
	}
	for _, tc := range []struct {
		name  string
		write func(b *bytes.Buffer) error
	}{
		{"jobs", func(b *bytes.Buffer) error { return writeJobs(b, jobs, now, nil) }},
		// In a fleet the jobs span nodes: a NODE column, "-" for a job
		// that waits to be placed.
		{"jobsfleet", func(b *bytes.Buffer) error {
			fleet := append([]apitype.Job(nil), jobs...)
			fleet[0].Node, fleet[1].Node, fleet[3].Node = "gpu-a", "gpu-b", "gpu-a"
			return writeJobs(b, fleet, now, nil)
		}},
		{"wait", func(b *bytes.Buffer) error {
			for _, j := range ended {
				b.WriteString(j.ID + " " + j.State + ": " + endWords(j) + "\n")
			}
			return nil
		}},
		{"fairshare", func(b *bytes.Buffer) error { return writeFairShare(b, fs) }},
		{"nodes", func(b *bytes.Buffer) error {
			gpu := func(state string) apitype.NodeGPU {
				return apitype.NodeGPU{Model: "H100", MemoryBytes: 80 << 30, State: state}
			}
			ns := apitype.Nodes{Nodes: []apitype.Node{
				{Node: "gpu-a", State: apitype.NodeUp, LeaseAgeSeconds: 2.4, AgentVersion: "1.4.0", Score: 95.5, SMUtil: 0.655,
					GPUs: []apitype.NodeGPU{gpu(apitype.GPUHeld), gpu(apitype.GPUHeld), gpu(apitype.GPUFree), gpu(apitype.GPUOutside)}},
				{Node: "gpu-b", State: apitype.NodeDraining, LeaseAgeSeconds: 0.2, AgentVersion: "1.4.0", Score: 30, GPUs: []apitype.NodeGPU{gpu(apitype.GPUFree)}},
				{Node: "gpu-c", State: apitype.NodeLost, LeaseAgeSeconds: 7200, Score: 30, GPUs: []apitype.NodeGPU{}},
			}}
			if err := writeNodes(b, ns); err != nil {
				return err
			}
			return writeNodes(b, apitype.Nodes{})
		}},
		{"nojobs", func(b *bytes.Buffer) error {
			for _, q := range []client.JobsQuery{{}, {All: true}, {AllUsers: true}, {All: true, AllUsers: true}} {
				if err := writeJobs(b, nil, now, nil); err != nil {
					return err
				}
				if err := writeNoJobsLine(b, apitype.JobsResponse{}, q); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.write(&b); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, twice := range []string{"(exit code 143) (exit code 143)", "code 0 (exit code 0)"} {
				if strings.Contains(out, twice) {
					t.Errorf("says it twice: %q\n%s", twice, out)
				}
			}
			if strings.Contains(out, " 0.0h ") {
				t.Errorf("some use reads as none:\n%s", out)
			}
			golden := "testdata/messages/" + tc.name + ".golden"
			if *update {
				if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if out != string(want) {
				t.Errorf("differs from %s (go test ./cmd/gpumeter -run MessagesGolden -update, then review):\n%s", golden, diffLines(string(want), out))
			}
		})
	}
}
