package ledger

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSumsAdd(t *testing.T) {
	s := Sums{AllocatedSeconds: 1, HeldSeconds: 2, PresentSeconds: 3, UsedSeconds: 4, MemoryByteSeconds: 5, EnergyJoules: 6, PeakMemoryBytes: 70, PeakUtil: 8}
	s.Add(Sums{AllocatedSeconds: 10, HeldSeconds: 20, PresentSeconds: 30, UsedSeconds: 40, MemoryByteSeconds: 50, EnergyJoules: 60, PeakMemoryBytes: 7, PeakUtil: 80})
	want := Sums{AllocatedSeconds: 11, HeldSeconds: 22, PresentSeconds: 33, UsedSeconds: 44, MemoryByteSeconds: 55, EnergyJoules: 66, PeakMemoryBytes: 70, PeakUtil: 80}
	if diff := cmp.Diff(s, want); diff != "" {
		t.Errorf("Add (-got +want):\n%s", diff)
	}
}

func TestGPUSumsAdd(t *testing.T) {
	s := GPUSums{Seconds: 1, AllocatedSeconds: 2, IdleSeconds: 3, UsedSeconds: 4, UnattributedSeconds: 5, EnergyJoules: 6, IdleEnergyJoules: 7, PeakUtil: 80}
	s.Add(GPUSums{Seconds: 10, AllocatedSeconds: 20, IdleSeconds: 30, UsedSeconds: 40, UnattributedSeconds: 50, EnergyJoules: 60, IdleEnergyJoules: 70, PeakUtil: 8})
	want := GPUSums{Seconds: 11, AllocatedSeconds: 22, IdleSeconds: 33, UsedSeconds: 44, UnattributedSeconds: 55, EnergyJoules: 66, IdleEnergyJoules: 77, PeakUtil: 80}
	if diff := cmp.Diff(s, want); diff != "" {
		t.Errorf("Add (-got +want):\n%s", diff)
	}
}
