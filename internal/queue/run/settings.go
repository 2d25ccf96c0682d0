package run

import (
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// settings are what the service and the launcher both go by: the
// settings Reload changes, and what the latest tick saw of the GPUs and
// their use outside the queue, which sizes what a job may ask for.
type settings struct {
	mu               sync.Mutex
	rules            spec.Rules
	sched            queue.Config
	defaultTimeLimit time.Duration
	obs              Observation
}

// reload takes the settings a SIGHUP may change.
func (s *settings) reload(rules spec.Rules, sched queue.Config, defaultTimeLimit time.Duration) {
	s.mu.Lock()
	s.rules, s.sched, s.defaultTimeLimit = rules, sched, defaultTimeLimit
	s.mu.Unlock()
}

// observe takes what a tick saw, and reports whether it changed what the
// scheduler sees.
func (s *settings) observe(o Observation) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed = !sameObservation(s.obs, o, s.sched)
	s.obs = o
	return changed
}

// forPass returns what a pass schedules with.
func (s *settings) forPass() (Observation, queue.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.obs, s.sched
}

// forSubmit returns what a submission is checked against: the rules
// with the GPU memory a job may declare, the default time limit, and the
// GPUs for jobs of whole GPUs (-1: none seen yet).
func (s *settings) forSubmit() (rules spec.Rules, defaultLimit time.Duration, exclusive int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rules, defaultLimit = s.rules, s.defaultTimeLimit
	rules.MaxGPUMemory = s.memoryLimit(rules.MaxGPUMemory)
	return rules, defaultLimit, s.exclusiveGPUs()
}

// jobRules returns the rules a job's spec is built with.
func (s *settings) jobRules() spec.Rules {
	s.mu.Lock()
	defer s.mu.Unlock()
	rules := s.rules
	rules.MaxGPUMemory = s.memoryLimit(rules.MaxGPUMemory)
	return rules
}

// mountRoots returns the directories a job's mounts may come from.
func (s *settings) mountRoots() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rules.MountRoots
}

// memoryLimit is the most GPU memory a job may declare: from the shared
// GPUs seen (queue.shared_gpus), or given when none is configured (the
// rules' own, 0 unless a caller set one). The caller holds s.mu.
func (s *settings) memoryLimit(given uint64) uint64 {
	if len(s.sched.SharedGPUs) == 0 {
		return given
	}
	sched := s.sched
	sched.SharedGPUs = resolveShared(sched.SharedGPUs, s.obs.GPUs)
	return maxGPUMemory(sched, s.obs.GPUs)
}

// exclusiveGPUs is how many GPUs seen serve jobs of whole GPUs (those not
// shared), or -1 before the first tick: then nothing is refused for the
// host's size. The caller holds s.mu.
func (s *settings) exclusiveGPUs() int {
	if len(s.obs.GPUs) == 0 {
		return -1
	}
	shared := resolveShared(s.sched.SharedGPUs, s.obs.GPUs)
	return len(s.obs.GPUs) - len(shared)
}
