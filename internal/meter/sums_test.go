package meter

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSumsAdd(t *testing.T) {
	s := Sums{AllocatedSeconds: 1, HeldSeconds: 2, PresentSeconds: 3, UsedSeconds: 4, MemoryByteSeconds: 5, EnergyJoules: 6, PeakMemoryBytes: 70}
	s.Add(Sums{AllocatedSeconds: 10, HeldSeconds: 20, PresentSeconds: 30, UsedSeconds: 40, MemoryByteSeconds: 50, EnergyJoules: 60, PeakMemoryBytes: 7})
	want := Sums{AllocatedSeconds: 11, HeldSeconds: 22, PresentSeconds: 33, UsedSeconds: 44, MemoryByteSeconds: 55, EnergyJoules: 66, PeakMemoryBytes: 70}
	if diff := cmp.Diff(s, want); diff != "" {
		t.Errorf("Sums.Add (-got +want):\n%s", diff)
	}

	g := GPUSums{Seconds: 1, AllocatedSeconds: 2, IdleSeconds: 3, UsedSeconds: 4, UnattributedSeconds: 5, EnergyJoules: 6, IdleEnergyJoules: 7, EnergyResets: 1}
	g.Add(GPUSums{Seconds: 10, AllocatedSeconds: 20, IdleSeconds: 30, UsedSeconds: 40, UnattributedSeconds: 50, EnergyJoules: 60, IdleEnergyJoules: 70, EnergyResets: 2})
	wantG := GPUSums{Seconds: 11, AllocatedSeconds: 22, IdleSeconds: 33, UsedSeconds: 44, UnattributedSeconds: 55, EnergyJoules: 66, IdleEnergyJoules: 77, EnergyResets: 3}
	if diff := cmp.Diff(g, wantG); diff != "" {
		t.Errorf("GPUSums.Add (-got +want):\n%s", diff)
	}

	c := ContainerSums{CPUSeconds: 1, RAMByteSeconds: 2, Seconds: 3}
	c.Add(ContainerSums{CPUSeconds: 10, RAMByteSeconds: 20, Seconds: 30})
	if want := (ContainerSums{CPUSeconds: 11, RAMByteSeconds: 22, Seconds: 33}); c != want {
		t.Errorf("ContainerSums.Add: got %+v, want %+v", c, want)
	}
}
