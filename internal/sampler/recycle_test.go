package sampler

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
)

// TestRecycle checks that a recycled tick's owners come back in a later
// tick with the values a fresh sampler gives, and that the latest tick,
// which Latest and a failed GPU read still publish, is never recycled.
func TestRecycle(t *testing.T) {
	owners := map[uint32]container.Owner{
		1: {Kind: container.OwnerContainer, ID: "a"},
		2: {Kind: container.OwnerContainer, ID: "b"},
		3: {Kind: container.OwnerHost, ID: "bob"},
	}
	procs := [][]uint32{{1, 2}, {3}, {1, 2, 3}, {}, {2}}
	newSampler := func(src *fakeGPUs) *Sampler {
		return New(Config{GPUs: src, Resolvers: []ProcessResolver{&mapResolver{owners: owners}}})
	}
	freshSrc, recSrc := &fakeGPUs{}, &fakeGPUs{}
	fresh, rec := newSampler(freshSrc), newSampler(recSrc)
	var prev *Tick
	reused := 0
	var handed []*container.Owner
	for i, p := range procs {
		at := t0.Add(time.Duration(i) * time.Second)
		freshSrc.sample = gpu.Sample{Devices: []gpu.Device{device(p...)}}
		recSrc.sample = freshSrc.sample
		want := fresh.Step(context.Background(), at)
		got := rec.Step(context.Background(), at)
		if o := got.Owners[0]; len(o) > 0 && slices.Contains(handed, &o[:1][0]) {
			reused++
		}
		if diff := cmp.Diff(got.Owners, want.Owners); diff != "" {
			t.Errorf("tick %d: owners of the recycling sampler (-got +want):\n%s", i, diff)
		}
		if prev != nil {
			if o := prev.Owners[0]; cap(o) > 0 {
				handed = append(handed, &o[:1][0])
			}
			rec.Recycle(prev)
			if prev.Owners != nil || prev.Usage != nil {
				t.Errorf("tick %d keeps its rows after Recycle", i-1)
			}
		}
		// The latest tick is kept whole.
		rec.Recycle(got)
		if got.Owners == nil || got.Usage == nil {
			t.Fatalf("tick %d, the latest, was recycled", i)
		}
		prev = got
	}
	if reused == 0 {
		t.Errorf("no tick reused recycled owners")
	}

	// A failed read publishes the latest tick's figures again; recycling
	// that tick now must leave them alone.
	recSrc.err, recSrc.sample = errors.New("nvml: driver gone"), gpu.Sample{}
	failed := rec.Step(context.Background(), t0.Add(time.Minute))
	rec.Recycle(prev)
	if failed.Tick != prev.Tick || failed.Usage == nil {
		t.Errorf("the republished tick was recycled")
	}
}
