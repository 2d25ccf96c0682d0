package spec

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
)

// GPUPassing is how a job's GPUs reach its container (queue.gpu_passing
// once the agent has resolved auto).
type GPUPassing string

// The ways to pass GPUs.
const (
	// DeviceRequests asks the NVIDIA runtime for the GPUs by UUID, as
	// docker run --gpus does.
	DeviceRequests GPUPassing = "device_requests"
	// CDI asks for the CDI devices nvidia.com/gpu=UUID, as docker run
	// --device nvidia.com/gpu=UUID does.
	CDI GPUPassing = "cdi"
	// Env only sets NVIDIA_VISIBLE_DEVICES, for an engine whose default
	// runtime reads it, and for the sim source.
	Env GPUPassing = "env"
)

// JobLabel names the job on its container, so the meter and the
// reconciler find it.
const JobLabel = "gpumeter.job"

// NodeLabel names the node whose agent created a job's container, so
// that an agent lists, reconciles and stops only its own jobs' containers
// on an engine another agent (a test's, say) uses too.
const NodeLabel = "gpumeter.node"

// GPUMemoryLabel carries a memory job's declared GPU memory in bytes, so
// that the meter can hold the job to it.
const GPUMemoryLabel = "gpumeter.gpu_memory"

// ContainerName is the name of job id's container on node: one name per
// job, so a second create after a crash fails instead of starting the job
// twice. The node is in the name (gpumeter-job-lab-1-j-000123) so that two
// agents with ledgers of their own never take each other's names; without
// one the name is gpumeter-job-j-000123.
func ContainerName(node, jobID string) string {
	if node == "" {
		return "gpumeter-job-" + jobID
	}
	return "gpumeter-job-" + safeName(node) + "-" + jobID
}

// ForNode makes s the container of its job on node: named for both, and
// labelled with the node.
func (s *Spec) ForNode(node string) {
	if node == "" {
		return
	}
	s.Name = ContainerName(node, s.Config.Labels[JobLabel])
	s.Config.Labels[NodeLabel] = node
}

// IsolatedNetwork is the queue.network value that gives a node's jobs a
// bridge network of their own, NetworkName(node), on which no job reaches
// another's ports.
const IsolatedNetwork = "isolated"

// NetworkName is the name of node's isolated jobs network,
// gpumeter-jobs-NODE, the node made safe as ContainerName makes it.
func NetworkName(node string) string {
	if node == "" {
		return "gpumeter-jobs"
	}
	return "gpumeter-jobs-" + safeName(node)
}

// safeName is s with every character Docker refuses in a name replaced
// by '-'.
func safeName(s string) string {
	safe := []byte(s)
	for i, c := range safe {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			safe[i] = '-'
		}
	}
	return string(safe)
}

// Spec is a container as the agent creates it.
type Spec struct {
	Name       string
	Config     *container.Config
	HostConfig *container.HostConfig
}

// Build checks req as Check does and returns the container spec for job
// id holding gpus (UUIDs, one per GPU asked for, or the one shared GPU
// of a memory job), passed as passing. The
// request's fields fill only the image, command, workdir, env, labels, mounts,
// ports and limits; everything that isolates the job is set here. A
// refused request is a *Refusal.
func Build(req Request, rules Rules, who Identity, jobID string, gpus []string, passing GPUPassing) (*Spec, error) {
	c, err := check(req, rules, who)
	if err != nil {
		return nil, err
	}
	if !validName(jobID) || !isAlnum(jobID[0]) {
		return nil, fmt.Errorf("job id %q is not a container name", jobID)
	}
	want := req.GPUs
	if req.GPUMemory > 0 {
		want = 1 // memory on one shared GPU
	}
	if len(gpus) != want {
		return nil, fmt.Errorf("job %s asks for %d GPUs and was given %d", jobID, want, len(gpus))
	}
	for _, g := range gpus {
		if !validUUID(g) {
			return nil, fmt.Errorf("job %s: %q is not a GPU UUID", jobID, g)
		}
	}

	env := append(slices.Clip(c.env),
		"NVIDIA_VISIBLE_DEVICES="+visibleDevices(gpus),
		"CUDA_DEVICE_ORDER=PCI_BUS_ID",
	)
	env = append(env, arrayEnv(req.Array)...)
	cfg := &container.Config{
		Image:      req.Image,
		Cmd:        slices.Clone(req.Command),
		WorkingDir: req.Workdir,
		Env:        env,
		User:       strconv.FormatUint(uint64(who.UID), 10) + ":" + strconv.FormatUint(uint64(who.GID), 10),
		Labels:     make(map[string]string, len(c.labels)+4),
	}
	// The request's labels first, so the agent's own always win; Check
	// has refused the reserved keys already.
	for k, v := range c.labels {
		cfg.Labels[k] = v
	}
	cfg.Labels[JobLabel] = jobID
	cfg.Labels[rules.userLabel()] = who.User
	cfg.Labels[rules.teamLabel()] = who.Team
	if c.root {
		cfg.User = "0:0"
	}
	if req.GPUMemory > 0 {
		cfg.Labels[GPUMemoryLabel] = strconv.FormatUint(req.GPUMemory, 10)
	}

	host := &container.HostConfig{
		NetworkMode:   container.NetworkMode(rules.network()),
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		CapDrop:       []string{"ALL"},
		CapAdd:        slices.Clone(rules.CapAdd),
		SecurityOpt:   []string{"no-new-privileges:true"},
		IpcMode:       container.IPCModePrivate,
		CgroupnsMode:  container.CgroupnsModePrivate,
		ShmSize:       int64(req.ShmSize),
		GroupAdd:      groupAdd(who),
	}
	host.NanoCPUs = nanoCPUs(req.CPUs, rules.MaxCPUs)
	host.Memory = int64(limit(req.Memory, rules.MaxMemory))
	// Both limits always: without them one job's fork bomb or leaked
	// descriptors take the host, the agent and every other job.
	pids := int64(rules.maxPids())
	if req.Pids > 0 {
		pids = int64(req.Pids)
	}
	host.PidsLimit = &pids
	nofile := int64(rules.maxOpenFiles())
	host.Ulimits = []*container.Ulimit{{Name: "nofile", Soft: nofile, Hard: nofile}}

	for _, m := range c.mounts {
		host.Mounts = append(host.Mounts, mount.Mount{
			Type:        mount.TypeBind,
			Source:      m.source,
			Target:      m.target,
			ReadOnly:    m.readOnly,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
		})
	}

	if len(c.ports) > 0 {
		addr := netip.MustParseAddr(rules.publishAddress()) // Validate parsed it
		cfg.ExposedPorts = network.PortSet{}
		host.PortBindings = network.PortMap{}
		for _, p := range c.ports {
			port, _ := network.PortFrom(p.container, network.TCP)
			cfg.ExposedPorts[port] = struct{}{}
			host.PortBindings[port] = append(host.PortBindings[port], network.PortBinding{
				HostIP:   addr,
				HostPort: strconv.Itoa(int(p.host)),
			})
		}
	}

	switch passing {
	case DeviceRequests:
		host.DeviceRequests = []container.DeviceRequest{{
			Driver:       "nvidia",
			DeviceIDs:    slices.Clone(gpus),
			Capabilities: [][]string{{"gpu"}},
		}}
	case CDI:
		ids := make([]string, len(gpus))
		for i, g := range gpus {
			ids[i] = "nvidia.com/gpu=" + g
		}
		host.DeviceRequests = []container.DeviceRequest{{Driver: "cdi", DeviceIDs: ids}}
	case Env:
	default:
		return nil, fmt.Errorf("gpu passing %q is not device_requests, cdi or env", passing)
	}
	return &Spec{Name: ContainerName("", jobID), Config: cfg, HostConfig: host}, nil
}

// visibleDevices is NVIDIA_VISIBLE_DEVICES for gpus: set always, since
// CUDA images set it to all in their own ENV.
func visibleDevices(gpus []string) string {
	if len(gpus) == 0 {
		return "void"
	}
	return strings.Join(gpus, ",")
}

func groupAdd(who Identity) []string {
	var out []string
	for _, g := range who.Groups {
		s := strconv.FormatUint(uint64(g), 10)
		if g != who.GID && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// limit is the request, or the maximum where the request leaves it open.
func limit(req, most uint64) uint64 {
	if req == 0 {
		return most
	}
	return req
}

func nanoCPUs(req, most float64) int64 {
	if req == 0 {
		req = most
	}
	return int64(req * 1e9)
}

// validUUID accepts NVML's GPU-… and MIG-… UUIDs; a comma or space would
// let one UUID name more devices than the job holds.
func validUUID(s string) bool {
	rest, ok := strings.CutPrefix(s, "GPU-")
	if !ok {
		rest, ok = strings.CutPrefix(s, "MIG-")
	}
	if !ok || rest == "" {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !isAlnum(c) && c != '-' && c != '/' {
			return false
		}
	}
	return true
}
