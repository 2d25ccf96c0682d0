package spec

import (
	"slices"
	"strconv"
	"strings"
)

// The variables the queue sets in an array task's container: the task's
// index and the array's count of tasks, as Slurm's SLURM_ARRAY_TASK_ID
// and SLURM_ARRAY_TASK_COUNT. A request may not set them.
const (
	ArrayIndexEnv = "GPUMETER_ARRAY_INDEX"
	ArrayCountEnv = "GPUMETER_ARRAY_COUNT"
)

// queueEnv are the variables of the queue's own a request may not set,
// beside agentEnv and NVIDIA_*.
var queueEnv = []string{ArrayIndexEnv, ArrayCountEnv}

// ArrayPlace is a job's place in an array job, for its environment.
type ArrayPlace struct {
	Index, Count int
}

// queueSet says whether variable k is one the queue sets itself.
func queueSet(k string) bool { return slices.Contains(queueEnv, strings.ToUpper(k)) }

// arrayEnv is the environment an array task gets from the queue; nil for
// a job of its own.
func arrayEnv(a *ArrayPlace) []string {
	if a == nil {
		return nil
	}
	return []string{ArrayIndexEnv + "=" + strconv.Itoa(a.Index), ArrayCountEnv + "=" + strconv.Itoa(a.Count)}
}
