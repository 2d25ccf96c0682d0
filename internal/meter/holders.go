package meter

import (
	"slices"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
)

// holdings says which of a sample's devices each container's GPU request
// covers. Asking GPURequest.Holds for every device and container on every
// step compares each requested ID with each device's index and UUIDs
// (8 GPUs × 64 containers × 4 IDs a second on the benchmark load), yet the
// answer changes only when a request or the devices do: so it is worked
// out again only then, per container from the previous step's answer.
type holdings struct {
	devs []deviceID  // the devices the answers are for, by position
	ctrs []requestOf // by position in Input.Containers
}

// deviceID is what GPURequest.Holds looks at in a device.
type deviceID struct {
	index int
	uuid  string
	mig   []string
}

type requestOf struct {
	req  container.GPURequest // a copy, so a changed request is seen
	held []bool               // by device position; nil until worked out
}

// update makes the answers those for devs and ctrs.
func (h *holdings) update(devs []gpu.Device, ctrs []container.Container) {
	if !h.sameDevices(devs) {
		h.devs = h.devs[:0]
		for i := range devs {
			d := &devs[i]
			id := deviceID{index: d.Index, uuid: d.UUID}
			for _, mi := range d.MIG {
				id.mig = append(id.mig, mi.UUID)
			}
			h.devs = append(h.devs, id)
		}
		clear(h.ctrs)
	}
	if len(h.ctrs) < len(ctrs) {
		h.ctrs = append(h.ctrs, make([]requestOf, len(ctrs)-len(h.ctrs))...)
	}
	for i := range ctrs {
		r, e := &ctrs[i].GPUs, &h.ctrs[i]
		if e.held != nil && e.req.All == r.All && slices.Equal(e.req.IDs, r.IDs) {
			continue
		}
		e.req = container.GPURequest{All: r.All, IDs: slices.Clone(r.IDs)}
		e.held = make([]bool, len(h.devs))
		for j, d := range h.devs {
			e.held[j] = r.Holds(d.index, d.uuid, d.mig...)
		}
	}
}

func (h *holdings) sameDevices(devs []gpu.Device) bool {
	if len(devs) != len(h.devs) {
		return false
	}
	for i := range devs {
		d, id := &devs[i], &h.devs[i]
		if d.Index != id.index || d.UUID != id.uuid || len(d.MIG) != len(id.mig) {
			return false
		}
		for j := range d.MIG {
			if d.MIG[j].UUID != id.mig[j] {
				return false
			}
		}
	}
	return true
}

// holds reports whether container i holds device j, as
// GPURequest.Holds says.
func (h *holdings) holds(i, j int) bool { return h.ctrs[i].held[j] }
