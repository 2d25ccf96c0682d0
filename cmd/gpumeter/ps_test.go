package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

// TestWritePsGolden prints a job's container, another node's job's of
// the same id, a container outside the queue, a host user and unresolved
// use, and compares the table with
// testdata/ps/*.golden; go test -update rewrites them.
func TestWritePsGolden(t *testing.T) {
	share := func(gpu int, s, sm float64, mem uint64) apitype.GPUShare {
		return apitype.GPUShare{GPU: gpu, Share: s, SMPercent: sm, MemoryBytes: mem,
			AllocatedSeconds: 1800 * s, UsedSeconds: 1800 * s * sm / 100, EnergyJoules: 3.6e5}
	}
	resp := apitype.ContainersResponse{Node: "n1",
		Containers: []apitype.Container{
			{ID: "0123456789abcdef", Name: "gpumeter-job-j-000012", User: "alice", Team: "nlp", Running: true, GPURequest: "GPU-a,GPU-b",
				Labels: map[string]string{"gpumeter.job": "j-000012", "gpumeter.user": "alice"},
				GPUs:   []apitype.GPUShare{share(0, 1, 90, 20<<30), share(1, 1, 85, 20<<30)}},
			{ID: "fedcba9876543210", Name: "bob-notebook", User: "bob", Running: true, GPURequest: "all",
				Labels: map[string]string{}, GPUs: []apitype.GPUShare{share(2, 1, 5, 1<<30)}},
			{ID: "00000000aaaaaaaa", Name: "gpumeter-job-j-000013", User: "carol", Running: false,
				Labels: map[string]string{"gpumeter.job": "j-000013"}, GPUs: []apitype.GPUShare{}},
			// Another node's job of the same id on the engine n1 shares.
			{ID: "1111111122222222", Name: "gpumeter-job-node2-j-000012", User: "erin", Running: true, GPURequest: "3",
				Labels: map[string]string{"gpumeter.job": "j-000012", "gpumeter.node": "node2"}, GPUs: []apitype.GPUShare{share(3, 1, 40, 8<<30)}},
		},
		HostUsers:  []apitype.HostUser{{User: "dave", GPUs: []apitype.GPUShare{share(3, 0, 50, 2<<30)}}},
		Unresolved: []apitype.GPUShare{share(3, 0, 1, 1<<20)},
	}
	for _, tc := range []struct {
		name string
		all  bool
	}{{"running", false}, {"all", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writePs(&b, resp, tc.all); err != nil {
				t.Fatal(err)
			}
			// What the golden file must say, whatever -update wrote: the
			// job's two GPUs name it, node2's job of the same id is
			// node2's, and bob's notebook is no job.
			out := b.String()
			if n := strings.Count(out, "  j-000012\n"); n != 2 {
				t.Errorf("%d lines end in the job's ID, want 2:\n%s", n, out)
			}
			if !regexp.MustCompile(`(?m)^111111112222\s+gpumeter-job-node2-j-000012\s.*\snode2/j-000012$`).MatchString(out) {
				t.Errorf("node2's job is not shown as node2/j-000012:\n%s", out)
			}
			if !regexp.MustCompile(`(?m)^fedcba987654\s+bob-notebook\s.*\s-$`).MatchString(out) {
				t.Errorf("bob's notebook is not shown as no job:\n%s", out)
			}
			golden := "testdata/ps/" + tc.name + ".golden"
			if *update {
				if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if b.String() != string(want) {
				t.Errorf("ps differs from %s (go test ./cmd/gpumeter -run WritePs -update, then review):\n%s", golden, diffLines(string(want), b.String()))
			}
		})
	}
}
