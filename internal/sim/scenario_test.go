package sim

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const gib = 1 << 30

func TestParseExample(t *testing.T) {
	got, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	gpu := func(i int) GPU {
		return GPU{
			Index:     i,
			UUID:      GPUUUID("lab-1", i),
			Model:     "NVIDIA H100 80GB HBM3",
			Memory:    80 * gib,
			IdlePower: 70,
			MaxPower:  700,
		}
	}
	want := &Scenario{
		Name:     "testdata/example.yaml",
		Node:     "lab-1",
		Start:    time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC),
		Duration: 24 * time.Hour,
		Interval: time.Second,
		GPUs:     []GPU{gpu(0), gpu(1), gpu(2), gpu(3)},
		Containers: []Container{{
			ID:     ContainerID("lab-1", "alice-train"),
			Name:   "alice-train",
			Image:  "pytorch/pytorch:2.4.0-cuda12.1",
			Labels: map[string]string{"gpumeter.user": "alice", "gpumeter.team": "nlp"},
			GPUs:   []int{0, 1},
			Start:  0,
			End:    6 * time.Hour,
			CPU:    1.5,
			RAM:    8 * gib,
			Phases: []Phase{
				{At: 0, Util: 90, Memory: 60 * gib},
				{At: 2 * time.Hour, Util: 0, Memory: 60 * gib},
			},
		}},
		HostProcesses: []HostProcess{{
			User:   "bob",
			GPU:    3,
			Start:  time.Hour,
			End:    time.Hour + 10*time.Minute,
			Util:   50,
			Memory: 2 * gib,
		}},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("Load(example.yaml) mismatch (-got +want):\n%s", diff)
	}
}

func TestParseDefaults(t *testing.T) {
	const in = `version: 1
duration: 2h
gpus:
  - memory: 16GiB
    idle_power: 20W
    max_power: 70.5W
containers:
  - name: c
    gpus: [0]
host_processes:
  - user: u
    gpu: 0
`
	got, err := Parse("d.yaml", []byte(in))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &Scenario{
		Name:     "d.yaml",
		Node:     "sim",
		Start:    time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Duration: 2 * time.Hour,
		Interval: time.Second,
		GPUs: []GPU{{
			Index: 0, UUID: GPUUUID("sim", 0), Model: "Simulated GPU",
			Memory: 16 * gib, IdlePower: 20, MaxPower: 70.5,
		}},
		Containers: []Container{{
			ID: ContainerID("sim", "c"), Name: "c", GPUs: []int{0}, End: 2 * time.Hour,
		}},
		HostProcesses: []HostProcess{{User: "u", GPU: 0, End: 2 * time.Hour}},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("Parse mismatch (-got +want):\n%s", diff)
	}
}

func TestIDs(t *testing.T) {
	id := ContainerID("lab-1", "alice-train")
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(id) {
		t.Errorf("ContainerID = %q, want 64 hex digits", id)
	}
	if again := ContainerID("lab-1", "alice-train"); again != id {
		t.Errorf("ContainerID again = %q, want %q", again, id)
	}
	if other := ContainerID("lab-2", "alice-train"); other == id {
		t.Errorf("ContainerID on another node = %q, want a different ID", other)
	}
	uuid := GPUUUID("lab-1", 3)
	if !regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(uuid) {
		t.Errorf("GPUUUID = %q, want GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", uuid)
	}
	if other := GPUUUID("lab-1", 2); other == uuid {
		t.Errorf("GPUUUID of another index = %q, want a different UUID", other)
	}
}

// TestParseUnits: a scenario reads durations, sizes and powers as the
// config does: days, a bare number of watts, fractions that make whole
// bytes.
func TestParseUnits(t *testing.T) {
	s, err := Parse("t.yaml", []byte(`version: 1
duration: 2d
interval: 1m
gpus:
  - memory: 1.5GiB
    idle_power: 70
    max_power: 700.5 W
containers:
  - name: a
    gpus: [0]
    start: 1d
    end: 1d12h
    ram: 512 MiB
`))
	if err != nil {
		t.Fatal(err)
	}
	g, c := s.GPUs[0], s.Containers[0]
	if s.Duration != 48*time.Hour || g.Memory != 3<<29 || g.IdlePower != 70 || g.MaxPower != 700.5 || c.Start != 24*time.Hour || c.End != 36*time.Hour || c.RAM != 512<<20 {
		t.Errorf("Parse = duration %v, memory %d, power %g..%g, container %v..%v ram %d; want 48h, 1.5GiB, 70..700.5, 24h..36h, 512MiB",
			s.Duration, g.Memory, g.IdlePower, g.MaxPower, c.Start, c.End, c.RAM)
	}
}

// head is a valid start for the error cases: lines 1 to 7, two GPUs.
const head = `version: 1
duration: 1h
gpus:
  - count: 2
    memory: 80GiB
    idle_power: 70W
    max_power: 700W
`

// errorCases are files with one problem each; FuzzParse starts from them too.
var errorCases = []struct {
	name string
	in   string
	want string // the error text contains it
}{
	// NVLink groups.
	{"nvlink not a list", head + "nvlink: 3\n", "want a list"},
	{"nvlink group of one", head + "nvlink: [[0]]\n", "an NVLink group has at least 2"},
	{"nvlink GPU out of range", head + "nvlink: [[0, 2]]\n", "GPU index 2 out of range"},
	{"nvlink GPU twice", head + "nvlink: [[0, 0, 1]]\n", "GPU 0 listed twice"},
	{"nvlink GPU in two groups", head + "nvlink: [[0, 1], [1, 0]]\n", "GPU 1 is also in nvlink[0]"},
	// The YAML itself.
	{"syntax", head + "containers:\n  - name: a\n   image: b\n", "t.yaml:8: did not find expected '-' indicator"},
	{"syntax first line", "version: 1: 2\n", "t.yaml:1: mapping values are not allowed"},
	{"control character", head + "node: \"a\x01\"\n", "t.yaml:8: control characters are not allowed"},
	{"empty file", "", "t.yaml: empty file"},
	{"two documents", head + "---\nversion: 1\n", "t.yaml:8: a scenario file holds one YAML document"},
	{"top not a mapping", "- version: 1\n", "t.yaml:1: want a mapping"},
	{"duplicate key", head + "duration: 2h\n", "t.yaml:8: duration: given twice (first at line 2)"},

	// Unknown keys at every level.
	{"unknown top key", head + "colour: red\n", "t.yaml:8: colour: unknown key"},
	{"seed", head + "seed: 42\n", "t.yaml:8: seed: unknown key (want one of version, node, start, duration, interval, gpus, nvlink, containers, host_processes, jobs, docker); version 1 has no randomness"},
	{"unknown gpu key", head + "    vram: 80GiB\n", "t.yaml:8: gpus[0].vram: unknown key"},
	{"unknown container key", head + "containers:\n  - name: a\n    imag: x\n", "t.yaml:10: containers[0].imag: unknown key"},
	{"unknown phase key", head + "containers:\n  - name: a\n    gpus: [0]\n    phases:\n      - at: 0s\n        utilisation: 5\n", "t.yaml:13: containers[0].phases[0].utilisation: unknown key"},
	{"unknown host key", head + "host_processes:\n  - user: bob\n    gpu: 0\n    pid: 7\n", "t.yaml:11: host_processes[0].pid: unknown key"},

	// Required keys and version.
	{"missing duration", "version: 1\n", "t.yaml:1: duration: required"},
	{"missing version", "duration: 1h\n", "t.yaml:1: version: required"},
	{"version 2", "version: 2\nduration: 1h\nfoo: bar\n", "t.yaml:1: version: unsupported version 2 (this gpumeter reads version 1)"},
	{"version not a number", "version: one\nduration: 1h\n", "t.yaml:1: version: want a whole number, got \"one\""},
	{"missing gpu memory", "version: 1\nduration: 1h\ngpus:\n  - idle_power: 1W\n    max_power: 2W\n", "t.yaml:4: gpus[0].memory: required"},
	{"missing container name", head + "containers:\n  - image: x\n", "t.yaml:9: containers[0].name: required"},
	{"missing phase at", head + "containers:\n  - name: a\n    gpus: [0]\n    phases:\n      - util: 5\n", "t.yaml:12: containers[0].phases[0].at: required"},
	{"unknown docker key", head + "docker:\n  labels: true\n", "t.yaml:9: docker.labels: unknown key (want one of containers)"},
	{"docker not a mapping", head + "docker: from_labels\n", `t.yaml:8: docker: want a mapping (keys containers), got "from_labels"`},
	{"docker containers unknown", head + "docker:\n  containers: labels\n", "t.yaml:9: docker.containers: unknown value \"labels\" (want from_labels: real containers labelled gpumeter.sim.util or gpumeter.sim.memory show GPU use; or ignore, the default)"},
	{"docker containers not a string", head + "docker:\n  containers: [from_labels]\n", "t.yaml:9: docker.containers: want a string, got a list"},
	{"docker containers null", head + "docker:\n  containers:\n", "t.yaml:9: docker.containers: want a string"},
	{"missing host user", head + "host_processes:\n  - gpu: 0\n", "t.yaml:9: host_processes[0].user: required"},
	{"missing job run", head + "jobs:\n  - name: j\n    user: ann\n", "t.yaml:9: jobs[0].run: required"},
	{"missing job user", head + "jobs:\n  - name: j\n    run: 1h\n", "t.yaml:9: jobs[0].user: required"},
	{"unknown job key", head + "jobs:\n  - name: j\n    user: ann\n    run: 1h\n    gpu: 1\n", "t.yaml:12: jobs[0].gpu: unknown key"},
	{"bad job time limit", head + "jobs:\n  - name: j\n    user: ann\n    run: 1h\n    time_limit: long\n", "t.yaml:12: jobs[0].time_limit: \"long\" is not a duration"},
	{"job asks too many GPUs", head + "jobs:\n  - name: j\n    user: ann\n    run: 1h\n    gpus: 3\n", "t.yaml:12: jobs[0].gpus: 3: a job asks for 1 to 2 GPUs (the scenario's)"},
	{"job submitted after the end", head + "jobs:\n  - name: j\n    user: ann\n    run: 1h\n    submit: 2h\n", "t.yaml:12: jobs[0].submit: 2h is not before the scenario's end (duration 1h)"},
	{"job run of zero", head + "jobs:\n  - name: j\n    user: ann\n    run: 0s\n", "t.yaml:11: jobs[0].run: must be more than 0, got 0s"},
	{"job util over 100", head + "jobs:\n  - name: j\n    user: ann\n    run: 1h\n    util: 101\n", "t.yaml:12: jobs[0].util: 101 is outside 0..100"},
	{"job memory over the GPU's", head + "jobs:\n  - name: j\n    user: ann\n    run: 1h\n    memory: 81GiB\n", "t.yaml:12: jobs[0].memory: 81GiB is more than GPU 0's memory (80GiB)"},
	{"job named as a container", head + "containers:\n  - name: a\njobs:\n  - name: a\n    user: ann\n    run: 1h\n", "t.yaml:11: jobs[0].name: \"a\" is also containers[0]'s name"},
	{"two jobs of one name", head + "jobs:\n  - name: j\n    user: ann\n    run: 1h\n  - name: j\n    user: ann\n    run: 1h\n", "t.yaml:12: jobs[1].name: \"j\" is also jobs[0]'s name"},

	// Values that do not parse.
	{"bad duration", "version: 1\nduration: 24\n", "t.yaml:2: duration: \"24\" is not a duration like 1s, 90s, 1h30m or 7d"},
	{"bad phase at", head + "containers:\n  - name: a\n    gpus: [0]\n    phases:\n      - at: soon\n", "t.yaml:12: containers[0].phases[0].at: \"soon\" is not a duration"},
	{"bad start time", "version: 1\nduration: 1h\nstart: yesterday\n", "t.yaml:3: start: bad time \"yesterday\""},
	{"bad size", "version: 1\nduration: 1h\ngpus:\n  - memory: 80GB\n    idle_power: 1W\n    max_power: 2W\n", "t.yaml:4: gpus[0].memory: \"80GB\": unknown unit \"GB\"; sizes take B, KiB, MiB, GiB or TiB (powers of 1024)"},
	{"bad ram", head + "containers:\n  - name: a\n    ram: lots\n", "t.yaml:10: containers[0].ram: \"lots\" is not a size like 512MiB or 80GiB"},
	{"negative size", head + "host_processes:\n  - user: bob\n    gpu: 0\n    memory: -1GiB\n", "t.yaml:11: host_processes[0].memory: \"-1GiB\" is negative"},
	{"bad power", "version: 1\nduration: 1h\ngpus:\n  - memory: 1GiB\n    idle_power: 70w\n    max_power: 2W\n", "t.yaml:5: gpus[0].idle_power: \"70w\": unknown unit \"w\"; powers are in watts, such as 70W"},
	{"util not a number", head + "host_processes:\n  - user: bob\n    gpu: 0\n    util: \"50\"\n", "t.yaml:11: host_processes[0].util: want a number, got \"50\""},
	{"gpu index not a number", head + "containers:\n  - name: a\n    gpus: [zero]\n", "t.yaml:10: containers[0].gpus[0]: want a whole number"},
	{"container not a mapping", head + "containers:\n  - just-a-name\n", "t.yaml:9: containers[0]: want a mapping"},
	{"containers not a list", head + "containers: {name: a}\n", "t.yaml:8: containers: want a list, got a mapping"},
	{"gpus entry not a mapping", "version: 1\nduration: 1h\ngpus:\n  - 4\n", "t.yaml:4: gpus[0]: want a mapping"},
	{"phase not a mapping", head + "containers:\n  - name: a\n    gpus: [0]\n    phases: [0s]\n", "t.yaml:11: containers[0].phases[0]: want a mapping"},
	{"labels not a mapping", head + "containers:\n  - name: a\n    labels: [a, b]\n", "t.yaml:10: containers[0].labels: want a mapping"},
	{"host process not a mapping", head + "host_processes:\n  - bob\n", "t.yaml:9: host_processes[0]: want a mapping"},
	{"label twice", head + "containers:\n  - name: a\n    labels:\n      x: 1\n      x: 2\n", "t.yaml:12: containers[0].labels.x: given twice"},
	{"label value a list", head + "containers:\n  - name: a\n    labels: {x: [1]}\n", "t.yaml:10: containers[0].labels.x: want a label value, got a list"},
	{"name not a scalar", head + "containers:\n  - name: [a]\n", "t.yaml:9: containers[0].name: want a string, got a list"},
	{"empty value", head + "containers:\n  - name: a\n    end:\n", "t.yaml:10: containers[0].end: want a duration, got nothing"},

	// Ranges.
	{"negative duration", "version: 1\nduration: -1h\n", "t.yaml:2: duration: \"-1h\" is negative"},
	{"zero duration", "version: 1\nduration: 0s\n", "t.yaml:2: duration: must be positive"},
	{"interval zero", "version: 1\nduration: 1h\ninterval: 0s\n", "t.yaml:3: interval: must be positive, got 0s"},
	{"interval negative", "version: 1\nduration: 1h\ninterval: -1s\n", "t.yaml:3: interval: \"-1s\" is negative"},
	{"interval past duration", "version: 1\nduration: 1h\ninterval: 2h\n", "t.yaml:3: interval: 2h is longer than the duration 1h"},
	{"count zero", "version: 1\nduration: 1h\ngpus:\n  - count: 0\n    memory: 1GiB\n    idle_power: 1W\n    max_power: 2W\n", "t.yaml:4: gpus[0].count: must be at least 1, got 0"},
	{"count huge", "version: 1\nduration: 1h\ngpus:\n  - count: 1000000000000\n    memory: 1GiB\n    idle_power: 1W\n    max_power: 2W\n", "t.yaml:4: gpus[0].count: 1000000000000 more GPUs"},
	{"max below idle", "version: 1\nduration: 1h\ngpus:\n  - count: 4\n    memory: 1GiB\n    idle_power: 70W\n    max_power: 60W\n", "t.yaml:7: gpus[0].max_power: 60W is less than idle_power 70W"},
	{"implausible power", "version: 1\nduration: 1h\ngpus:\n  - memory: 1GiB\n    idle_power: 70W\n    max_power: 70000W\n", "t.yaml:6: gpus[0].max_power: 70000W is not a GPU's power"},
	{"zero memory", "version: 1\nduration: 1h\ngpus:\n  - memory: 0\n    idle_power: 1W\n    max_power: 2W\n", "t.yaml:4: gpus[0].memory: must be more than 0"},
	{"empty node", head + "node: \"\"\n", "t.yaml:8: node: must not be empty"},
	{"phase util above 100", head + "containers:\n  - name: a\n    gpus: [0]\n    phases:\n      - at: 0s\n        util: 101\n", "t.yaml:13: containers[0].phases[0].util: 101 is outside 0..100"},
	{"host util negative", head + "host_processes:\n  - user: bob\n    gpu: 0\n    util: -5\n", "t.yaml:11: host_processes[0].util: -5 is outside 0..100"},
	{"phase memory above GPU", head + "containers:\n  - name: a\n    gpus: [0]\n    phases:\n      - at: 0s\n        memory: 81GiB\n", "t.yaml:13: containers[0].phases[0].memory: 81GiB is more than GPU 0's memory (80GiB)"},
	{"host memory above GPU", head + "host_processes:\n  - user: bob\n    gpu: 1\n    memory: 1TiB\n", "t.yaml:11: host_processes[0].memory: 1TiB is more than GPU 1's memory (80GiB)"},
	{"negative cpu", head + "containers:\n  - name: a\n    cpu: -1\n", "t.yaml:10: containers[0].cpu: must be a number of cores, 0 or more"},

	// GPU indexes.
	{"container gpu out of range", head + "containers:\n  - name: a\n    gpus:\n      - 0\n      - 5\n", "t.yaml:12: containers[0].gpus: GPU index 5 out of range (the scenario has 2 GPUs)"},
	{"container gpu negative", head + "containers:\n  - name: a\n    gpus: [-1]\n", "t.yaml:10: containers[0].gpus: GPU index -1 out of range"},
	{"container gpu twice", head + "containers:\n  - name: a\n    gpus: [1, 1]\n", "t.yaml:10: containers[0].gpus: GPU 1 listed twice"},
	{"phase gpu out of range", head + "containers:\n  - name: a\n    gpus: [0, 1]\n    phases:\n      - at: 0s\n        gpus: [2]\n", "t.yaml:13: containers[0].phases[0].gpus: GPU index 2 out of range (the scenario has 2 GPUs)"},
	{"phase gpu not the container's", head + "containers:\n  - name: a\n    gpus: [0]\n    phases:\n      - at: 0s\n        gpus: [1]\n", "t.yaml:13: containers[0].phases[0].gpus: GPU 1 is not among the container's gpus [0]"},
	{"phase gpus empty", head + "containers:\n  - name: a\n    gpus: [0]\n    phases:\n      - at: 0s\n        gpus: []\n", "t.yaml:13: containers[0].phases[0].gpus: empty"},
	{"host gpu out of range", head + "host_processes:\n  - user: bob\n    gpu: 2\n", "t.yaml:10: host_processes[0].gpu: GPU index 2 out of range (the scenario has 2 GPUs)"},
	{"phases without gpus", head + "containers:\n  - name: a\n    phases:\n      - at: 0s\n", "t.yaml:10: containers[0].phases: the container has no gpus"},

	// Phase order.
	{"phases out of order", head + "containers:\n  - name: a\n    gpus: [0]\n    phases:\n      - at: 1h\n      - at: 0s\n",
		"t.yaml:13: containers[0].phases[1].at: 0s comes before phases[0] (at 1h) for the same gpus"},
	{"phases duplicate at", head + "containers:\n  - name: a\n    gpus: [0]\n    phases:\n      - at: 0s\n      - at: 0s\n",
		"t.yaml:13: containers[0].phases[1].at: 0s is also the at of phases[0]"},
	{"phases same set written two ways", head + "containers:\n  - name: a\n    gpus: [0, 1]\n    phases:\n      - at: 5m\n      - at: 1m\n        gpus: [1, 0]\n",
		"t.yaml:13: containers[0].phases[1].at: 1m comes before phases[0] (at 5m)"},
	{"phases duplicate at on a shared GPU", head + "containers:\n  - name: a\n    gpus: [0, 1]\n    phases:\n      - at: 0s\n      - at: 0s\n        gpus: [1]\n",
		"t.yaml:13: containers[0].phases[1].at: 0s is also the at of phases[0], which applies to a GPU this phase applies to"},
	{"phase at past the container's end", head + "containers:\n  - name: a\n    gpus: [0]\n    start: 10m\n    end: 20m\n    phases:\n      - at: 10m\n",
		"t.yaml:14: containers[0].phases[0].at: 10m is not before the container's end (it runs for 10m)"},
	{"phase at negative", head + "containers:\n  - name: a\n    gpus: [0]\n    phases:\n      - at: -1s\n", "t.yaml:12: containers[0].phases[0].at: \"-1s\" is negative"},

	// Spans.
	{"end before start", head + "containers:\n  - name: a\n    start: 10m\n    end: 5m\n", "t.yaml:11: containers[0].end: 5m is not after start 10m"},
	{"end equals start", head + "containers:\n  - name: a\n    start: 10m\n    end: 10m\n", "t.yaml:11: containers[0].end: 10m is not after start 10m"},
	{"negative start", head + "containers:\n  - name: a\n    start: -5m\n", "t.yaml:10: containers[0].start: \"-5m\" is negative"},
	{"start past duration", head + "containers:\n  - name: a\n    start: 1h\n", "t.yaml:10: containers[0].start: 1h is not before the scenario's end (duration 1h)"},
	{"end past duration", head + "containers:\n  - name: a\n    end: 2h\n", "t.yaml:10: containers[0].end: 2h is past the scenario's end (duration 1h)"},
	{"host end past duration", head + "host_processes:\n  - user: bob\n    gpu: 0\n    end: 61m\n", "t.yaml:11: host_processes[0].end: 1h1m is past the scenario's end (duration 1h)"},
	{"host end before start", head + "host_processes:\n  - user: bob\n    gpu: 0\n    start: 5m\n    end: 1m\n", "t.yaml:12: host_processes[0].end: 1m is not after start 5m"},

	// Names, PIDs and overlaps.
	{"duplicate names", head + "containers:\n  - name: a\n  - name: b\n  - name: a\n", "t.yaml:11: containers[2].name: \"a\" is also the name of containers[0]"},
	{"empty name", head + "containers:\n  - name: \"\"\n", "t.yaml:9: containers[0].name: must not be empty"},
	{"pid zero", head + "containers:\n  - name: a\n    pid: 0\n", "t.yaml:10: containers[0].pid: 0 is not a host PID"},
	{"pid negative", head + "containers:\n  - name: a\n    pid: -4\n", "t.yaml:10: containers[0].pid: -4 is not a host PID"},
	{"pid too large", head + "containers:\n  - name: a\n    pid: 5000001\n", "t.yaml:10: containers[0].pid: 5000001 is not a host PID (want 1..4194304)"},
	{"pid twice", head + "containers:\n  - name: a\n    pid: 42\n  - name: b\n    pid: 42\n", "t.yaml:12: containers[1].pid: PID 42 also plays containers[0]"},
	{"host processes overlap", head + "host_processes:\n  - user: bob\n    gpu: 0\n    end: 10m\n  - user: bob\n    gpu: 0\n    start: 9m\n",
		"t.yaml:12: host_processes[1]: overlaps host_processes[0] (bob on GPU 0 from 0s to 10m)"},
}

func TestParseErrors(t *testing.T) {
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse("t.yaml", []byte(tt.in))
			if err == nil {
				t.Fatalf("Parse = %+v, nil; want an error containing %q", s, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse error = %q, want it to contain %q", err, tt.want)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("Parse error %T is no *Error", err)
			}
		})
	}
}

// Accepted, so that the checks above are no stricter than the format.
var validEdges = []struct{ name, in string }{
	{"containers share a GPU", head + "containers:\n  - name: a\n    gpus: [0]\n  - name: b\n    gpus: [0]\n"},
	{"host processes of one user on two GPUs", head + "host_processes:\n  - user: bob\n    gpu: 0\n  - user: bob\n    gpu: 1\n"},
	{"host processes back to back", head + "host_processes:\n  - user: bob\n    gpu: 0\n    end: 10m\n  - user: bob\n    gpu: 0\n    start: 10m\n"},
	{"host processes of two users overlap", head + "host_processes:\n  - user: bob\n    gpu: 0\n  - user: eve\n    gpu: 0\n"},
	{"phases for different gpus interleave", head + "containers:\n  - name: a\n    gpus: [0, 1]\n    phases:\n      - at: 10m\n        gpus: [0]\n      - at: 5m\n        gpus: [1]\n      - at: 20m\n        gpus: [0]\n"},
	{"phase for all then one", head + "containers:\n  - name: a\n    gpus: [0, 1]\n    phases:\n      - at: 10m\n      - at: 5m\n        gpus: [1]\n"},
	{"empty lists", head + "containers:\nhost_processes: []\n"},
	{"a job of every field", head + "jobs:\n  - {name: j, user: ann, team: nlp, image: train:1, gpus: 2, submit: 5m, time_limit: 2h, run: 1h, util: 50, memory: 8GiB}\n"},
	{"no gpus", "version: 1\nduration: 1h\n"},
	{"anchors", head + "containers:\n  - name: a\n    labels: &l {gpumeter.user: a}\n  - name: b\n    labels: *l\n"},
	{"pid without phases", head + "containers:\n  - name: a\n    gpus: [0]\n    pid: 4194304\n"},
	{"docker from_labels", head + "docker:\n  containers: from_labels\n"},
	{"docker ignore", head + "docker: {containers: ignore}\n"},
	{"docker empty", head + "docker: {}\n"},
	{"nvlink", head + "nvlink: [[0, 1]]\n"},
	{"nvlink empty", head + "nvlink: []\n"},
	{"full memory", head + "containers:\n  - name: a\n    gpus: [0]\n    phases:\n      - at: 0s\n        memory: 80GiB\n        util: 100\n"},
}

func TestParseValidEdges(t *testing.T) {
	for _, tt := range validEdges {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse("t.yaml", []byte(tt.in)); err != nil {
				t.Errorf("Parse: %v", err)
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	in := head + `containers:
  - name: a
    gpus: [0, 7]
    ram: 8GB
  - name: b
    image: x
    colour: red
`
	_, err := Parse("t.yaml", []byte(in))
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("Parse error = %v (%T), want Errors", err, err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Error())
	}
	// Decoding problems come first; range checks such as the GPU index wait
	// until the file decodes.
	want := []string{
		`t.yaml:11: containers[0].ram: "8GB": unknown unit "GB"; sizes take B, KiB, MiB, GiB or TiB (powers of 1024)`,
		`t.yaml:14: containers[1].colour: unknown key (want one of name, image, labels, gpus, start, end, cpu, ram, phases, pid)`,
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("errors mismatch (-got +want):\n%s", diff)
	}
}

// A file of a later version is reported as that, not as a pile of unknown keys.
func TestParseLaterVersion(t *testing.T) {
	_, err := Parse("t.yaml", []byte("colour: red\nversion: 2\nduration: 1h\nseed: 4\n"))
	want := "t.yaml:2: version: unsupported version 2 (this gpumeter reads version 1)"
	if err == nil || err.Error() != want {
		t.Errorf("Parse error = %v, want %q", err, want)
	}
}

// A start past the end is one mistake, not also an end before the start.
func TestParseNoEcho(t *testing.T) {
	_, err := Parse("t.yaml", []byte(head+"containers:\n  - name: a\n    start: 2h\n"))
	want := "t.yaml:10: containers[0].start: 2h is not before the scenario's end (duration 1h)"
	if err == nil || err.Error() != want {
		t.Errorf("Parse error = %v, want %q", err, want)
	}
}

func TestParseCapsErrorCount(t *testing.T) {
	var b strings.Builder
	b.WriteString(head + "containers:\n")
	for range 25 {
		b.WriteString("  - name: a\n    colour: red\n")
	}
	_, err := Parse("t.yaml", []byte(b.String()))
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("Parse error = %v, want Errors", err)
	}
	if len(es) != maxErrors+1 || !strings.Contains(es[maxErrors].Msg, "and 15 more problems") {
		t.Errorf("Parse gave %d errors ending %q; want %d and \"and 15 more problems\"", len(es), es[len(es)-1], maxErrors+1)
	}
}

func TestValidate(t *testing.T) {
	s := &Scenario{
		Node:     "n",
		Duration: time.Hour,
		Interval: time.Second,
		GPUs:     []GPU{{Index: 0, Memory: gib, IdlePower: 10, MaxPower: 20}},
		Containers: []Container{
			{Name: "a", GPUs: []int{0, 3}, End: time.Hour},
		},
	}
	err := s.Validate()
	if got, want := err.Error(), "containers[0].gpus: GPU index 3 out of range (the scenario has 1 GPU)"; got != want {
		t.Errorf("Validate = %q, want %q", got, want)
	}
	s.Containers[0].GPUs = []int{0}
	if err := s.Validate(); err != nil {
		t.Errorf("Validate = %v, want nil", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load = %v, want an error wrapping os.ErrNotExist", err)
	}
}

func FuzzParse(f *testing.F) {
	seeds, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range append(seeds, "demo.yaml") {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, tt := range errorCases {
		f.Add([]byte(tt.in))
	}
	for _, tt := range validEdges {
		f.Add([]byte(tt.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("f.yaml", data)
		if err != nil {
			if s != nil {
				t.Errorf("Parse returned a scenario and an error")
			}
			if !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Errorf("Parse error %q does not start with the file name", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Errorf("Validate after Parse: %v", err)
		}
		checkPlays(t, s)
	})
}

func TestParseDocker(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     bool
	}{
		{"left out", head, false},
		{"empty", head + "docker: {}\n", false},
		{"ignore", head + "docker:\n  containers: ignore\n", false},
		{"from_labels", head + "docker:\n  containers: from_labels\n", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse("t.yaml", []byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if s.RealContainers != tt.want {
				t.Errorf("RealContainers = %v, want %v", s.RealContainers, tt.want)
			}
		})
	}
	s, err := Load("testdata/from_labels.yaml")
	if err != nil {
		t.Fatalf("Load(from_labels.yaml): %v", err)
	}
	if !s.RealContainers {
		t.Errorf("from_labels.yaml: RealContainers = false, want true")
	}
}
