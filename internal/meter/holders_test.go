package meter

import (
	"testing"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
)

// TestHoldings checks that the kept answers are always GPURequest.Holds's,
// through changes of requests (in place too), of devices and of their MIG
// instances, step after step.
func TestHoldings(t *testing.T) {
	devs := []gpu.Device{
		{Index: 0, UUID: "GPU-aaaa"},
		{Index: 1, UUID: "GPU-bbbb", MIG: []gpu.MIGInstance{{UUID: "MIG-b1"}, {UUID: "MIG-b2"}}},
		{Index: 2},
	}
	shared := []string{"0", "2"}
	ctrs := []container.Container{
		{ID: "a", GPUs: container.GPURequest{IDs: shared}},
		{ID: "b", GPUs: container.GPURequest{IDs: []string{"gpu-BBBB"}}},
		{ID: "c", GPUs: container.GPURequest{All: true}},
		{ID: "d", GPUs: container.GPURequest{IDs: []string{"MIG-b2"}}},
		{ID: "e"},
	}
	var h holdings
	check := func(step string) {
		t.Helper()
		h.update(devs, ctrs)
		for i, c := range ctrs {
			for j, d := range devs {
				var mig []string
				for _, mi := range d.MIG {
					mig = append(mig, mi.UUID)
				}
				if got, want := h.holds(i, j), c.GPUs.Holds(d.Index, d.UUID, mig...); got != want {
					t.Errorf("%s: container %s, device %d: holds = %v, want %v", step, c.ID, j, got, want)
				}
			}
		}
	}
	check("first")
	check("unchanged")
	shared[1] = "1" // the inventory changed the request in place
	check("request changed in place")
	ctrs[4].GPUs = container.GPURequest{IDs: []string{"GPU-AAAA"}}
	ctrs[2].GPUs.All = false
	check("requests replaced")
	devs[0], devs[2] = devs[2], devs[0]
	check("devices reordered")
	devs[1].MIG = devs[1].MIG[:1]
	check("a MIG instance gone")
	devs[2].UUID = "GPU-cccc"
	check("a UUID changed")
	ctrs = append(ctrs[:1], ctrs[2:]...)
	check("a container gone")
	devs = devs[:2]
	check("a device gone")
}
