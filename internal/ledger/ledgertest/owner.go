package ledgertest

import (
	"context"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// testUsageByOwner checks the per-owner hourly sums fair share reads:
// one user's containers on two nodes and two GPUs add up in each hour,
// minute rows land in their hour, a host process counts to its Unix user
// with no team, GPU time nobody held and containers the ledger does not
// know are left out, and the window is cut to whole hours.
func testUsageByOwner(t *testing.T, s ledger.Ledger) {
	ctr := func(node, id, user, team string) ledger.Container {
		return ledger.Container{Node: node, ID: id, Name: id[:8], Image: "x", User: user, Team: team, FirstSeen: t0, LastSeen: at(3, 0)}
	}
	sums := func(alloc, held, used float64) ledger.Sums {
		return ledger.Sums{AllocatedSeconds: alloc, HeldSeconds: held, PresentSeconds: held, UsedSeconds: used}
	}
	gpuB2 := ledger.GPU{Node: nodeB, UUID: gpuB, Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryTotal: 80 << 30}
	write(t, s, ledger.Batch{
		Nodes:      []ledger.Node{{Name: nodeA, FirstSeen: t0, LastSeen: at(3, 0)}, {Name: nodeB, FirstSeen: t0, LastSeen: at(3, 0)}},
		GPUs:       []ledger.GPU{gpuMetaA, gpuMetaB, gpuB2},
		Containers: []ledger.Container{ctr(nodeA, ctr1, "alice", "vision"), ctr(nodeB, ctr2, "alice", "vision"), ctr(nodeA, ctr3, "alice", "nlp")},
		Usage: []ledger.Usage{
			usage(nodeA, at(0, 0), ledger.KindContainer, ctr1, gpuA, sums(60, 60, 30)),
			usage(nodeA, at(0, 1), ledger.KindContainer, ctr1, gpuA, sums(60, 60, 30)),
			usage(nodeA, at(0, 1), ledger.KindContainer, ctr1, gpuB, sums(30, 60, 10)),
			usage(nodeB, at(0, 59), ledger.KindContainer, ctr2, gpuB, sums(60, 60, 60)),
			usage(nodeA, at(0, 30), ledger.KindContainer, ctr3, gpuB, sums(30, 60, 0)),
			usage(nodeA, at(0, 2), ledger.KindHost, "root", gpuA, sums(5, 5, 5)),
			usage(nodeA, at(0, 3), ledger.KindNone, "", gpuA, sums(60, 0, 0)),
			usage(nodeA, at(1, 0), ledger.KindContainer, "f00d", gpuA, sums(60, 60, 60)),
			usage(nodeA, at(2, 10), ledger.KindContainer, ctr1, gpuA, sums(60, 60, 6)),
		},
	})
	ctx := context.Background()
	got, err := s.UsageByOwner(ctx, at(0, 20), at(3, 0))
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.OwnerHour{
		{Start: at(0, 0), Kind: ledger.KindContainer, User: "alice", Team: "nlp", AllocatedSeconds: 30, HeldSeconds: 60},
		{Start: at(0, 0), Kind: ledger.KindContainer, User: "alice", Team: "vision", AllocatedSeconds: 210, HeldSeconds: 240, UsedSeconds: 130},
		{Start: at(0, 0), Kind: ledger.KindHost, User: "root", AllocatedSeconds: 5, HeldSeconds: 5, UsedSeconds: 5},
		{Start: at(2, 0), Kind: ledger.KindContainer, User: "alice", Team: "vision", AllocatedSeconds: 60, HeldSeconds: 60, UsedSeconds: 6},
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("UsageByOwner (-want +got):\n%s", diff)
	}
	if got, err := s.UsageByOwner(ctx, at(1, 0), at(2, 0)); err != nil || len(got) != 0 {
		t.Errorf("UsageByOwner over an hour of unknown containers only = %+v, %v; want none", got, err)
	}
	if got, err := s.UsageByOwner(ctx, at(2, 30), at(2, 40)); err != nil || len(got) != 0 {
		t.Errorf("UsageByOwner inside one hour = %+v, %v; want none (the window is cut to whole hours)", got, err)
	}
	if got, err := s.UsageByOwner(ctx, at(2, 0), at(2, 0).Add(time.Hour)); err != nil || len(got) != 1 {
		t.Errorf("UsageByOwner over hour 2 = %+v, %v; want alice's row", got, err)
	}
}

// unheldByOwner checks that version 3's hours, which have no held
// seconds, read by owner with none held and all their allocated time
// unheld, so that fair share on the held basis can count it instead.
func unheldByOwner(t *testing.T, s ledger.Ledger, f ledger.Filter) {
	t.Helper()
	hours, err := s.UsageByOwner(context.Background(), f.From, f.To)
	if err != nil {
		t.Fatal(err)
	}
	if len(hours) == 0 {
		t.Fatal("UsageByOwner over version 3's ledger: no rows")
	}
	var allocated float64
	for _, h := range hours {
		allocated += h.AllocatedSeconds
		if h.HeldSeconds != 0 || h.UnheldAllocatedSeconds != h.AllocatedSeconds {
			t.Errorf("version 3 hour %s of %s %s: allocated %v, held %v, unheld allocated %v; want no held and all allocated unheld",
				h.Start.Format(time.RFC3339), h.Kind, h.User, h.AllocatedSeconds, h.HeldSeconds, h.UnheldAllocatedSeconds)
		}
	}
	if allocated == 0 {
		t.Error("UsageByOwner over version 3's ledger: no allocated time at all")
	}
}
