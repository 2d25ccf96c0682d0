// Package spec checks a job request against the queue's rules and builds
// the container spec the agent hands to Docker. Nothing from a request
// reaches Docker without passing Check: the request has no field for a
// privileged container, a host namespace, a device or a capability, and
// Build sets those itself.
package spec

import (
	"fmt"
	"math"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/gpumeter/gpumeter/internal/units"
)

// Request is what a user asks for with gpumeter submit, as values: the CLI
// and the API parse sizes and durations, and Check parses the rest.
type Request struct {
	GPUs int
	// GPUMemory asks for this many bytes on one GPU marked for sharing
	// (queue.shared_gpus) instead of whole GPUs; GPUs is then 0.
	GPUMemory uint64
	// Class is the job's priority class: low, normal or high; "" is
	// normal. High is for the users Identity.High marks.
	Class     string
	TimeLimit time.Duration
	Image     string
	Name      string
	Env       []string // K=V
	Mounts    []string // SRC:DST[:ro|:rw]
	Workdir   string
	CPUs      float64  // 0: no request, the rules' maximum applies
	Memory    uint64   // bytes; 0: no request, the rules' maximum applies
	ShmSize   uint64   // bytes; 0: Docker's default
	Pids      int      // processes and threads at once; 0: the rules' maximum
	Publish   []string // PORT[:CPORT], PORT on the host
	Labels    []string // K=V, keys matching Rules.Labels
	Command   []string
	// Preemptible lets the job's GPUs go to jobs that wait for them: it
	// is stopped (PreemptGraceEnv says with how much grace) and requeued.
	Preemptible bool
	// Array is the job's place in an array job, which the queue sets in
	// its environment (GPUMETER_ARRAY_INDEX, GPUMETER_ARRAY_COUNT); nil
	// for a job of its own.
	Array *ArrayPlace
}

// PortRange is an inclusive range of host ports.
type PortRange struct{ First, Last uint16 }

// Rules are the queue's allowlist settings as plain values. A zero maximum
// means no maximum.
type Rules struct {
	Images     []string // glob patterns (path.Match); empty refuses every job
	MountRoots []string // absolute directories; symlinks in them are resolved
	MaxGPUs    int
	// MaxGPUMemory is the most a memory job may ask for: the largest
	// usable memory of any shared GPU, times queue.shared_memory_fraction,
	// as the runtime measures it. 0: no GPU is shared, and every memory
	// job is refused.
	MaxGPUMemory uint64
	MaxCPUs      float64
	MaxMemory    uint64
	MaxShmSize   uint64
	// MaxPids is the PID limit of every job, and the most a request may
	// ask for; 0 is DefaultMaxPids, never no limit: a fork bomb in one
	// job must not take the host.
	MaxPids int
	// MaxOpenFiles is every job's nofile ulimit, soft and hard; 0 is
	// DefaultOpenFiles().
	MaxOpenFiles   int
	MaxTimeLimit   time.Duration
	MinTimeLimit   time.Duration // the shortest time limit; 0: none
	PublishPorts   []PortRange   // empty refuses every --publish
	PublishAddress string        // default 127.0.0.1
	// Network is the Docker network jobs join, by name (default
	// bridge). The agent resolves queue.network's isolated to the
	// node's own network, NetworkName, before the rules reach here.
	Network         string
	CapAdd          []string // added to every job after all are dropped
	RunAsRootImages []string // glob patterns of images that may run as uid 0
	UserLabel       string   // default gpumeter.user
	TeamLabel       string   // default gpumeter.team
	// Labels are the glob patterns (path.Match) of the label keys a job
	// may set on its container; empty refuses every label. The agent's
	// own keys are refused whatever the patterns say.
	Labels []string
	// ExemptLabels are the keys of policy.exempt.labels: a job that set
	// one would leave the policy's reach, so each is refused as the
	// agent's own keys are.
	ExemptLabels []string
}

// DefaultPublishAddress and DefaultNetwork apply when Rules leaves them
// empty: published ports are reachable from the host only (through SSH).
const (
	DefaultPublishAddress = "127.0.0.1"
	DefaultNetwork        = "bridge"
)

// DefaultMaxPids and DefaultMaxOpenFiles apply when Rules leaves MaxPids
// or MaxOpenFiles 0, so that every job has both limits; DefaultOpenFiles
// lowers the second to what this host allows.
const (
	DefaultMaxPids      = 4096
	DefaultMaxOpenFiles = 65536
)

// Bounds of the limits: PID_MAX_LIMIT of 64-bit Linux, and the kernel's
// default fs.nr_open, above which runc cannot set a nofile limit.
const (
	MostPids      = 1 << 22
	MostOpenFiles = 1 << 20
)

func (r Rules) maxPids() int {
	if r.MaxPids == 0 {
		return DefaultMaxPids
	}
	return r.MaxPids
}

func (r Rules) maxOpenFiles() int {
	if r.MaxOpenFiles == 0 {
		return DefaultOpenFiles()
	}
	return r.MaxOpenFiles
}

// DefaultOpenFiles is the nofile limit of a job whose rules name none:
// DefaultMaxOpenFiles, or this process's own hard limit where that is
// lower. runc cannot raise a container's hard limit above the engine's,
// and the agent runs beside the engine: on a host whose limits are lower
// than the default, a higher one would fail every start.
func DefaultOpenFiles() int {
	return OpenFilesFor(DefaultMaxOpenFiles)
}

// OpenFilesFor is n, or this process's hard RLIMIT_NOFILE where that is
// lower.
func OpenFilesFor(n int) int {
	if c := openFilesCeiling(); c > 0 && c < n {
		return c
	}
	return n
}

func (r Rules) publishAddress() string {
	if r.PublishAddress == "" {
		return DefaultPublishAddress
	}
	return r.PublishAddress
}

func (r Rules) network() string {
	if r.Network == "" {
		return DefaultNetwork
	}
	return r.Network
}

func (r Rules) userLabel() string {
	if r.UserLabel == "" {
		return "gpumeter.user"
	}
	return r.UserLabel
}

func (r Rules) teamLabel() string {
	if r.TeamLabel == "" {
		return "gpumeter.team"
	}
	return r.TeamLabel
}

// Validate reports settings that would make every spec unsafe or every
// check meaningless: a host or container network, a mount root of /, a
// malformed pattern. Check and Build call it first.
func (r Rules) Validate() error {
	for _, p := range r.Images {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("queue.images: pattern %q: %w", p, err)
		}
	}
	for _, p := range r.RunAsRootImages {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("queue.run_as_root_images: pattern %q: %w", p, err)
		}
	}
	for _, p := range r.Labels {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("queue.labels: pattern %q: %w", p, err)
		}
	}
	for _, root := range r.MountRoots {
		if !path.IsAbs(root) {
			return fmt.Errorf("queue.mount_roots: %q is not an absolute path", root)
		}
		if path.Clean(root) == "/" {
			return fmt.Errorf("queue.mount_roots: / would allow every host path; name the directories users may mount")
		}
	}
	switch {
	case r.MaxGPUs < 0 || r.MaxTimeLimit < 0:
		return fmt.Errorf("queue: max_gpus and max_time_limit may not be negative")
	case r.MaxCPUs < 0 || r.MaxCPUs > maxCPUs || math.IsNaN(r.MaxCPUs):
		return fmt.Errorf("queue.max_cpus: %g is not between 0 and %d", r.MaxCPUs, maxCPUs)
	case r.MaxMemory > math.MaxInt64 || r.MaxShmSize > math.MaxInt64 || r.MaxGPUMemory > math.MaxInt64:
		return fmt.Errorf("queue: max_memory, max_shm_size and the shared GPUs' memory must be below 8EiB")
	case r.MaxPids < 0 || r.MaxPids > MostPids:
		return fmt.Errorf("queue.max_pids: %d is not between 1 and %d", r.MaxPids, MostPids)
	case r.MaxOpenFiles < 0 || r.MaxOpenFiles > MostOpenFiles:
		return fmt.Errorf("queue.max_open_files: %d is not between 1 and %d", r.MaxOpenFiles, MostOpenFiles)
	case r.Network == IsolatedNetwork:
		return fmt.Errorf("queue.network: %s names no Docker network until the agent resolves it to the node's own (%s)", IsolatedNetwork, NetworkName("NODE"))
	}
	for _, pr := range r.PublishPorts {
		if pr.First == 0 || pr.First > pr.Last {
			return fmt.Errorf("queue.publish_ports: %d-%d is not a range of ports", pr.First, pr.Last)
		}
	}
	if _, err := netip.ParseAddr(r.publishAddress()); err != nil {
		return fmt.Errorf("queue.publish_address: %w", err)
	}
	switch n := r.network(); {
	case n == "host" || strings.HasPrefix(n, "container:"):
		return fmt.Errorf("queue.network: %q shares a namespace outside the job; use bridge, none or a network of its own", n)
	case !validName(n):
		return fmt.Errorf("queue.network: %q is not a network name", n)
	}
	for _, c := range r.CapAdd {
		if !validCap(c) {
			return fmt.Errorf("queue.cap_add: %q is not a capability name", c)
		}
	}
	for _, l := range []string{r.userLabel(), r.teamLabel()} {
		if !validName(l) {
			return fmt.Errorf("queue: label %q is not a label name", l)
		}
	}
	return nil
}

// Reason is the code of a refusal, one of Reasons. The API sends it as
// the field reason of a 400 refused.
type Reason string

// The reasons a request is refused.
const (
	TooBig           Reason = "too_big"
	ImageNotAllowed  Reason = "image_not_allowed"
	TimeLimitTooLong Reason = "time_limit_too_long"
	// TimeLimitTooShort is a time limit below queue.min_time_limit.
	TimeLimitTooShort Reason = "time_limit_too_short"
	// ImageInvalid is an image that is no reference Docker takes.
	ImageInvalid    Reason = "image_invalid"
	MountNotAllowed Reason = "mount_not_allowed"
	EnvNotAllowed   Reason = "env_not_allowed"
	PortNotAllowed  Reason = "port_not_allowed"
	BadRequest      Reason = "bad_request"
	// PriorityNotAllowed is --priority high from a user who is neither an
	// admin nor in queue.priority.high_users.
	PriorityNotAllowed Reason = "priority_not_allowed"
	// LabelNotAllowed is a label whose key matches no queue.labels
	// pattern, or is one the agent sets itself.
	LabelNotAllowed Reason = "label_not_allowed"
)

// Reasons lists every Reason, in the order the README documents them.
var Reasons = []Reason{TooBig, ImageNotAllowed, ImageInvalid, TimeLimitTooLong, TimeLimitTooShort, MountNotAllowed, EnvNotAllowed, PortNotAllowed, BadRequest, PriorityNotAllowed, LabelNotAllowed}

// Refusal is a request refused by a rule: the reason code, the request
// field at fault and a sentence naming the rule and how to fix the request.
type Refusal struct {
	Reason Reason
	Field  string
	Text   string
}

func (r *Refusal) Error() string { return r.Field + ": " + r.Text }

func refuse(reason Reason, field, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Field: field, Text: fmt.Sprintf(format, args...)}
}

// Identity is the submitter as the host knows them: uid, primary gid and
// supplementary groups from the passwd and group files, and the names the
// labels carry.
type Identity struct {
	UID    uint32
	GID    uint32
	Groups []uint32
	User   string
	Team   string
	// High says the submitter may ask for the high priority class: an
	// admin, or a user in queue.priority.high_users.
	High bool
}

// checked is a request that passed Check, parsed for Build.
type checked struct {
	env    []string
	mounts []resolvedMount
	ports  []portPair
	labels map[string]string
	root   bool
}

type portPair struct{ host, container uint16 }

// Check refuses a request that breaks a rule, with a *Refusal; any other
// error means the rules themselves are wrong. Mount sources are resolved
// on this host and checked for who's access, so Check reads the file
// system.
func Check(req Request, rules Rules, who Identity) error {
	_, err := check(req, rules, who)
	return err
}

func check(req Request, rules Rules, who Identity) (*checked, error) {
	if err := rules.Validate(); err != nil {
		return nil, err
	}
	var c checked
	if err := checkGPUs(req, rules); err != nil {
		return nil, err
	}
	if err := checkClass(req.Class, who); err != nil {
		return nil, err
	}
	if err := checkPreemptible(req); err != nil {
		return nil, err
	}
	switch {
	case req.TimeLimit <= 0:
		return nil, refuse(BadRequest, "time_limit", "a job needs a time limit above 0; give --time-limit such as 4h")
	case rules.MaxTimeLimit > 0 && req.TimeLimit > rules.MaxTimeLimit:
		return nil, refuse(TimeLimitTooLong, "time_limit", "%s is longer than queue.max_time_limit (%s); give --time-limit %s or less",
			units.FormatDuration(req.TimeLimit), units.FormatDuration(rules.MaxTimeLimit), units.FormatDuration(rules.MaxTimeLimit))
	case req.TimeLimit < rules.MinTimeLimit:
		return nil, refuse(TimeLimitTooShort, "time_limit", "%s is shorter than queue.min_time_limit (%s): the job would end before it started; give --time-limit %s or more",
			units.FormatDuration(req.TimeLimit), units.FormatDuration(rules.MinTimeLimit), units.FormatDuration(rules.MinTimeLimit))
	}
	if len(req.Command) == 0 || req.Command[0] == "" {
		return nil, refuse(BadRequest, "command", "the command is empty; give it after --, as in gpumeter submit ... -- python train.py")
	}
	for _, a := range req.Command {
		if strings.ContainsRune(a, 0) {
			return nil, refuse(BadRequest, "command", "an argument holds a NUL byte, which no process can receive")
		}
	}
	if req.Name != "" && !validJobName(req.Name) {
		return nil, refuse(BadRequest, "name", "name %q is not 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", req.Name)
	}
	if err := checkImage(req.Image, rules); err != nil {
		return nil, err
	}
	if who.UID == 0 {
		if !matchAny(rules.RunAsRootImages, req.Image) {
			return nil, refuse(ImageNotAllowed, "image", "jobs run as root only with an image in queue.run_as_root_images, and %q is not one; submit as your own user or ask an admin to add the image", req.Image)
		}
		c.root = true
	}
	env, err := checkEnv(req.Env)
	if err != nil {
		return nil, err
	}
	c.env = env
	if req.Workdir != "" && (!path.IsAbs(req.Workdir) || hasDotDot(req.Workdir) || strings.ContainsRune(req.Workdir, 0)) {
		return nil, refuse(BadRequest, "workdir", "workdir %q is not an absolute path without ..; give --workdir /path/in/container", req.Workdir)
	}
	mounts, err := checkMounts(req.Mounts, rules, who)
	if err != nil {
		return nil, err
	}
	c.mounts = mounts
	ports, err := checkPublish(req.Publish, rules)
	if err != nil {
		return nil, err
	}
	c.ports = ports
	labels, err := checkLabels(req.Labels, rules)
	if err != nil {
		return nil, err
	}
	c.labels = labels
	if err := checkResources(req, rules); err != nil {
		return nil, err
	}
	return &c, nil
}

func checkImage(image string, rules Rules) error {
	if image == "" {
		return refuse(BadRequest, "image", "a job needs an image; give --image such as nvcr.io/nvidia/pytorch:24.05-py3")
	}
	if strings.ContainsFunc(image, func(r rune) bool { return r <= ' ' || r == 0x7f }) || strings.HasPrefix(image, "-") {
		return refuse(ImageInvalid, "image", "image %q is not an image reference", image)
	}
	// Docker parses the reference with this grammar at create and
	// refuses what it cannot parse; refused here, the job never queues
	// to fail its starts.
	if _, err := reference.ParseNormalizedNamed(image); err != nil {
		return refuse(ImageInvalid, "image", "image %q is not an image reference Docker takes (%v); give one such as nvcr.io/nvidia/pytorch:24.05-py3: "+
			"a lowercase repository, a tag of letters, digits, '_', '.' and '-', or a digest such as @sha256: and 64 hex digits", image, err)
	}
	if len(rules.Images) == 0 {
		return refuse(ImageNotAllowed, "image", "the queue accepts no image: queue.images is empty; an admin lists the allowed image patterns there")
	}
	if !matchAny(rules.Images, image) {
		return refuse(ImageNotAllowed, "image", "image %q matches none of queue.images (%s); use a matching image or ask an admin to add a pattern",
			image, strings.Join(rules.Images, ", "))
	}
	return nil
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, err := path.Match(p, s); err == nil && ok {
			return true
		}
	}
	return false
}

// agentEnv are the variables the agent sets itself; a request may not.
var agentEnv = []string{"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"}

func checkEnv(env []string) ([]string, error) {
	seen := make(map[string]bool, len(env))
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, refuse(BadRequest, "env", "%q is not KEY=VALUE; give --env KEY=VALUE", kv)
		}
		if !validEnvName(k) {
			return nil, refuse(BadRequest, "env", "%q is not a variable name (letters, digits and _, not starting with a digit)", k)
		}
		if strings.EqualFold(k, PreemptGraceEnv) {
			return nil, refuse(EnvNotAllowed, "env", "%s is set by the queue for a --preemptible job from queue.preempt_grace; drop --env %s", k, k)
		}
		if strings.HasPrefix(strings.ToUpper(k), "NVIDIA_") || slices.Contains(agentEnv, strings.ToUpper(k)) {
			return nil, refuse(EnvNotAllowed, "env", "%s is set by the queue from the GPUs it gives the job (NVIDIA_* and CUDA_VISIBLE_DEVICES are not for requests); drop --env %s", k, k)
		}
		if queueSet(k) {
			return nil, refuse(EnvNotAllowed, "env", "%s is set by the queue for an array job's tasks; drop --env %s", k, k)
		}
		if strings.ContainsRune(v, 0) {
			return nil, refuse(BadRequest, "env", "the value of %s holds a NUL byte", k)
		}
		if seen[k] {
			return nil, refuse(BadRequest, "env", "%s is given twice; give each variable once", k)
		}
		seen[k] = true
		out = append(out, kv)
	}
	return out, nil
}

func checkPublish(publish []string, rules Rules) ([]portPair, error) {
	var out []portPair
	seen := map[uint16]bool{}
	for _, p := range publish {
		hs, cs, two := strings.Cut(p, ":")
		host, ok := parsePort(hs)
		cport := host
		if two {
			var ok2 bool
			cport, ok2 = parsePort(cs)
			ok = ok && ok2
		}
		if !ok {
			return nil, refuse(BadRequest, "publish", "%q is not PORT or PORT:CPORT with ports 1 to 65535", p)
		}
		if !inRanges(rules.PublishPorts, host) {
			return nil, refuse(PortNotAllowed, "publish", "host port %d is outside queue.publish_ports (%s); publish a port in that range", host, formatRanges(rules.PublishPorts))
		}
		if seen[host] {
			return nil, refuse(BadRequest, "publish", "host port %d is published twice", host)
		}
		seen[host] = true
		out = append(out, portPair{host: host, container: cport})
	}
	return out, nil
}

func parsePort(s string) (uint16, bool) {
	if s == "" || len(s) > 5 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, false
	}
	return uint16(n), true
}

func inRanges(ranges []PortRange, p uint16) bool {
	for _, r := range ranges {
		if p >= r.First && p <= r.Last {
			return true
		}
	}
	return false
}

func formatRanges(ranges []PortRange) string {
	if len(ranges) == 0 {
		return "empty: no port may be published"
	}
	parts := make([]string, len(ranges))
	for i, r := range ranges {
		parts[i] = fmt.Sprintf("%d-%d", r.First, r.Last)
	}
	return strings.Join(parts, ", ")
}

// minMemory is the least memory limit Docker accepts.
const minMemory = 6 << 20

// maxCPUs keeps NanoCPUs far from overflow when no maximum is set.
const maxCPUs = 1 << 16

func checkResources(req Request, rules Rules) error {
	switch {
	case req.CPUs < 0 || math.IsNaN(req.CPUs) || math.IsInf(req.CPUs, 0):
		return refuse(BadRequest, "cpus", "cpus %v is not a number of CPUs above 0; give --cpus such as 8", req.CPUs)
	case rules.MaxCPUs > 0 && req.CPUs > rules.MaxCPUs:
		return refuse(TooBig, "cpus", "%g CPUs is more than queue.max_cpus (%g); give --cpus %g or less", req.CPUs, rules.MaxCPUs, rules.MaxCPUs)
	case req.CPUs > maxCPUs:
		return refuse(TooBig, "cpus", "%g CPUs is more than any host has; give --cpus %d or less", req.CPUs, maxCPUs)
	case req.CPUs > 0 && req.CPUs < 0.01:
		return refuse(BadRequest, "cpus", "%g CPUs is less than Docker's least, 0.01; give --cpus 0.01 or more", req.CPUs)
	}
	switch {
	case rules.MaxMemory > 0 && req.Memory > rules.MaxMemory:
		return refuse(TooBig, "memory", "%s is more than queue.max_memory (%s); give --memory %s or less",
			units.FormatSize(req.Memory), units.FormatSize(rules.MaxMemory), units.FormatSize(rules.MaxMemory))
	case req.Memory > math.MaxInt64:
		return refuse(TooBig, "memory", "%s is more than any host has", units.FormatSize(req.Memory))
	case req.Memory > 0 && req.Memory < minMemory:
		return refuse(BadRequest, "memory", "%s is less than Docker's least, 6MiB; give --memory 6MiB or more", units.FormatSize(req.Memory))
	}
	switch most := rules.maxPids(); {
	case req.Pids < 0:
		return refuse(BadRequest, "pids", "pids %d is not a number of processes above 0; give --pids such as 512, or leave it out for queue.max_pids (%d)", req.Pids, most)
	case req.Pids > most:
		return refuse(TooBig, "pids", "%d processes is more than queue.max_pids (%d); give --pids %d or less", req.Pids, most, most)
	}
	switch {
	case rules.MaxShmSize > 0 && req.ShmSize > rules.MaxShmSize:
		return refuse(TooBig, "shm_size", "%s is more than queue.max_shm_size (%s); give --shm-size %s or less",
			units.FormatSize(req.ShmSize), units.FormatSize(rules.MaxShmSize), units.FormatSize(rules.MaxShmSize))
	case req.ShmSize > math.MaxInt64:
		return refuse(TooBig, "shm_size", "%s is more than any host has", units.FormatSize(req.ShmSize))
	}
	return nil
}

func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

func validJobName(s string) bool {
	if len(s) > 64 || !isAlnum(s[0]) {
		return false
	}
	return validName(s)
}

// validName accepts letters, digits, '.', '_' and '-', the characters of
// Docker's names and of label keys.
func validName(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func validCap(s string) bool {
	name := strings.TrimPrefix(strings.ToUpper(s), "CAP_")
	if name == "" || name == "ALL" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c == '_' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func hasDotDot(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}
