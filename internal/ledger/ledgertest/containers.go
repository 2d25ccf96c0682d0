// The records usage rows are read with: containers (their labels byte for
// byte, their CPU counted once) and GPUs (unknown until described, updated
// when described again).

package ledgertest

import (
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// oddLabels are labels a store must keep byte for byte.
var oddLabels = map[string]string{
	`quote"key`:       `it's "quoted"`,
	`back\slash`:      `C:\path\`,
	"newline":         "line1\nline2\r\n",
	"unicode":         "日本語 ✓ 🚀 é",
	"sql":             `'); DROP TABLE containers; --`,
	"empty":           "",
	"json":            `{"nested": [1, 2, {"x": null}]}`,
	"control\t":       "\x01\x1f\u2028",
	"com.docker.name": "with space and = sign & ampersand?",
}

func testContainers(t *testing.T, s ledger.Ledger) {
	exit0, exit137 := 0, 137
	running := ledger.Container{
		Node: nodeA, ID: ctr1, Name: "train/odd name", Image: "registry.example.com:5000/team/img@sha256:abc",
		Labels: oddLabels, User: "alice", Team: "vision", Project: "seg", GPURequest: "count=2",
		StartedAt: at(0, 0), FirstSeen: at(0, 0).Add(3 * time.Second), LastSeen: at(0, 5),
	}
	succeeded := ledger.Container{
		Node: nodeA, ID: ctr2, Name: "ok", Image: "busybox", Labels: map[string]string{},
		StartedAt: at(0, 1), FinishedAt: at(0, 3), ExitCode: &exit0, FirstSeen: at(0, 1), LastSeen: at(0, 3),
	}
	killed := ledger.Container{
		Node: nodeA, ID: ctr3, Name: "oom", Image: "busybox", User: "bob",
		StartedAt: at(0, 1), FinishedAt: at(0, 4), ExitCode: &exit137, FirstSeen: at(0, 1), LastSeen: at(0, 4),
	}
	cpu := func(id string) ledger.ContainerUsage {
		return ledger.ContainerUsage{Node: nodeA, Start: at(0, 2), ContainerID: id, CPUSeconds: 1}
	}
	write(t, s, ledger.Batch{
		Containers:     []ledger.Container{running, succeeded, killed},
		ContainerUsage: []ledger.ContainerUsage{cpu(ctr1), cpu(ctr2), cpu(ctr3)},
	})
	f := ledger.Filter{From: t0, To: at(1, 0)}
	row := func(c ledger.Container) ledger.UsageTotal {
		return ledger.UsageTotal{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: c.ID, Container: &c, CPUSeconds: 1}
	}
	// By container ID: ctr3, ctr1, ctr2.
	checkUsage(t, s, f, []ledger.UsageTotal{row(killed), row(running), row(succeeded)})
	got := readUsage(t, s, f)
	for _, r := range got {
		if r.OwnerID == ctr1 && r.Container.ExitCode != nil {
			t.Errorf("running container: ExitCode = %d, want nil", *r.Container.ExitCode)
		}
		if r.OwnerID == ctr2 && (r.Container.ExitCode == nil || *r.Container.ExitCode != 0) {
			t.Errorf("succeeded container: ExitCode = %v, want 0", r.Container.ExitCode)
		}
	}

	// Seen again, finished: what moves on is replaced, the first sighting
	// and a start time the later record lacks are kept.
	finished := running
	finished.Labels = map[string]string{"gpumeter.user": "alice2"}
	finished.User = "alice2"
	finished.StartedAt = time.Time{}
	finished.FirstSeen = at(0, 9)
	finished.LastSeen = at(0, 10)
	finished.FinishedAt = at(0, 10)
	finished.ExitCode = &exit0
	write(t, s, ledger.Batch{Containers: []ledger.Container{finished}})
	want := finished
	want.StartedAt = running.StartedAt
	want.FirstSeen = running.FirstSeen
	checkUsage(t, s, f, []ledger.UsageTotal{row(killed), row(want), row(succeeded)})

	// A late record of an earlier sighting does not move LastSeen back.
	late := finished
	late.LastSeen = at(0, 6)
	write(t, s, ledger.Batch{Containers: []ledger.Container{late}})
	checkUsage(t, s, f, []ledger.UsageTotal{row(killed), row(want), row(succeeded)})
}

func testContainerCPUOnce(t *testing.T, s ledger.Ledger) {
	c1 := container1()
	sums := ledger.Sums{AllocatedSeconds: 60, UsedSeconds: 30}
	write(t, s, ledger.Batch{
		GPUs:       []ledger.GPU{gpuMetaA, gpuMetaB},
		Containers: []ledger.Container{c1},
		Usage: []ledger.Usage{
			// gpuB listed first: the CPU must still land on gpuA's row.
			usage(nodeA, at(0, 0), ledger.KindContainer, ctr1, gpuB, sums),
			usage(nodeA, at(0, 0), ledger.KindContainer, ctr1, gpuA, sums),
			usage(nodeA, at(0, 0), ledger.KindHost, "root", gpuA, sums),
		},
		ContainerUsage: []ledger.ContainerUsage{
			{Node: nodeA, Start: at(0, 0), ContainerID: ctr1, CPUSeconds: 100, RAMByteSeconds: 1 << 40},
			{Node: nodeA, Start: at(0, 1), ContainerID: ctr1, CPUSeconds: 20, RAMByteSeconds: 1 << 30},
			// A container that never touched a GPU.
			{Node: nodeA, Start: at(0, 0), ContainerID: ctr2, CPUSeconds: 5, RAMByteSeconds: 10},
		},
	})
	f := ledger.Filter{From: t0, To: at(1, 0)}
	checkUsage(t, s, f, []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, GPU: gpuMetaA, Sums: sums, Container: &c1, CPUSeconds: 120, RAMByteSeconds: 1<<40 + 1<<30},
		{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, GPU: gpuMetaB, Sums: sums, Container: &c1},
		{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr2, CPUSeconds: 5, RAMByteSeconds: 10},
		{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "root", GPU: gpuMetaA, Sums: sums},
	})
	// In a window where the container has CPU but no GPU rows, it still
	// appears, once.
	checkUsage(t, s, ledger.Filter{From: at(0, 1), To: at(0, 2)}, []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindContainer, OwnerID: ctr1, Container: &c1, CPUSeconds: 20, RAMByteSeconds: 1 << 30},
	})
	var cpu float64
	n := 0
	for _, r := range readUsage(t, s, f) {
		cpu += r.CPUSeconds
		if r.CPUSeconds != 0 {
			n++
		}
	}
	if cpu != 125 || n != 2 {
		t.Errorf("CPU over rows = %v on %d rows, want 125 on 2", cpu, n)
	}
}

func testUnknownGPU(t *testing.T, s ledger.Ledger) {
	sums := ledger.Sums{UsedSeconds: 3}
	write(t, s, ledger.Batch{Usage: []ledger.Usage{usage(nodeA, at(0, 0), ledger.KindHost, "gina", gpuA, sums)}})
	f := ledger.Filter{From: t0, To: at(1, 0)}
	checkUsage(t, s, f, []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "gina", GPU: ledger.GPU{Node: nodeA, UUID: gpuA, Index: -1}, Sums: sums},
	})
	write(t, s, ledger.Batch{GPUs: []ledger.GPU{gpuMetaA}})
	checkUsage(t, s, f, []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "gina", GPU: gpuMetaA, Sums: sums},
	})
	// A GPU described again with new facts is updated.
	moved := gpuMetaA
	moved.Index, moved.Model = 3, "NVIDIA H200"
	write(t, s, ledger.Batch{GPUs: []ledger.GPU{moved}})
	checkUsage(t, s, f, []ledger.UsageTotal{
		{Node: nodeA, OwnerKind: ledger.KindHost, OwnerID: "gina", GPU: moved, Sums: sums},
	})
}
