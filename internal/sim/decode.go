package sim

import (
	"errors"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/yamlx"
)

// decoder turns the YAML tree into a Scenario, reporting what does not fit
// the format: unknown keys, wrong kinds of node, values that do not parse.
// Range and consistency checks come after, in validate.
type decoder struct {
	file    string
	pos     positions
	errs    Errors
	aliases int
}

func (d *decoder) errorf(line int, key, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// document reads the file's single YAML document.
func (d *decoder) document(data []byte) *yaml.Node {
	root, err := yamlx.Document(data)
	var syntax *yamlx.SyntaxError
	var second *yamlx.SecondDocumentError
	switch {
	case errors.As(err, &syntax):
		d.errorf(syntax.ParserLine, "", "%s", syntax.Msg)
	case errors.As(err, &second):
		d.errorf(second.Line, "", "a scenario file holds one YAML document; found another")
	case err != nil:
		d.errorf(0, "", "%v", err)
	case root == nil:
		d.errorf(0, "", "empty file (a scenario needs at least version and duration)")
	}
	return root
}

var topKeys = []string{"version", "node", "start", "duration", "interval", "gpus", "nvlink", "containers", "host_processes", "jobs", "docker"}

func (d *decoder) parse(data []byte) *Scenario {
	root := d.document(data)
	if root == nil {
		return nil
	}
	d.pos.lines[""] = root.Line
	m, ok := d.mapping(root, "", topKeys)
	if !ok {
		return nil
	}
	s := &Scenario{
		Name:     d.file,
		Node:     defaultNode,
		Start:    defaultStart,
		Interval: defaultInterval,
	}

	// An unsupported version makes every other message noise: stop there.
	if v, ok := m.get("version"); !ok {
		d.errorf(root.Line, "version", "required (this gpumeter reads version 1)")
	} else if n, ok := d.integer(v, "version"); ok && n != 1 {
		d.errs = d.errs[:0]
		d.errorf(v.Line, "version", "unsupported version %d (this gpumeter reads version 1)", n)
		return nil
	}
	if v, ok := m.get("node"); ok {
		s.Node, _ = d.str(v, "node")
	}
	if v, ok := m.get("start"); ok {
		if str, ok := d.str(v, "start"); ok {
			t, err := time.Parse(time.RFC3339Nano, str)
			if err != nil {
				d.errorf(v.Line, "start", "bad time %q (want RFC 3339 such as 2026-01-01T00:00:00Z)", str)
			} else {
				s.Start = t
			}
		}
	}
	if v, ok := m.get("duration"); !ok {
		d.errorf(root.Line, "duration", "required (the scenario's length, such as 24h)")
	} else {
		s.Duration, _ = d.duration(v, "duration")
	}
	if v, ok := m.get("interval"); ok {
		s.Interval, _ = d.duration(v, "interval")
	}
	if v, ok := m.get("gpus"); ok {
		for i, n := range d.sequence(v, "gpus") {
			d.gpus(s, n, fmt.Sprintf("gpus[%d]", i))
		}
	}
	if v, ok := m.get("nvlink"); ok {
		for i, n := range d.sequence(v, "nvlink") {
			s.NVLink = append(s.NVLink, d.ints(n, fmt.Sprintf("nvlink[%d]", i)))
		}
	}
	if v, ok := m.get("containers"); ok {
		for i, n := range d.sequence(v, "containers") {
			if c, ok := d.container(s, n, fmt.Sprintf("containers[%d]", i)); ok {
				s.Containers = append(s.Containers, c)
			}
		}
	}
	if v, ok := m.get("host_processes"); ok {
		for i, n := range d.sequence(v, "host_processes") {
			if h, ok := d.hostProcess(s, n, fmt.Sprintf("host_processes[%d]", i)); ok {
				s.HostProcesses = append(s.HostProcesses, h)
			}
		}
	}
	if v, ok := m.get("jobs"); ok {
		for i, n := range d.sequence(v, "jobs") {
			if j, ok := d.job(n, fmt.Sprintf("jobs[%d]", i)); ok {
				s.Jobs = append(s.Jobs, j)
			}
		}
	}
	if v, ok := m.get("docker"); ok {
		d.docker(s, v, "docker")
	}
	return s
}

var dockerKeys = []string{"containers"}

// Values of docker.containers.
const (
	containersIgnore     = "ignore"
	containersFromLabels = "from_labels"
)

// docker reads what the scenario makes of the real Docker host's containers.
func (d *decoder) docker(s *Scenario, n *yaml.Node, path string) {
	m, ok := d.mapping(n, path, dockerKeys)
	if !ok {
		return
	}
	v, ok := m.get("containers")
	if !ok {
		return
	}
	str, ok := d.str(v, path+".containers")
	if !ok {
		return
	}
	switch str {
	case containersFromLabels:
		s.RealContainers = true
	case containersIgnore:
		s.RealContainers = false
	default:
		d.errorf(v.Line, path+".containers", "unknown value %q (want %s: real containers labelled %s or %s show GPU use; or %s, the default)",
			str, containersFromLabels, UtilLabel, MemoryLabel, containersIgnore)
	}
}

var gpuKeys = []string{"count", "model", "memory", "idle_power", "max_power"}

// gpus reads one entry of gpus, which stands for count identical GPUs.
func (d *decoder) gpus(s *Scenario, n *yaml.Node, path string) {
	m, ok := d.mapping(n, path, gpuKeys)
	if !ok {
		return
	}
	g := GPU{Model: defaultModel}
	count := int64(1)
	good := true
	if v, ok := m.get("count"); ok {
		c, ok := d.integer(v, path+".count")
		switch {
		case !ok:
			good = false
		case c < 1:
			d.errorf(v.Line, path+".count", "must be at least 1, got %d", c)
			good = false
		case int64(len(s.GPUs))+c > maxGPUs:
			d.errorf(v.Line, path+".count", "%d more GPUs make %d; a scenario has at most %d", c, int64(len(s.GPUs))+c, maxGPUs)
			good = false
		default:
			count = c
		}
	}
	if v, ok := m.get("model"); ok {
		g.Model, _ = d.str(v, path+".model")
	}
	if v, ok := m.require(d, n, path, "memory"); ok {
		g.Memory, _ = d.size(v, path+".memory")
	}
	if v, ok := m.require(d, n, path, "idle_power"); ok {
		g.IdlePower, _ = d.power(v, path+".idle_power")
	}
	if v, ok := m.require(d, n, path, "max_power"); ok {
		g.MaxPower, _ = d.power(v, path+".max_power")
	}
	if !good {
		return
	}
	for range count {
		g.Index = len(s.GPUs)
		g.UUID = GPUUUID(s.Node, g.Index)
		s.GPUs = append(s.GPUs, g)
		d.pos.gpuPath = append(d.pos.gpuPath, path)
	}
}

var containerKeys = []string{"name", "image", "labels", "gpus", "start", "end", "cpu", "ram", "phases", "pid"}

func (d *decoder) container(s *Scenario, n *yaml.Node, path string) (Container, bool) {
	m, ok := d.mapping(n, path, containerKeys)
	if !ok {
		return Container{}, false
	}
	c := Container{End: s.Duration}
	if v, ok := m.require(d, n, path, "name"); ok {
		c.Name, _ = d.str(v, path+".name")
		c.ID = ContainerID(s.Node, c.Name)
	}
	if v, ok := m.get("image"); ok {
		c.Image, _ = d.str(v, path+".image")
	}
	if v, ok := m.get("labels"); ok {
		c.Labels = d.labels(v, path+".labels")
	}
	if v, ok := m.get("gpus"); ok {
		c.GPUs = d.ints(v, path+".gpus")
	}
	if v, ok := m.get("start"); ok {
		c.Start, _ = d.duration(v, path+".start")
	}
	if v, ok := m.get("end"); ok {
		c.End, _ = d.duration(v, path+".end")
	}
	if v, ok := m.get("cpu"); ok {
		c.CPU, _ = d.number(v, path+".cpu")
	}
	if v, ok := m.get("ram"); ok {
		c.RAM, _ = d.size(v, path+".ram")
	}
	if v, ok := m.get("pid"); ok {
		// PID 0 means "none" in Container, so a written 0 is caught here.
		if pid, ok := d.integer(v, path+".pid"); ok {
			if pid < 1 || pid > maxHostPID {
				d.errorf(v.Line, path+".pid", "%d is not a host PID (want 1..%d)", pid, maxHostPID)
			} else {
				c.PID = int(pid)
			}
		}
	}
	if v, ok := m.get("phases"); ok {
		for i, pn := range d.sequence(v, path+".phases") {
			if p, ok := d.phase(pn, fmt.Sprintf("%s.phases[%d]", path, i)); ok {
				c.Phases = append(c.Phases, p)
			}
		}
	}
	return c, true
}

var phaseKeys = []string{"at", "util", "memory", "gpus"}

func (d *decoder) phase(n *yaml.Node, path string) (Phase, bool) {
	m, ok := d.mapping(n, path, phaseKeys)
	if !ok {
		return Phase{}, false
	}
	var p Phase
	if v, ok := m.require(d, n, path, "at"); ok {
		p.At, _ = d.duration(v, path+".at")
	}
	if v, ok := m.get("util"); ok {
		p.Util, _ = d.number(v, path+".util")
	}
	if v, ok := m.get("memory"); ok {
		p.Memory, _ = d.size(v, path+".memory")
	}
	if v, ok := m.get("gpus"); ok && !yamlx.IsNull(v) {
		p.GPUs = d.ints(v, path+".gpus")
		if p.GPUs == nil {
			p.GPUs = []int{} // written but empty: validate says so
		}
	}
	return p, true
}

var hostKeys = []string{"user", "gpu", "start", "end", "util", "memory"}

func (d *decoder) hostProcess(s *Scenario, n *yaml.Node, path string) (HostProcess, bool) {
	m, ok := d.mapping(n, path, hostKeys)
	if !ok {
		return HostProcess{}, false
	}
	h := HostProcess{End: s.Duration}
	if v, ok := m.require(d, n, path, "user"); ok {
		h.User, _ = d.str(v, path+".user")
	}
	if v, ok := m.require(d, n, path, "gpu"); ok {
		if g, ok := d.integer(v, path+".gpu"); ok {
			h.GPU = clampInt(g)
		}
	}
	if v, ok := m.get("start"); ok {
		h.Start, _ = d.duration(v, path+".start")
	}
	if v, ok := m.get("end"); ok {
		h.End, _ = d.duration(v, path+".end")
	}
	if v, ok := m.get("util"); ok {
		h.Util, _ = d.number(v, path+".util")
	}
	if v, ok := m.get("memory"); ok {
		h.Memory, _ = d.size(v, path+".memory")
	}
	return h, true
}

var jobKeys = []string{"name", "user", "team", "image", "gpus", "submit", "time_limit", "run", "util", "memory"}

func (d *decoder) job(n *yaml.Node, path string) (Job, bool) {
	m, ok := d.mapping(n, path, jobKeys)
	if !ok {
		return Job{}, false
	}
	j := Job{GPUs: 1}
	if v, ok := m.require(d, n, path, "name"); ok {
		j.Name, _ = d.str(v, path+".name")
	}
	if v, ok := m.require(d, n, path, "user"); ok {
		j.User, _ = d.str(v, path+".user")
	}
	if v, ok := m.get("team"); ok {
		j.Team, _ = d.str(v, path+".team")
	}
	if v, ok := m.get("image"); ok {
		j.Image, _ = d.str(v, path+".image")
	}
	if v, ok := m.get("gpus"); ok {
		if g, ok := d.integer(v, path+".gpus"); ok {
			j.GPUs = clampInt(g)
		}
	}
	if v, ok := m.get("submit"); ok {
		j.Submit, _ = d.duration(v, path+".submit")
	}
	if v, ok := m.get("time_limit"); ok {
		j.TimeLimit, _ = d.duration(v, path+".time_limit")
	}
	if v, ok := m.require(d, n, path, "run"); ok {
		j.Run, _ = d.duration(v, path+".run")
	}
	if v, ok := m.get("util"); ok {
		j.Util, _ = d.number(v, path+".util")
	}
	if v, ok := m.get("memory"); ok {
		j.Memory, _ = d.size(v, path+".memory")
	}
	return j, true
}
