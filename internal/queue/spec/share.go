package spec

import (
	"strings"

	"github.com/gpumeter/gpumeter/internal/units"
)

// The priority classes of a job, lowest first; "" is ClassNormal.
const (
	ClassLow    = "low"
	ClassNormal = "normal"
	ClassHigh   = "high"
)

// Classes lists the priority classes, lowest first.
var Classes = []string{ClassLow, ClassNormal, ClassHigh}

// checkGPUs refuses a request for no GPU, for both whole GPUs and GPU
// memory, and for more of either than the rules give.
func checkGPUs(req Request, rules Rules) error {
	if req.GPUMemory > 0 {
		switch {
		case req.GPUs != 0:
			return refuse(BadRequest, "gpus", "--gpus and --gpu-memory together: a job asks for whole GPUs or for memory on one shared GPU, not both; drop one")
		case rules.MaxGPUMemory == 0:
			return refuse(TooBig, "gpu_memory", "no GPU of this node is shared (queue.shared_gpus is empty), so no job may ask for GPU memory; ask for whole GPUs with --gpus N")
		case req.GPUMemory > rules.MaxGPUMemory:
			return refuse(TooBig, "gpu_memory", "%s is more than any shared GPU can give (%s: its usable memory times queue.shared_memory_fraction); give --gpu-memory %s or less, or ask for a whole GPU with --gpus 1",
				units.FormatSize(req.GPUMemory), units.FormatSize(rules.MaxGPUMemory), units.FormatSize(rules.MaxGPUMemory))
		}
		return nil
	}
	switch {
	case req.GPUs <= 0:
		return refuse(BadRequest, "gpus", "a job asks for at least 1 GPU; give --gpus N with N > 0, or --gpu-memory SIZE on a shared GPU")
	case rules.MaxGPUs > 0 && req.GPUs > rules.MaxGPUs:
		return refuse(TooBig, "gpus", "%d GPUs is more than queue.max_gpus (%d); ask for at most %d", req.GPUs, rules.MaxGPUs, rules.MaxGPUs)
	}
	return nil
}

// checkClass refuses a class that is not one, and high from a submitter
// without the right to it.
func checkClass(class string, who Identity) error {
	switch class {
	case "", ClassLow, ClassNormal:
		return nil
	case ClassHigh:
		if !who.High {
			return refuse(PriorityNotAllowed, "priority", "%s may not submit with --priority high: it is for admins and the users in queue.priority.high_users; submit with normal or low", who.User)
		}
		return nil
	}
	return refuse(BadRequest, "priority", "%q is not a priority class; give --priority %s", class, strings.Join(Classes, ", "))
}
