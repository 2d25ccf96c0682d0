package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/units"
)

// Queue is the GPU job queue's settings (queue.*). The queue is off by
// default; the agent turns these plain values into the allowlist
// (queue/spec's Rules) and the scheduler's settings (queue's Config).
type Queue struct {
	// Enabled runs the queue in `gpumeter serve`.
	Enabled bool

	// Images are the glob patterns (path.Match) of the images a job may
	// run; empty refuses every job, and says so.
	Images []string
	// MountRoots are the absolute directories under which a job may
	// mount host paths; empty allows no mount.
	MountRoots []string
	// RunAsRootImages are the glob patterns of images whose jobs may
	// run as uid 0.
	RunAsRootImages []string
	// CapAdd are the capabilities added to every job after all are
	// dropped.
	CapAdd []string
	// Labels are the glob patterns (path.Match) of the label keys a job
	// may set with --label, such as gpumeter.project; empty refuses
	// every --label. The agent's own keys are refused whatever they say.
	Labels []string
	// Network is the Docker network jobs join: isolated (the default),
	// a bridge network the agent creates and owns for this node's jobs
	// with inter-container traffic off, or a network by name (bridge,
	// shared by every container on the host; none; a network of the
	// operator's).
	Network string
	// PublishPorts are the host port ranges ("8000-8099" or "8888") a
	// job may publish; empty refuses every --publish.
	PublishPorts []string
	// PublishAddress is the host address published ports bind to.
	PublishAddress string

	// The most one job may ask for. A zero here is not "unlimited":
	// Default sets each.
	MaxGPUs      int
	MaxCPUs      float64
	MaxMemory    uint64
	MaxShmSize   uint64
	MaxTimeLimit time.Duration
	// MinTimeLimit is the shortest time limit a job may ask for: below
	// it a job ends before its container has started, so it is refused
	// at submit.
	MinTimeLimit time.Duration
	// MaxPids is every job's PID limit (processes and threads at once),
	// and the most a job may ask for with --pids.
	MaxPids int
	// MaxOpenFiles is every job's nofile ulimit, soft and hard.
	MaxOpenFiles int
	// DefaultTimeLimit is the time limit of a job that names none; 0
	// makes --time-limit required.
	DefaultTimeLimit time.Duration

	// Placement is binpack, spread or target.
	Placement string
	// MaxGPUsPerUser caps the GPUs one user's jobs hold at once: the
	// "default" entry for everyone, other entries by user name.
	MaxGPUsPerUser map[string]int
	// OutsideMemoryThreshold is the fraction (0..1) of a GPU's memory
	// processes outside the queue may use before the GPU is not free.
	OutsideMemoryThreshold float64
	// GPUPassing is how a job is given its GPUs: auto, device_requests,
	// cdi or env.
	GPUPassing GPUPassing

	// StopGrace is how long docker stop waits at a time limit or a
	// cancel before it kills.
	StopGrace time.Duration
	// MaxRequeue is how many times a lost job goes back to the queue
	// before it fails.
	MaxRequeue int
	// RequeueOn are the causes (RequeueCauses) that put a running job
	// back in the queue; a cause left out ends the job failed.
	RequeueOn []string
	// MaxStartAttempts is how many failed starts a job gets before it
	// fails.
	MaxStartAttempts int
	// LogRetention is how long an ended job's container (and so its
	// logs) is kept before it is removed.
	LogRetention time.Duration
	// Notify lists the job events (start, end) the policy's webhook is
	// sent for every job; a job's --notify adds its own.
	Notify []string
	// PreemptAfter is how long a job that is not preemptible waits for
	// GPUs that preemptible jobs hold before they are preempted for it.
	PreemptAfter time.Duration
	// PreemptGrace is how long a preempted job has between SIGTERM and a
	// kill.
	PreemptGrace time.Duration

	// FairShare is how the queue counts past use (queue.fair_share.*).
	FairShare FairShare
	// Shares are the shares (> 0) of users and teams by name; an entry
	// names a user, a team, or both where a user and a team share a
	// name. Everyone not named has share 1: empty is equal shares.
	Shares map[string]float64
	// Priority is how a queued job's priority is made (queue.priority.*).
	Priority Priority
	// MaxGPUsPerTeam caps the GPUs one team's jobs hold at once, by team
	// name; a "default" entry caps every team not named. A team with no
	// entry and no "default" has no cap: empty (the default) caps no
	// team.
	MaxGPUsPerTeam map[string]int
	// Budgets are GPU-hours per calendar month (UTC) by team, counted on
	// FairShare.Basis; a team without an entry has no budget.
	Budgets map[string]float64
	// SharedGPUs are the GPUs (UUIDs, indices, or "all") that serve jobs
	// asking for GPU memory, and only those.
	SharedGPUs []string
	// SharedMemoryFraction is the fraction (0, 1] of a shared GPU's
	// memory the memory jobs on it plus use outside the queue may fill.
	SharedMemoryFraction float64
	// MemoryOverrunGrace is how long a memory job may use more GPU
	// memory than it asked for before MemoryOverrunAction.
	MemoryOverrunGrace time.Duration
	// MemoryOverrunAction is stop or warn.
	MemoryOverrunAction OverrunAction
	// PlacementWindow is the window of measured utilisation placement
	// target scores GPUs on.
	PlacementWindow time.Duration
	// TargetUtilization is the SM utilisation (0, 1] placement target
	// aims each GPU at.
	TargetUtilization float64
	// Fleet makes the node one of a fleet that shares the PostgreSQL
	// ledger's queue: one agent at a time schedules every node's GPUs,
	// and each node starts the jobs placed on it.
	Fleet bool
	// FleetAPI is the URL other agents of the fleet reach this one's
	// API at ("" none), for the logs of a job that runs here.
	FleetAPI string
	// FleetCAFile is the CA bundle (PEM) the other agents' https
	// fleet_api certificates are checked against; "": the system's.
	FleetCAFile string
}

// FairShare is how past use is counted for the queue's order.
type FairShare struct {
	// Basis is which GPU-hours count: used, allocated or held.
	Basis string
	// HalfLife is the age at which a GPU-hour counts half.
	HalfLife time.Duration
	// Refresh is how often the agent recomputes the factors in the
	// background.
	Refresh time.Duration
}

// Priority is the weights and limits of a queued job's priority:
// Weights.FairShare × fair-share factor + Weights.Age × age factor +
// Weights.Class × class factor.
type Priority struct {
	Weights PriorityWeights
	// AgeMax is the wait at which the age factor reaches 1.
	AgeMax time.Duration
	// HighUsers may submit jobs of class high; admins always may.
	HighUsers []string
}

// PriorityWeights weigh the factors of a job's priority; each is at
// least 0 and not all are 0.
type PriorityWeights struct {
	FairShare float64
	Age       float64
	Class     float64
}

// NotifyEvent is a job event that Queue.Notify and a job's --notify may
// name: the policy's webhook is sent when it happens.
type NotifyEvent string

// The job events.
const (
	NotifyStart NotifyEvent = "start"
	NotifyEnd   NotifyEvent = "end"
)

// ParseNotifyEvent parses an entry of queue.notify or of a job's --notify.
func ParseNotifyEvent(s string) (NotifyEvent, error) {
	switch n := NotifyEvent(s); n {
	case NotifyStart, NotifyEnd:
		return n, nil
	}
	return "", fmt.Errorf("%q is not start or end", s)
}

// GPUPassing is queue.gpu_passing: how a job is given its GPUs. Auto
// leaves the choice to the agent, which asks Docker at start; the others
// name the way (queue/spec's GPUPassing, which has no auto).
type GPUPassing string

// The ways of queue.gpu_passing.
const (
	PassingAuto           GPUPassing = "auto"
	PassingDeviceRequests GPUPassing = "device_requests"
	PassingCDI            GPUPassing = "cdi"
	PassingEnv            GPUPassing = "env"
)

// gpuPassings are the values of queue.gpu_passing, as its messages list
// them.
var gpuPassings = []string{string(PassingAuto), string(PassingDeviceRequests), string(PassingCDI), string(PassingEnv)}

// ParseGPUPassing parses a queue.gpu_passing value.
func ParseGPUPassing(s string) (GPUPassing, error) {
	if !slices.Contains(gpuPassings, s) {
		return "", fmt.Errorf("%q is not one of %s", s, strings.Join(gpuPassings, ", "))
	}
	return GPUPassing(s), nil
}

// NetworkIsolated is the queue.network value that gives the node's jobs a
// bridge network of their own, on which no job reaches another.
const NetworkIsolated = "isolated"

// Bounds of queue.max_pids and queue.max_open_files: a job's own runtime
// needs a few threads and descriptors; Linux allows at most PID_MAX_LIMIT
// tasks, and runc no nofile limit over fs.nr_open (1048576 by default).
const (
	minPids      = 16
	mostPids     = 1 << 22
	minOpenFiles = 64
	mostFiles    = 1 << 20
)

// DefaultUserCap is the MaxGPUsPerUser entry that caps every user not
// named on their own.
const DefaultUserCap = "default"

// DefaultQueue is the queue as gpumeter ships it: off, and refusing every
// job until queue.images allows some.
func DefaultQueue() Queue {
	return Queue{
		Network:                NetworkIsolated,
		PublishAddress:         "127.0.0.1",
		MaxGPUs:                8,
		MaxCPUs:                16,
		MaxMemory:              64 << 30,
		MaxShmSize:             16 << 30,
		MaxTimeLimit:           7 * 24 * time.Hour,
		MinTimeLimit:           time.Minute,
		MaxPids:                4096,
		MaxOpenFiles:           65536,
		Placement:              string(queue.Binpack),
		MaxGPUsPerUser:         map[string]int{DefaultUserCap: 4},
		OutsideMemoryThreshold: 0.05,
		GPUPassing:             PassingAuto,
		StopGrace:              30 * time.Second,
		MaxRequeue:             3,
		RequeueOn:              []string{string(RequeueLost), string(RequeueEngineFailure), string(RequeueNodeFailure)},
		MaxStartAttempts:       3,
		LogRetention:           7 * 24 * time.Hour,
		PreemptAfter:           10 * time.Minute,
		PreemptGrace:           2 * time.Minute,
		FairShare:              FairShare{Basis: BasisHeld, HalfLife: 7 * 24 * time.Hour, Refresh: time.Minute},
		Priority:               Priority{Weights: PriorityWeights{FairShare: 1, Age: 0.1, Class: 0.5}, AgeMax: 7 * 24 * time.Hour},
		SharedMemoryFraction:   0.9,
		MemoryOverrunGrace:     2 * time.Minute,
		MemoryOverrunAction:    OverrunStop,
		PlacementWindow:        10 * time.Minute,
		TargetUtilization:      0.7,
	}
}

// UserCap is the most GPUs the jobs of user may hold at once: their own
// entry of MaxGPUsPerUser, else its "default" entry.
func (q Queue) UserCap(user string) int {
	if n, ok := q.MaxGPUsPerUser[user]; ok {
		return n
	}
	return q.MaxGPUsPerUser[DefaultUserCap]
}

// Capabilities are CapAdd as Docker and the kernel name them, upper case
// with the CAP_ prefix, whichever way the setting wrote them.
func (q Queue) Capabilities() []string {
	out := make([]string, len(q.CapAdd))
	for i, c := range q.CapAdd {
		out[i] = canonicalCap(c)
	}
	return out
}

func canonicalCap(c string) string {
	c = strings.ToUpper(strings.TrimSpace(c))
	if !strings.HasPrefix(c, "CAP_") {
		c = "CAP_" + c
	}
	return c
}

// linuxCaps are the capability names of Linux 6.x (capabilities(7)), for
// queue.cap_add; a name the kernel does not know would fail every start.
var linuxCaps = []string{
	"AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF",
	"CHECKPOINT_RESTORE", "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH",
	"FOWNER", "FSETID", "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE",
	"LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN",
	"NET_BIND_SERVICE", "NET_BROADCAST", "NET_RAW", "PERFMON", "SETFCAP",
	"SETGID", "SETPCAP", "SETUID", "SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT",
	"SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO",
	"SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "SYSLOG", "WAKE_ALARM",
}

// Validate reports every queue setting that makes no sense, named as the
// queue.* keys are (without the prefix), each with what to write instead.
func (q Queue) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for _, l := range []struct {
		name     string
		patterns []string
	}{{"images", q.Images}, {"run_as_root_images", q.RunAsRootImages}, {"labels", q.Labels}} {
		for _, p := range l.patterns {
			if _, err := path.Match(p, ""); err != nil {
				bad("%s: bad pattern %q: %v (patterns take *, ? and [a-z]; * does not cross a /)", l.name, p, err)
			}
		}
	}
	for _, r := range q.MountRoots {
		switch {
		case !path.IsAbs(r):
			bad("mount_roots: %q is not an absolute path", r)
		case path.Clean(r) == "/":
			bad("mount_roots: %q would let a job mount every host path; name the directories jobs may mount", r)
		case path.Clean(r) != r:
			bad("mount_roots: %q is not a clean path; write %q", r, path.Clean(r))
		}
	}
	for _, c := range q.CapAdd {
		if !slices.Contains(linuxCaps, strings.TrimPrefix(canonicalCap(c), "CAP_")) {
			bad("cap_add: %q is not a Linux capability; known: %s", c, strings.Join(linuxCaps, ", "))
		}
	}
	switch n := q.Network; {
	case n == "":
		bad("network: must not be empty (isolated, none, bridge, or a network of your own)")
	case n == "host" || strings.HasPrefix(n, "container:"):
		bad("network: %q shares another network namespace with jobs; use isolated, none, or a network of your own", n)
	case strings.HasPrefix(n, "gpumeter-jobs"):
		bad("network: %q is the name of an isolated network the agent makes; write isolated", n)
	}
	for _, p := range q.PublishPorts {
		if _, _, err := ParsePortRange(p); err != nil {
			bad("publish_ports: %v", err)
		}
	}
	if net.ParseIP(q.PublishAddress) == nil {
		bad("publish_address: %q is not an IP address (127.0.0.1 keeps published ports to SSH tunnels)", q.PublishAddress)
	}
	if q.MaxGPUs < 1 {
		bad("max_gpus: %d is below 1", q.MaxGPUs)
	}
	if !(q.MaxCPUs > 0) || math.IsInf(q.MaxCPUs, 0) {
		bad("max_cpus: %v must be a number more than 0", q.MaxCPUs)
	}
	if q.MaxMemory == 0 {
		bad("max_memory: must be more than 0")
	}
	if q.MaxShmSize == 0 {
		bad("max_shm_size: must be more than 0")
	}
	if q.MaxPids < minPids || q.MaxPids > mostPids {
		bad("max_pids: %d is not between %d and %d (processes and threads of one job)", q.MaxPids, minPids, mostPids)
	}
	if q.MaxOpenFiles < minOpenFiles || q.MaxOpenFiles > mostFiles {
		bad("max_open_files: %d is not between %d and %d (fs.nr_open's default)", q.MaxOpenFiles, minOpenFiles, mostFiles)
	}
	if q.MaxTimeLimit <= 0 {
		bad("max_time_limit: %s must be more than 0", units.FormatDuration(q.MaxTimeLimit))
	}
	if q.MinTimeLimit < 0 {
		bad("min_time_limit: %s is negative", units.FormatDuration(q.MinTimeLimit))
	}
	if q.MaxTimeLimit > 0 && q.MinTimeLimit > q.MaxTimeLimit {
		bad("min_time_limit: %s is longer than queue.max_time_limit %s", units.FormatDuration(q.MinTimeLimit), units.FormatDuration(q.MaxTimeLimit))
	}
	if q.DefaultTimeLimit > 0 && q.DefaultTimeLimit < q.MinTimeLimit {
		bad("default_time_limit: %s is shorter than queue.min_time_limit %s", units.FormatDuration(q.DefaultTimeLimit), units.FormatDuration(q.MinTimeLimit))
	}
	if q.DefaultTimeLimit < 0 {
		bad("default_time_limit: %s is negative; 0 makes --time-limit required", units.FormatDuration(q.DefaultTimeLimit))
	}
	if q.MaxTimeLimit > 0 && q.DefaultTimeLimit > q.MaxTimeLimit {
		bad("default_time_limit: %s is longer than queue.max_time_limit %s", units.FormatDuration(q.DefaultTimeLimit), units.FormatDuration(q.MaxTimeLimit))
	}
	if names := queue.PlacementNames(); !slices.Contains(names, q.Placement) {
		bad("placement: %q is not one of %s", q.Placement, strings.Join(names, ", "))
	}
	if _, err := ParseGPUPassing(string(q.GPUPassing)); err != nil {
		bad("gpu_passing: %v", err)
	}
	if _, ok := q.MaxGPUsPerUser[DefaultUserCap]; !ok {
		bad("max_gpus_per_user: no %q entry for the users not named", DefaultUserCap)
	}
	for _, user := range slices.Sorted(maps.Keys(q.MaxGPUsPerUser)) {
		if n := q.MaxGPUsPerUser[user]; n < 0 {
			bad("max_gpus_per_user.%s: %d is negative", user, n)
		}
	}
	if t := q.OutsideMemoryThreshold; !(t >= 0 && t < 1) {
		bad("outside_memory_threshold: %v is outside 0..1 (a fraction of a GPU's memory, below 1)", t)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"stop_grace", q.StopGrace}, {"log_retention", q.LogRetention}} {
		if d.v < 0 {
			bad("%s: %s is negative", d.name, units.FormatDuration(d.v))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"preempt_after", q.PreemptAfter}, {"preempt_grace", q.PreemptGrace}} {
		if d.v < time.Second {
			bad("%s: %s is below 1s", d.name, units.FormatDuration(d.v))
		}
	}
	if q.MaxRequeue < 0 {
		bad("max_requeue: %d is negative", q.MaxRequeue)
	}
	for i, c := range q.RequeueOn {
		if _, err := ParseRequeueCause(c); err != nil {
			bad("requeue_on: %v", err)
		} else if slices.Contains(q.RequeueOn[:i], c) {
			bad("requeue_on: %s is named twice", c)
		}
	}
	if q.MaxStartAttempts < 1 {
		bad("max_start_attempts: %d is below 1", q.MaxStartAttempts)
	}
	for _, n := range q.Notify {
		if _, err := ParseNotifyEvent(n); err != nil {
			bad("notify: %v", err)
		}
	}
	errs = append(errs, q.shareErrors()...)
	return errors.Join(errs...)
}

// ParsePortRange reads a queue.publish_ports entry: a port ("8888") or an
// inclusive range ("8000-8099") within 1..65535.
func ParsePortRange(s string) (lo, hi uint16, err error) {
	a, b, isRange := strings.Cut(strings.TrimSpace(s), "-")
	if !isRange {
		b = a
	}
	port := func(p string) (uint16, error) {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%q is not a port or a range like 8000-8099", s)
		}
		if n < 1 || n > 65535 {
			return 0, fmt.Errorf("%q: port %d is outside 1..65535", s, n)
		}
		return uint16(n), nil
	}
	if lo, err = port(a); err != nil {
		return 0, 0, err
	}
	if hi, err = port(b); err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, fmt.Errorf("%q ends before it starts; write %d-%d", s, hi, lo)
	}
	return lo, hi, nil
}

// QueueErrors are the errors of the queue settings, named by their keys,
// and of the host files the queue reads while it is on.
func (c *Config) QueueErrors() []error {
	var errs []error
	if err := c.Queue.Validate(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			errs = append(errs, errors.New("queue."+line))
		}
	}
	if c.Queue.Fleet && (!c.Queue.Enabled || !c.LedgerEnabled || c.LedgerDSN == "") {
		errs = append(errs, errors.New("queue.fleet: a fleet shares one queue in a PostgreSQL ledger; set queue.enabled, ledger.enabled and ledger.dsn (postgres://...) too"))
	}
	if c.Queue.FleetAPI != "" && !strings.HasPrefix(c.Queue.FleetAPI, "http://") && !strings.HasPrefix(c.Queue.FleetAPI, "https://") {
		errs = append(errs, fmt.Errorf("queue.fleet_api: %q is not an http:// or https:// URL", c.Queue.FleetAPI))
	}
	if c.Queue.Enabled && !c.DockerEnabled {
		errs = append(errs, errors.New("queue.enabled: the queue runs its jobs in Docker; set docker.enabled too"))
	}
	if c.Queue.Enabled && len(c.Queue.Notify) > 0 && c.Policy.Webhook.URL == "" {
		errs = append(errs, errors.New("queue.notify: job notices go to the policy's webhook; set policy.webhook.url too"))
	}
	if c.Queue.Enabled {
		for name, v := range map[string]string{"host.passwd_file": c.PasswdFile, "host.group_file": c.GroupFile} {
			if v == "" {
				errs = append(errs, fmt.Errorf("%s: must not be empty while the queue is on: jobs run as their submitter's uid and groups", name))
			}
		}
	}
	return errs
}
