// Package sim plays scenario files (format v1, see docs/scenario.md): simulated
// GPUs, the containers that hold them and the host processes on them, over
// time. A Source made from a Scenario is at once a GPU source, a container
// inventory and a process resolver, on a virtual clock for simulate and
// tests or on the wall clock, looping, for serve --sim and --demo.
package sim

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Scenario is a parsed scenario file. Offsets are from Start; a container's
// phase offsets are from the container's own start.
type Scenario struct {
	Name          string // the file name, for errors
	Node          string
	Start         time.Time
	Duration      time.Duration
	Interval      time.Duration
	GPUs          []GPU
	Containers    []Container
	HostProcesses []HostProcess
	// Jobs are queue jobs submitted during the scenario (jobs: in the
	// file): simulate places them with the queue's scheduler and plays
	// each as the container the queue would start.
	Jobs []Job
	// NVLink are groups of GPU indexes whose GPUs all share NVLink with
	// each other (nvlink: in the file); a GPU is in at most one.
	NVLink [][]int
	// RealContainers is what docker.containers: from_labels sets: the
	// host's real containers labelled gpumeter.sim.util or
	// gpumeter.sim.memory show GPU processes on the GPUs they were given
	// (see Source.PlayContainers). A scenario container with a pid: is
	// played by its phases either way.
	RealContainers bool
}

// GPU is one simulated device. Index is its position in Scenario.GPUs.
type GPU struct {
	Index     int
	UUID      string
	Model     string
	Memory    uint64  // bytes
	IdlePower float64 // W at 0 % utilisation
	MaxPower  float64 // W at 100 % utilisation
}

// Container is one simulated container. It runs on [Start, End).
type Container struct {
	ID     string
	Name   string
	Image  string
	Labels map[string]string
	GPUs   []int // indexes into Scenario.GPUs
	Start  time.Duration
	End    time.Duration // Scenario.Duration when the file gives none
	CPU    float64       // busy cores
	RAM    uint64        // bytes
	Phases []Phase
	// PID is a real host PID that plays the container's GPU process, 0 when
	// the file gives none. Such a container is described by the real
	// container inventory, not by the Source.
	PID int
}

// Phase is what a container does on its GPUs from At on.
type Phase struct {
	At     time.Duration // from the container's start
	Util   float64       // SM utilisation, percent
	Memory uint64        // bytes held on each GPU the phase applies to
	GPUs   []int         // the GPUs it applies to; nil means all of the container's
}

// Job is a queue job: submitted at Submit, asking for GPUs whole GPUs
// and a time limit (0: none), it runs for Run once started, with Util
// and Memory on each of its GPUs; past its time limit it is stopped.
type Job struct {
	Name, User, Team, Image string
	GPUs                    int
	Submit, TimeLimit, Run  time.Duration
	Util                    float64
	Memory                  uint64
}

// HostProcess is a GPU process outside any container, running on [Start, End).
type HostProcess struct {
	User   string
	GPU    int
	Start  time.Duration
	End    time.Duration
	Util   float64
	Memory uint64
}

// Defaults and limits of format v1.
const (
	defaultNode     = "sim"
	defaultInterval = time.Second
	defaultModel    = "Simulated GPU"
	// maxGPUs bounds a scenario's GPU count; far more than any node has,
	// small enough that a typo in count cannot exhaust memory.
	maxGPUs = 256
	// maxPower bounds a GPU's power, so that energy counters stay far from
	// overflow over any duration a scenario can name.
	maxPower = 10000.0
	// maxHostPID is the largest PID Linux can hand out (PID_MAX_LIMIT on
	// 64-bit); synthetic PIDs start above it so they never meet a real one.
	maxHostPID   = 1 << 22
	syntheticPID = 5_000_000
	// maxAliases bounds how many YAML aliases a file may resolve, so that a
	// few lines of anchors cannot stand for millions of entries.
	maxAliases = 10_000
)

var defaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

//go:embed demo.yaml
var demoYAML []byte

// Demo returns the built-in demo scenario: one hour on four GPUs that shows
// every pattern gpumeter reports on. Each call returns a fresh copy.
func Demo() *Scenario {
	s, err := Parse("demo.yaml", demoYAML)
	if err != nil {
		// The demo is part of the binary and a test parses it.
		panic("sim: built-in demo scenario: " + err.Error())
	}
	return s
}

// IdleWatts gives each GPU's idle power by UUID: a scenario's idle_power
// counts as configured, so the meter splits energy by it exactly.
func (s *Scenario) IdleWatts() map[string]float64 {
	m := make(map[string]float64, len(s.GPUs))
	for _, g := range s.GPUs {
		m[g.UUID] = g.IdlePower
	}
	return m
}

// Load reads and parses the scenario file at path.
func Load(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	return Parse(path, data)
}

// Parse parses and validates a scenario. name is the file name that errors
// carry. The error, if any, is an Errors listing every problem found, each
// with its line and key.
func Parse(name string, data []byte) (*Scenario, error) {
	d := &decoder{
		file: name,
		pos:  positions{lines: make(map[string]int)},
	}
	s := d.parse(data)
	if len(d.errs) > 0 {
		return nil, d.errs.finish()
	}
	if err := validate(s, name, &d.pos); err != nil {
		return nil, err
	}
	return s, nil
}

// ContainerID is the ID the simulator gives the container named name on
// node: 64 hex digits like a Docker ID, the same for every run.
func ContainerID(node, name string) string {
	sum := sha256.Sum256([]byte(node + "\x00" + name))
	return hex.EncodeToString(sum[:])
}

// GPUUUID is the UUID the simulator gives GPU index on node, in NVIDIA's
// form (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), the same for every run.
func GPUUUID(node string, index int) string {
	sum := sha256.Sum256([]byte(node + "\x00gpu\x00" + strconv.Itoa(index)))
	h := hex.EncodeToString(sum[:16])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
