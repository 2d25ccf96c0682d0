// Package sim plays scenario files (format v1, see docs/scenario.md): simulated
// GPUs, the containers that hold them and the host processes on them, over
// time. A Source made from a Scenario is at once a GPU source, a container
// inventory and a process resolver, on a virtual clock for simulate and
// tests or on the wall clock, looping, for serve --sim and --demo.
package sim

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/units"
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

// positions remembers where each key of a parsed file was, so that checks
// run on the Scenario can still name a line.
type positions struct {
	lines map[string]int // key path -> line
	// gpuPath is, per GPU index, the path of the gpus entry that made it.
	gpuPath []string
}

// line returns the line of path, or of its closest parent that has one.
func (p *positions) line(path string) int {
	if p == nil {
		return 0
	}
	for {
		if l, ok := p.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return p.lines[""]
		}
		path = path[:i]
	}
}

func (p *positions) gpu(i int) string {
	if p != nil && i < len(p.gpuPath) {
		return p.gpuPath[i]
	}
	return fmt.Sprintf("gpus[%d]", i)
}

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

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntax reports an error from the YAML parser at the line it names. The
// parser names no line for a problem on the first line, nor for bytes YAML
// does not allow, which syntax finds itself.
func (d *decoder) syntax(err error, data []byte) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		d.errorf(line, "", "%s", m[2])
		return
	}
	d.errorf(badByteLine(data), "", "%s", strings.TrimPrefix(msg, "yaml: "))
}

// badByteLine returns the line of the first character YAML does not allow
// in a file, or 1 when there is none.
func badByteLine(data []byte) int {
	line := 1
	for len(data) > 0 {
		r, n := utf8.DecodeRune(data)
		switch {
		case r == '\n':
			line++
		case r == utf8.RuneError && n <= 1,
			r < 0x20 && r != '\t' && r != '\r',
			r >= 0x7f && r <= 0x9f && r != 0x85,
			r >= 0xd800 && r <= 0xdfff, r == 0xfffe, r == 0xffff:
			return line
		}
		data = data[n:]
	}
	return 1
}

// document reads the file's single YAML document.
func (d *decoder) document(data []byte) (root *yaml.Node) {
	defer func() {
		// The YAML library reports its own failures as errors; anything else
		// it throws is still a file it could not read, not a reason to stop.
		if r := recover(); r != nil {
			d.errorf(0, "", "cannot read YAML: %v", r)
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorf(0, "", "empty file (a scenario needs at least version and duration)")
		} else {
			d.syntax(err, data)
		}
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.syntax(err, data)
		return nil
	default:
		d.errorf(next.Line, "", "a scenario file holds one YAML document; found another")
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		d.errorf(0, "", "empty file (a scenario needs at least version and duration)")
		return nil
	}
	return doc.Content[0]
}

var topKeys = []string{"version", "node", "start", "duration", "interval", "gpus", "containers", "host_processes"}

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
	return s
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
	if v, ok := m.get("gpus"); ok && !isNull(v) {
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

// fields is a mapping's entries by key.
type fields map[string]*yaml.Node

func (f fields) get(key string) (*yaml.Node, bool) {
	n, ok := f[key]
	return n, ok
}

// require is get, reporting a missing key on the mapping's line.
func (f fields) require(d *decoder, mapping *yaml.Node, path, key string) (*yaml.Node, bool) {
	n, ok := f[key]
	if !ok {
		d.errorf(mapping.Line, join(path, key), "required")
	}
	return n, ok
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// resolve follows aliases to the node they stand for.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		d.aliases++
		if d.aliases > maxAliases {
			return &yaml.Node{Kind: yaml.AliasNode, Line: n.Line}
		}
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias that resolves to nothing (or too many aliases)"
	default:
		return "a document"
	}
}

// mapping returns the entries of a mapping node, reporting a node that is no
// mapping, keys that are not among allowed and keys given twice. It records
// each key's line under its path.
func (d *decoder) mapping(n *yaml.Node, path string, allowed []string) (fields, bool) {
	n = d.resolve(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, path, "want a mapping (keys %s), got %s", strings.Join(allowed, ", "), kind(n))
		return nil, false
	}
	if path != "" {
		d.pos.lines[path] = n.Line
	}
	f := make(fields, len(allowed))
	lines := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k.Line, path, "want a key, got %s", kind(k))
			continue
		}
		key := join(path, k.Value)
		if prev, ok := lines[k.Value]; ok {
			d.errorf(k.Line, key, "given twice (first at line %d)", prev)
			continue
		}
		lines[k.Value] = k.Line
		if !contains(allowed, k.Value) {
			d.errorf(k.Line, key, "unknown key (want one of %s)%s", strings.Join(allowed, ", "), unknownHint(path, k.Value))
			continue
		}
		d.pos.lines[key] = k.Line
		f[k.Value] = v
	}
	return f, true
}

func unknownHint(path, key string) string {
	if path == "" && key == "seed" {
		return "; version 1 has no randomness"
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sequence returns the items of a list; an empty value is an empty list.
// It records each item's line under path[i].
func (d *decoder) sequence(n *yaml.Node, path string) []*yaml.Node {
	n = d.resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n.Line, path, "want a list, got %s", kind(n))
		return nil
	}
	items := make([]*yaml.Node, len(n.Content))
	for i, item := range n.Content {
		item = d.resolve(item)
		items[i] = item
		d.pos.lines[fmt.Sprintf("%s[%d]", path, i)] = item.Line
	}
	return items
}

// scalar returns the text of a scalar node that holds a value.
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	n = d.resolve(n)
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.errorf(n.Line, path, "want %s, got %s", want, kind(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	return d.scalar(n, path, "a string")
}

func (d *decoder) integer(n *yaml.Node, path string) (int64, bool) {
	n = d.resolve(n)
	s, ok := d.scalar(n, path, "a whole number")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n.ShortTag() != "!!int" {
		d.errorf(n.Line, path, "want a whole number, got %q", s)
		return 0, false
	}
	return v, true
}

func (d *decoder) number(n *yaml.Node, path string) (float64, bool) {
	n = d.resolve(n)
	s, ok := d.scalar(n, path, "a number")
	if !ok {
		return 0, false
	}
	tag := n.ShortTag()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || (tag != "!!int" && tag != "!!float") || math.IsNaN(v) || math.IsInf(v, 0) {
		d.errorf(n.Line, path, "want a number, got %q", s)
		return 0, false
	}
	return v, true
}

// duration, size and power read values in the units grammar, as the
// config does: 1d and a bare 70 (watts) mean the same in both.
func (d *decoder) duration(n *yaml.Node, path string) (time.Duration, bool) {
	return unit(d, n, path, "a duration", units.ParseDuration)
}

func (d *decoder) size(n *yaml.Node, path string) (uint64, bool) {
	return unit(d, n, path, "a size", units.ParseSize)
}

func (d *decoder) power(n *yaml.Node, path string) (float64, bool) {
	return unit(d, n, path, "a power", units.ParsePower)
}

func unit[T any](d *decoder, n *yaml.Node, path, want string, parse func(string) (T, error)) (T, bool) {
	var zero T
	n = d.resolve(n)
	s, ok := d.scalar(n, path, want)
	if !ok {
		return zero, false
	}
	v, err := parse(s)
	if err != nil {
		d.errorf(n.Line, path, "%v", err)
		return zero, false
	}
	return v, true
}

// ints reads a list of GPU indexes.
func (d *decoder) ints(n *yaml.Node, path string) []int {
	items := d.sequence(n, path)
	var out []int
	if items != nil {
		out = make([]int, 0, len(items))
	}
	for i, item := range items {
		if v, ok := d.integer(item, fmt.Sprintf("%s[%d]", path, i)); ok {
			out = append(out, clampInt(v))
		}
	}
	return out
}

func (d *decoder) labels(n *yaml.Node, path string) map[string]string {
	n = d.resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, path, "want a mapping of label keys to values, got %s", kind(n))
		return nil
	}
	out := make(map[string]string, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), d.resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || isNull(k) {
			d.errorf(k.Line, path, "want a label key, got %s", kind(k))
			continue
		}
		key := path + "." + k.Value
		if _, ok := out[k.Value]; ok {
			d.errorf(k.Line, key, "given twice")
			continue
		}
		d.pos.lines[key] = k.Line
		switch {
		case isNull(v):
			out[k.Value] = ""
		case v.Kind == yaml.ScalarNode:
			out[k.Value] = v.Value
		default:
			d.errorf(v.Line, key, "want a label value, got %s", kind(v))
		}
	}
	return out
}

// clampInt keeps an index that does not fit an int out of range without
// wrapping it into range.
func clampInt(v int64) int {
	const maxInt = int64(^uint(0) >> 1)
	if v > maxInt {
		return int(maxInt)
	}
	if v < -maxInt {
		return int(-maxInt)
	}
	return int(v)
}
