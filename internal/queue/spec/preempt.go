package spec

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// PreemptGraceEnv is the variable a preemptible job's container gets:
// the seconds between the SIGTERM of a preemption and the kill, so that
// a training loop knows how long it has to checkpoint. The queue sets
// it; a request may not.
const PreemptGraceEnv = "GPUMETER_PREEMPT_GRACE"

// checkPreemptible refuses what a preemptible job cannot be: a memory job
// (preemption frees whole GPUs; a shared GPU is never given whole).
func checkPreemptible(req Request) error {
	if req.Preemptible && req.GPUMemory > 0 {
		return refuse(BadRequest, "preemptible", "a memory job (--gpu-memory) cannot be preemptible: preemption frees whole GPUs; ask for --gpus, or drop --preemptible")
	}
	return nil
}

// SetPreemptGrace gives the container of a preemptible job grace in
// PreemptGraceEnv, in whole seconds (rounded down, at least 1), in place
// of any value it had.
func (s *Spec) SetPreemptGrace(grace time.Duration) {
	secs := max(int64(grace/time.Second), 1)
	s.Config.Env = slices.DeleteFunc(s.Config.Env, func(kv string) bool {
		return strings.HasPrefix(kv, PreemptGraceEnv+"=")
	})
	s.Config.Env = append(s.Config.Env, PreemptGraceEnv+"="+strconv.FormatInt(secs, 10))
}
