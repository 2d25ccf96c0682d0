package sim

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/container"
)

// comings is three containers that start and stop at different times.
const comings = `version: 1
duration: 3h
gpus:
  - count: 2
    model: X
    memory: 80GiB
    idle_power: 70W
    max_power: 700W
containers:
  - {name: a, gpus: [0], start: 0s, end: 2h, cpu: 1, ram: 1GiB, phases: [{at: 0s, util: 50, memory: 1GiB}]}
  - {name: b, gpus: [1], start: 20m, end: 40m, phases: [{at: 0s, util: 10, memory: 1GiB}]}
  - {name: c, gpus: [0, 1], start: 1h, phases: [{at: 0s, util: 90, memory: 2GiB}]}
`

// TestReusedLists plays containers that come and go, with and without WithReusedLists: every list must be the
// same, and the reusing source must fill one array again.
func TestReusedLists(t *testing.T) {
	sc, err := Parse("comings", []byte(comings))
	if err != nil {
		t.Fatal(err)
	}
	fresh, reused := NewSource(sc, false), NewSource(sc, false, WithReusedLists())
	ctx := context.Background()
	var first *container.Container
	again := 0
	lens := map[int]bool{}
	for at := sc.Start.Add(-time.Minute); !at.After(sc.Start.Add(sc.Duration + 10*time.Minute)); at = at.Add(97 * time.Second) {
		want, err := fresh.Containers(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		got, err := reused.Containers(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(slices.Clone(got), want); diff != "" {
			t.Fatalf("containers at %s with reused lists (-got +want):\n%s", at.Sub(sc.Start), diff)
		}
		lens[len(got)] = true
		if cap(got) > 0 {
			if first == nil {
				first = &got[:1][0]
			} else if &got[:1][0] == first {
				again++
			}
		}
	}
	if again == 0 {
		t.Errorf("the reusing source never filled its list again")
	}
	if len(lens) < 3 {
		t.Errorf("lists of %d lengths, want containers coming and going", len(lens))
	}
}
