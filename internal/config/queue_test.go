package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestQueueDefaults(t *testing.T) {
	c := Default()
	want := Queue{
		Network: "isolated", PublishAddress: "127.0.0.1",
		MaxGPUs: 8, MaxCPUs: 16, MaxMemory: 64 << 30, MaxShmSize: 16 << 30,
		MaxTimeLimit: 7 * 24 * time.Hour, MinTimeLimit: time.Minute, MaxPids: 4096, MaxOpenFiles: 65536, Placement: "binpack",
		MaxGPUsPerUser: map[string]int{"default": 4}, OutsideMemoryThreshold: 0.05,
		GPUPassing: "auto", StopGrace: 30 * time.Second, MaxRequeue: 3, RequeueOn: []string{"lost", "engine_failure", "node_failure"}, MaxStartAttempts: 3,
		LogRetention:         7 * 24 * time.Hour,
		FairShare:            FairShare{Basis: "held", HalfLife: 7 * 24 * time.Hour, Refresh: time.Minute},
		Priority:             Priority{Weights: PriorityWeights{FairShare: 1, Age: 0.1, Class: 0.5}, AgeMax: 7 * 24 * time.Hour},
		SharedMemoryFraction: 0.9, MemoryOverrunGrace: 2 * time.Minute, MemoryOverrunAction: "stop",
		PlacementWindow: 10 * time.Minute, TargetUtilization: 0.7,
	}
	if diff := cmp.Diff(want, c.Queue); diff != "" {
		t.Errorf("default queue (-want +got):\n%s", diff)
	}
	if c.GroupFile != "/etc/group" {
		t.Errorf("host.group_file default = %q, want /etc/group", c.GroupFile)
	}
	if c.Queue.Enabled || len(c.Queue.Images) != 0 || c.Queue.DefaultTimeLimit != 0 {
		t.Errorf("the queue is off, allows no image and needs a time limit by default; got %+v", c.Queue)
	}
	for name, want := range map[string]string{
		"queue.max_memory": "64GiB", "queue.max_shm_size": "16GiB", "queue.max_time_limit": "7d",
		"queue.default_time_limit": "0s", "queue.max_gpus_per_user": "default=4", "queue.log_retention": "7d",
		"queue.outside_memory_threshold": "0.05", "queue.network": "isolated", "queue.max_pids": "4096", "queue.max_open_files": "65536", "queue.images": "", "queue.labels": "", "host.group_file": "/etc/group",
	} {
		k, ok := lookup(name)
		if !ok {
			t.Errorf("no key %s", name)
			continue
		}
		if got := k.Default(); got != want {
			t.Errorf("%s default = %q, want %q", name, got, want)
		}
	}
	// The queue on with nothing else set is valid: it refuses every job
	// and says why at submit, not at start-up.
	c.Queue.Enabled = true
	if err := c.Validate(); err != nil {
		t.Errorf("Validate(queue on, defaults) = %v", err)
	}
}

// TestQueueLab: the worked example of a lab server decodes to what it
// says, and is valid.
func TestQueueLab(t *testing.T) {
	c := Default()
	if err := c.LoadFile("testdata/queue-lab.yaml"); err != nil {
		t.Fatal(err)
	}
	want := Queue{
		Enabled:         true,
		Images:          []string{"registry.lab/*", "registry.lab/*/*", "nvcr.io/nvidia/pytorch:*"},
		RunAsRootImages: []string{"registry.lab/admin/*"},
		MountRoots:      []string{"/data", "/home", "/scratch"},
		CapAdd:          []string{"SYS_NICE", "CAP_IPC_LOCK"},
		Network:         "lab-jobs", PublishPorts: []string{"8800-8899", "6006"}, PublishAddress: "127.0.0.1",
		MaxGPUs: 4, MaxCPUs: 12.5, MaxMemory: 96 << 30, MaxShmSize: 32 << 30,
		MaxTimeLimit: 3 * 24 * time.Hour, MinTimeLimit: time.Minute, DefaultTimeLimit: 4 * time.Hour, Placement: "spread",
		MaxPids: 2048, MaxOpenFiles: 4096,
		MaxGPUsPerUser:         map[string]int{"default": 2, "alice": 8, "bob": 0},
		OutsideMemoryThreshold: 0.1, GPUPassing: "device_requests",
		StopGrace: time.Minute, MaxRequeue: 2, RequeueOn: []string{"lost", "engine_failure", "node_failure"}, MaxStartAttempts: 5, LogRetention: 14 * 24 * time.Hour,
		Notify:    []string{"start", "end"},
		FairShare: FairShare{Basis: "used", HalfLife: 14 * 24 * time.Hour, Refresh: 30 * time.Second},
		Shares:    map[string]float64{"nlp": 2, "vision": 1, "alice": 0.5},
		Priority: Priority{Weights: PriorityWeights{FairShare: 10, Age: 1, Class: 0},
			AgeMax: 2 * 24 * time.Hour, HighUsers: []string{"carol"}},
		MaxGPUsPerTeam:       map[string]int{"default": 4, "nlp": 6},
		Budgets:              map[string]float64{"nlp": 2000, "vision": 512.5},
		SharedGPUs:           []string{"6", "7"},
		SharedMemoryFraction: 0.85, MemoryOverrunGrace: time.Minute, MemoryOverrunAction: "warn",
		PlacementWindow: 5 * time.Minute, TargetUtilization: 0.75,
	}
	if diff := cmp.Diff(want, c.Queue); diff != "" {
		t.Errorf("queue (-want +got):\n%s", diff)
	}
	if c.GroupFile != "/etc/group" || c.PasswdFile != "/etc/passwd" {
		t.Errorf("host files %q, %q", c.PasswdFile, c.GroupFile)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	if got, want := c.Queue.Capabilities(), []string{"CAP_SYS_NICE", "CAP_IPC_LOCK"}; !cmp.Equal(got, want) {
		t.Errorf("Capabilities() = %v, want %v", got, want)
	}
	for user, want := range map[string]int{"alice": 8, "bob": 0, "carol": 2} {
		if got := c.Queue.UserCap(user); got != want {
			t.Errorf("UserCap(%s) = %d, want %d", user, got, want)
		}
	}
}

// TestQueueValidate: every queue value that parses but makes no sense
// is named with its key, the line of the file it came from, and what is
// wrong with it.
func TestQueueValidate(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"image pattern", "queue:\n  images: [\"registry.lab/[x\"]\n", `cfg.yaml:2: queue.images: bad pattern "registry.lab/[x": syntax error in pattern`},
		{"root image pattern", "queue:\n  run_as_root_images: a\\\n", `cfg.yaml:2: queue.run_as_root_images: bad pattern "a\\"`},
		{"label pattern", "queue:\n  labels: [\"gpumeter.[sim\"]\n", `cfg.yaml:2: queue.labels: bad pattern "gpumeter.[sim"`},
		{"relative mount root", "queue:\n  mount_roots: data\n", `cfg.yaml:2: queue.mount_roots: "data" is not an absolute path`},
		{"mount root /", "queue:\n  mount_roots: [/data, /]\n", `cfg.yaml:2: queue.mount_roots: "/" would let a job mount every host path`},
		{"mount root //", "queue:\n  mount_roots: //\n", `cfg.yaml:2: queue.mount_roots: "//" would let a job mount every host path`},
		{"mount root dot-dot", "queue:\n  mount_roots: /data/../etc\n", `cfg.yaml:2: queue.mount_roots: "/data/../etc" is not a clean path; write "/etc"`},
		{"mount root trailing slash", "queue:\n  mount_roots: /data/\n", `cfg.yaml:2: queue.mount_roots: "/data/" is not a clean path; write "/data"`},
		{"port word", "queue:\n  publish_ports: http\n", `cfg.yaml:2: queue.publish_ports: "http" is not a port or a range like 8000-8099`},
		{"port half range", "queue:\n  publish_ports: 8000-\n", `cfg.yaml:2: queue.publish_ports: "8000-" is not a port or a range`},
		{"port 0", "queue:\n  publish_ports: \"0\"\n", `cfg.yaml:2: queue.publish_ports: "0": port 0 is outside 1..65535`},
		{"port too high", "queue:\n  publish_ports: 8000-70000\n", `cfg.yaml:2: queue.publish_ports: "8000-70000": port 70000 is outside 1..65535`},
		{"port reversed", "queue:\n  publish_ports: 9000-8000\n", `cfg.yaml:2: queue.publish_ports: "9000-8000" ends before it starts; write 8000-9000`},
		{"publish address", "queue:\n  publish_address: localhost\n", `cfg.yaml:2: queue.publish_address: "localhost" is not an IP address`},
		{"cap", "queue:\n  cap_add: [SYS_NICE, SYS_GODMODE]\n", `cfg.yaml:2: queue.cap_add: "SYS_GODMODE" is not a Linux capability; known: AUDIT_CONTROL,`},
		{"host network", "queue:\n  network: host\n", `cfg.yaml:2: queue.network: "host" shares another network namespace with jobs`},
		{"container network", "queue:\n  network: container:vpn\n", `cfg.yaml:2: queue.network: "container:vpn" shares another network namespace`},
		{"empty network", "queue:\n  network: \"\"\n", `cfg.yaml:2: queue.network: must not be empty`},
		{"max gpus", "queue:\n  max_gpus: 0\n", `cfg.yaml:2: queue.max_gpus: 0 is below 1`},
		{"max cpus", "queue:\n  max_cpus: -1\n", `cfg.yaml:2: queue.max_cpus: -1 must be a number more than 0`},
		{"max memory", "queue:\n  max_memory: 0B\n", `cfg.yaml:2: queue.max_memory: must be more than 0`},
		{"max shm", "queue:\n  max_shm_size: 0\n", `cfg.yaml:2: queue.max_shm_size: must be more than 0`},
		{"max pids 0", "queue:\n  max_pids: 0\n", `cfg.yaml:2: queue.max_pids: 0 is not between 16 and 4194304`},
		{"max pids negative", "queue:\n  max_pids: -1\n", `cfg.yaml:2: queue.max_pids: -1 is not between 16`},
		{"max pids past the kernel's", "queue:\n  max_pids: 5000000\n", `cfg.yaml:2: queue.max_pids: 5000000 is not between 16 and 4194304`},
		{"max open files 0", "queue:\n  max_open_files: 0\n", `cfg.yaml:2: queue.max_open_files: 0 is not between 64 and 1048576`},
		{"max open files past nr_open", "queue:\n  max_open_files: 2000000\n", `cfg.yaml:2: queue.max_open_files: 2000000 is not between 64 and 1048576`},
		{"network named as ours", "queue:\n  network: gpumeter-jobs-lab\n", `cfg.yaml:2: queue.network: "gpumeter-jobs-lab" is the name of an isolated network the agent makes; write isolated`},
		{"max time limit", "queue:\n  max_time_limit: 0s\n", `cfg.yaml:2: queue.max_time_limit: 0s must be more than 0`},
		{"default over max", "queue:\n  max_time_limit: 1d\n  default_time_limit: 2d\n", `cfg.yaml:3: queue.default_time_limit: 2d is longer than queue.max_time_limit 1d`},
		{"user cap negative", "queue:\n  max_gpus_per_user:\n    alice: -1\n", `cfg.yaml:3: queue.max_gpus_per_user.alice: -1 is negative`},
		{"default cap negative", "queue:\n  max_gpus_per_user: {default: -2}\n", `cfg.yaml:2: queue.max_gpus_per_user.default: -2 is negative`},
		{"threshold 1", "queue:\n  outside_memory_threshold: 1\n", `cfg.yaml:2: queue.outside_memory_threshold: 1 is outside 0..1`},
		{"threshold negative", "queue:\n  outside_memory_threshold: -0.1\n", `cfg.yaml:2: queue.outside_memory_threshold: -0.1 is outside 0..1`},
		{"requeue", "queue:\n  max_requeue: -1\n", `cfg.yaml:2: queue.max_requeue: -1 is negative`},
		{"requeue_on", "queue:\n  requeue_on: [lost, failed]\n", `cfg.yaml:2: queue.requeue_on: "failed" is asked for per job, with gpumeter submit --requeue; queue.requeue_on names lost, engine_failure, node_failure`},
		{"requeue_on unknown", "queue:\n  requeue_on: [lost, fire]\n", `cfg.yaml:2: queue.requeue_on: "fire" is not a requeue cause; name lost, engine_failure, node_failure`},
		{"requeue_on twice", "queue:\n  requeue_on: [lost, lost]\n", `cfg.yaml:2: queue.requeue_on: lost is named twice`},
		{"start attempts", "queue:\n  max_start_attempts: 0\n", `cfg.yaml:2: queue.max_start_attempts: 0 is below 1`},
		{"notify", "queue:\n  notify: [start, begin]\n", `cfg.yaml:2: queue.notify: "begin" is not start or end`},
		{"queue without docker", "docker:\n  enabled: false\nqueue:\n  enabled: true\n", `cfg.yaml:4: queue.enabled: the queue runs its jobs in Docker; set docker.enabled too`},
		{"notify without a webhook", "queue:\n  enabled: true\n  notify: [end]\n", `cfg.yaml:3: queue.notify: job notices go to the policy's webhook; set policy.webhook.url too`},
		{"group file", "host:\n  group_file: \"\"\nqueue:\n  enabled: true\n", `cfg.yaml:2: host.group_file: must not be empty while the queue is on`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			if err := c.Parse("cfg.yaml", []byte(tt.yaml)); err != nil {
				t.Fatalf("Parse() = %v; the value should parse and fail Validate", err)
			}
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestQueueValidateInCode: values only code can set (the parsers refuse
// them) are still caught, without a place to name.
func TestQueueValidateInCode(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Queue)
		want string
	}{
		{"no default cap", func(q *Queue) { delete(q.MaxGPUsPerUser, "default") }, `queue.max_gpus_per_user: no "default" entry for the users not named`},
		{"placement", func(q *Queue) { q.Placement = "" }, `queue.placement: "" is not one of binpack, spread, target`},
		{"gpu passing", func(q *Queue) { q.GPUPassing = "nvidia" }, `queue.gpu_passing: "nvidia" is not one of auto, device_requests, cdi, env`},
		{"negative default limit", func(q *Queue) { q.DefaultTimeLimit = -time.Hour }, "queue.default_time_limit: -1h is negative; 0 makes --time-limit required"},
		{"negative grace", func(q *Queue) { q.StopGrace = -time.Second }, "queue.stop_grace: -1s is negative"},
		{"negative retention", func(q *Queue) { q.LogRetention = -time.Second }, "queue.log_retention: -1s is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mod(&c.Queue)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestQueueParseErrors: values the parsers refuse, and keys the queue
// does not have, name the file and line.
func TestQueueParseErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"unknown key", "queue:\n  enabled: true\n  max_gpu: 2\n", `cfg.yaml:3: unknown key "queue.max_gpu"; did you mean "queue.max_gpus"?`},
		{"unknown far key", "queue:\n  colour: blue\n", `cfg.yaml:2: unknown key "queue.colour"`},
		{"placement", "queue:\n  placement: random\n", `cfg.yaml:2: queue.placement: "random" is not one of binpack, spread, target`},
		{"gpu passing", "queue:\n  gpu_passing: nvidia\n", `cfg.yaml:2: queue.gpu_passing: "nvidia" is not one of auto, device_requests, cdi, env`},
		{"user cap word", "queue:\n  max_gpus_per_user:\n    alice: lots\n", `cfg.yaml:3: queue.max_gpus_per_user.alice: "lots" is not a whole number`},
		{"user cap not a mapping", "queue:\n  max_gpus_per_user: 4\n", `cfg.yaml:2: queue.max_gpus_per_user: want a mapping of name: value`},
		{"negative time limit", "queue:\n  default_time_limit: -1h\n", `cfg.yaml:2: queue.default_time_limit: "-1h" is negative`},
		{"size", "queue:\n  max_memory: 32G\n", `cfg.yaml:2: queue.max_memory: "32G": unknown unit "G"`},
		{"list of lists", "queue:\n  images:\n    - [a, b]\n", `cfg.yaml:3: queue.images: want a list of single values, got a list in it`},
		{"comma in an item", "queue:\n  images: [\"a,b\"]\n", `cfg.yaml:2: queue.images: "a,b" holds a comma; a list item may not`},
		{"empty item", "queue:\n  images: [a, \"\"]\n", `cfg.yaml:2: queue.images: an empty item`},
		{"list as mapping", "queue:\n  images: {a: b}\n", `cfg.yaml:2: queue.images: want a single value, got a mapping`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			err := c.Parse("cfg.yaml", []byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse() = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestQueueEnvAndFlags: lists and the per-user caps work from the
// environment and flags as from the file, and a bad value there is named
// by its variable.
func TestQueueEnvAndFlags(t *testing.T) {
	c := Default()
	err := c.LoadEnv([]string{
		"GPUMETER_QUEUE_ENABLED=true",
		"GPUMETER_QUEUE_IMAGES=registry.lab/*, nvcr.io/nvidia/*",
		"GPUMETER_QUEUE_MAX_GPUS_PER_USER=alice=8,bob=1",
		"GPUMETER_QUEUE_MAX_SHM_SIZE=8GiB",
		"GPUMETER_HOST_GROUP_FILE=/host/etc/group",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set("queue.publish_ports", "8800-8899"); err != nil {
		t.Fatal(err)
	}
	if !c.Queue.Enabled || !cmp.Equal(c.Queue.Images, []string{"registry.lab/*", "nvcr.io/nvidia/*"}) ||
		!cmp.Equal(c.Queue.MaxGPUsPerUser, map[string]int{"default": 4, "alice": 8, "bob": 1}) ||
		c.Queue.MaxShmSize != 8<<30 || c.GroupFile != "/host/etc/group" || !cmp.Equal(c.Queue.PublishPorts, []string{"8800-8899"}) {
		t.Errorf("queue from the environment and a flag = %+v, group file %q", c.Queue, c.GroupFile)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}

	c = Default()
	if err := c.LoadEnv([]string{"GPUMETER_QUEUE_MAX_GPUS_PER_USER=alice=-1"}); err != nil {
		t.Fatal(err)
	}
	if err, want := c.Validate(), "environment GPUMETER_QUEUE_MAX_GPUS_PER_USER: queue.max_gpus_per_user.alice: -1 is negative"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Validate() = %v, want %q", err, want)
	}
	c = Default()
	if err := c.LoadEnv([]string{"GPUMETER_QUEUE_NOTIFY=start,stop"}); err != nil {
		t.Fatal(err)
	}
	if err, want := c.Validate(), `environment GPUMETER_QUEUE_NOTIFY: queue.notify: "stop" is not start or end`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Validate() = %v, want %q", err, want)
	}
}

func TestParsePortRange(t *testing.T) {
	for in, want := range map[string][2]uint16{"8888": {8888, 8888}, "8000-8099": {8000, 8099}, " 1 - 65535 ": {1, 65535}, "22-22": {22, 22}} {
		lo, hi, err := ParsePortRange(in)
		if err != nil || lo != want[0] || hi != want[1] {
			t.Errorf("ParsePortRange(%q) = %d, %d, %v; want %d, %d", in, lo, hi, err, want[0], want[1])
		}
	}
	for _, in := range []string{"", "-", "x", "1-2-3", "+80", "80.5", "0-10", "65536", "10-1", "-80"} {
		if lo, hi, err := ParsePortRange(in); err == nil {
			t.Errorf("ParsePortRange(%q) = %d, %d, want an error", in, lo, hi)
		}
	}
}
