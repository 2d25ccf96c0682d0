package sim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/gpumeter/gpumeter/internal/units"
)

// Validate checks a scenario built in code against the rules Parse applies
// to files. Its errors name keys but no lines.
func (s *Scenario) Validate() error {
	return validate(s, s.Name, nil)
}

// validator checks ranges and consistency on a decoded scenario.
type validator struct {
	s    *Scenario
	file string
	pos  *positions
	errs Errors
}

func validate(s *Scenario, file string, pos *positions) error {
	v := &validator{s: s, file: file, pos: pos}
	v.check()
	if len(v.errs) > 0 {
		return v.errs.finish()
	}
	return nil
}

// errorf reports a problem with key, on the line of at (a key path that may
// be more precise than key, such as one item of a list).
func (v *validator) errorf(key, at, format string, args ...any) {
	v.errs = append(v.errs, &Error{File: v.file, Line: v.pos.line(at), Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) check() {
	s := v.s
	if s.Node == "" {
		v.errorf("node", "node", "must not be empty")
	}
	durationOK := s.Duration > 0
	if !durationOK {
		v.errorf("duration", "duration", "must be positive, got %s", units.FormatDuration(s.Duration))
	}
	switch {
	case s.Interval <= 0:
		v.errorf("interval", "interval", "must be positive, got %s", units.FormatDuration(s.Interval))
	case durationOK && s.Interval > s.Duration:
		v.errorf("interval", "interval", "%s is longer than the duration %s", units.FormatDuration(s.Interval), units.FormatDuration(s.Duration))
	}
	v.gpus()
	v.nvlink()
	v.containers(durationOK)
	v.hostProcesses(durationOK)
	v.jobs(durationOK)
}

func (v *validator) jobs(durationOK bool) {
	names := map[string]int{}
	for i, c := range v.s.Containers {
		names[c.Name] = -1 - i
	}
	for i, j := range v.s.Jobs {
		path := fmt.Sprintf("jobs[%d]", i)
		switch prev, dup := names[j.Name]; {
		case j.Name == "":
			v.errorf(path+".name", path+".name", "must not be empty")
		case dup && prev < 0:
			v.errorf(path+".name", path+".name", "%q is also containers[%d]'s name", j.Name, -1-prev)
		case dup:
			v.errorf(path+".name", path+".name", "%q is also jobs[%d]'s name", j.Name, prev)
		default:
			names[j.Name] = i
		}
		if j.User == "" {
			v.errorf(path+".user", path+".user", "must not be empty")
		}
		if j.GPUs < 1 || j.GPUs > len(v.s.GPUs) {
			v.errorf(path+".gpus", path+".gpus", "%d: a job asks for 1 to %d GPUs (the scenario's)", j.GPUs, len(v.s.GPUs))
		}
		switch {
		case j.Submit < 0:
			v.errorf(path+".submit", path+".submit", "must not be negative, got %s", units.FormatDuration(j.Submit))
		case durationOK && j.Submit >= v.s.Duration:
			v.errorf(path+".submit", path+".submit", "%s is not before the scenario's end (duration %s)", units.FormatDuration(j.Submit), units.FormatDuration(v.s.Duration))
		}
		if j.Run <= 0 {
			v.errorf(path+".run", path+".run", "must be more than 0, got %s", units.FormatDuration(j.Run))
		}
		if j.TimeLimit < 0 {
			v.errorf(path+".time_limit", path+".time_limit", "must not be negative, got %s", units.FormatDuration(j.TimeLimit))
		}
		v.util(path+".util", j.Util)
		for g := range v.s.GPUs {
			if j.Memory > v.s.GPUs[g].Memory {
				v.memory(path+".memory", j.Memory, g)
				break
			}
		}
	}
}

func (v *validator) gpus() {
	if len(v.s.GPUs) > maxGPUs {
		v.errorf("gpus", "gpus", "%d GPUs; a scenario has at most %d", len(v.s.GPUs), maxGPUs)
	}
	for i, g := range v.s.GPUs {
		path := v.pos.gpu(i)
		if g.Index != i {
			v.errorf(path, path, "GPU %d has index %d; indexes go in order from 0", i, g.Index)
		}
		if g.Memory == 0 {
			v.errorf(path+".memory", path+".memory", "must be more than 0")
		}
		idleOK := v.power(path+".idle_power", g.IdlePower)
		if v.power(path+".max_power", g.MaxPower) && idleOK && g.MaxPower < g.IdlePower {
			v.errorf(path+".max_power", path+".max_power", "%gW is less than idle_power %gW", g.MaxPower, g.IdlePower)
		}
	}
}

func (v *validator) power(key string, w float64) bool {
	if math.IsNaN(w) || w < 0 || w > maxPower {
		v.errorf(key, key, "%gW is not a GPU's power (want 0W..%gW)", w, maxPower)
		return false
	}
	return true
}

// nvlink checks the NVLink groups: two GPUs or more each, every GPU in
// one group at most.
func (v *validator) nvlink() {
	group := make(map[int]int)
	for i, g := range v.s.NVLink {
		path := fmt.Sprintf("nvlink[%d]", i)
		if len(g) < 2 {
			v.errorf(path, path, "a group of %s; an NVLink group has at least 2", plural(len(g), "GPU"))
		}
		for j, gi := range g {
			at := fmt.Sprintf("%s[%d]", path, j)
			if !v.gpu(path, at, gi) {
				continue
			}
			if prev, dup := group[gi]; dup {
				if prev == i {
					v.errorf(path, at, "GPU %d listed twice", gi)
				} else {
					v.errorf(path, at, "GPU %d is also in nvlink[%d]; a GPU is in one group at most", gi, prev)
				}
				continue
			}
			group[gi] = i
		}
	}
}

// gpu reports whether index names one of the scenario's GPUs, saying so if not.
func (v *validator) gpu(key, at string, index int) bool {
	if index < 0 || index >= len(v.s.GPUs) {
		v.errorf(key, at, "GPU index %d out of range (the scenario has %s)", index, plural(len(v.s.GPUs), "GPU"))
		return false
	}
	return true
}

func (v *validator) util(key string, u float64) {
	if math.IsNaN(u) || u < 0 || u > 100 {
		v.errorf(key, key, "%g is outside 0..100", u)
	}
}

// memory checks that b bytes fit on GPU index.
func (v *validator) memory(key string, b uint64, index int) {
	if index < 0 || index >= len(v.s.GPUs) {
		return
	}
	if total := v.s.GPUs[index].Memory; b > total {
		v.errorf(key, key, "%s is more than GPU %d's memory (%s)", units.FormatSize(b), index, units.FormatSize(total))
	}
}

// span checks a [start, end) span of the scenario, returning whether it is
// sound enough to check offsets against.
func (v *validator) span(path string, start, end time.Duration, durationOK bool) bool {
	ok := true
	switch {
	case start < 0:
		v.errorf(path+".start", path+".start", "must not be negative, got %s", units.FormatDuration(start))
		ok = false
	case durationOK && start >= v.s.Duration:
		v.errorf(path+".start", path+".start", "%s is not before the scenario's end (duration %s)", units.FormatDuration(start), units.FormatDuration(v.s.Duration))
		ok = false
	}
	switch {
	case !ok:
		// end is most likely the default, and start is what is wrong.
		if durationOK && end > v.s.Duration {
			v.errorf(path+".end", path+".end", "%s is past the scenario's end (duration %s)", units.FormatDuration(end), units.FormatDuration(v.s.Duration))
		}
	case end <= start:
		v.errorf(path+".end", path+".end", "%s is not after start %s", units.FormatDuration(end), units.FormatDuration(start))
		ok = false
	case durationOK && end > v.s.Duration:
		v.errorf(path+".end", path+".end", "%s is past the scenario's end (duration %s)", units.FormatDuration(end), units.FormatDuration(v.s.Duration))
		ok = false
	}
	return ok
}

func (v *validator) containers(durationOK bool) {
	names := make(map[string]int)
	pids := make(map[int]int)
	for i := range v.s.Containers {
		c := &v.s.Containers[i]
		path := fmt.Sprintf("containers[%d]", i)
		switch prev, dup := names[c.Name]; {
		case c.Name == "":
			v.errorf(path+".name", path+".name", "must not be empty")
		case dup:
			v.errorf(path+".name", path+".name", "%q is also the name of containers[%d]", c.Name, prev)
		default:
			names[c.Name] = i
		}
		switch prev, dup := pids[c.PID]; {
		case c.PID == 0:
		case c.PID < 0 || c.PID > maxHostPID:
			v.errorf(path+".pid", path+".pid", "%d is not a host PID (want 1..%d)", c.PID, maxHostPID)
		case dup:
			v.errorf(path+".pid", path+".pid", "PID %d also plays containers[%d]", c.PID, prev)
		default:
			pids[c.PID] = i
		}
		for j, g := range c.GPUs {
			at := fmt.Sprintf("%s.gpus[%d]", path, j)
			if v.gpu(path+".gpus", at, g) && slices.Index(c.GPUs, g) < j {
				v.errorf(path+".gpus", at, "GPU %d listed twice", g)
			}
		}
		spanOK := v.span(path, c.Start, c.End, durationOK)
		if math.IsNaN(c.CPU) || c.CPU < 0 || math.IsInf(c.CPU, 0) {
			v.errorf(path+".cpu", path+".cpu", "must be a number of cores, 0 or more, got %g", c.CPU)
		}
		v.phases(c, path, spanOK)
	}
}

func (v *validator) phases(c *Container, path string, spanOK bool) {
	if len(c.Phases) > 0 && len(c.GPUs) == 0 {
		v.errorf(path+".phases", path+".phases", "the container has no gpus to run phases on")
		return
	}
	// applies[k] is the sorted set of GPUs phase k applies to.
	applies := make([][]int, len(c.Phases))
	for k, p := range c.Phases {
		pp := fmt.Sprintf("%s.phases[%d]", path, k)
		v.util(pp+".util", p.Util)
		switch {
		case p.At < 0:
			v.errorf(pp+".at", pp+".at", "must not be negative, got %s", units.FormatDuration(p.At))
		case spanOK && p.At >= c.End-c.Start:
			v.errorf(pp+".at", pp+".at", "%s is not before the container's end (it runs for %s)", units.FormatDuration(p.At), units.FormatDuration(c.End-c.Start))
		}
		set := slices.Clone(c.GPUs)
		if p.GPUs != nil {
			set = set[:0]
			if len(p.GPUs) == 0 {
				v.errorf(pp+".gpus", pp+".gpus", "empty; leave gpus out to apply the phase to all of the container's GPUs")
			}
			for j, g := range p.GPUs {
				at := fmt.Sprintf("%s.gpus[%d]", pp, j)
				switch {
				case !v.gpu(pp+".gpus", at, g):
				case !slices.Contains(c.GPUs, g):
					v.errorf(pp+".gpus", at, "GPU %d is not among the container's gpus %v", g, c.GPUs)
				case slices.Contains(set, g):
					v.errorf(pp+".gpus", at, "GPU %d listed twice", g)
				default:
					set = append(set, g)
				}
			}
		}
		slices.Sort(set)
		set = slices.Compact(set)
		applies[k] = set
		for _, g := range set {
			v.memory(pp+".memory", p.Memory, g)
		}
	}
	// On each GPU the entry in force must be plain: entries for the same
	// set of GPUs go in time order, and no two entries that share a GPU
	// start at the same offset.
	for k, p := range c.Phases {
		pp := fmt.Sprintf("%s.phases[%d]", path, k)
		for j := range k {
			q := c.Phases[j]
			same := slices.Equal(applies[j], applies[k])
			switch {
			case p.At == q.At && same:
				v.errorf(pp+".at", pp+".at", "%s is also the at of phases[%d]", units.FormatDuration(p.At), j)
			case p.At == q.At && sharesGPU(applies[j], applies[k]):
				v.errorf(pp+".at", pp+".at", "%s is also the at of phases[%d], which applies to a GPU this phase applies to", units.FormatDuration(p.At), j)
			case p.At < q.At && same:
				v.errorf(pp+".at", pp+".at", "%s comes before phases[%d] (at %s) for the same gpus; list phases in time order", units.FormatDuration(p.At), j, units.FormatDuration(q.At))
			default:
				continue
			}
			break
		}
	}
}

func sharesGPU(a, b []int) bool {
	for _, g := range a {
		if slices.Contains(b, g) {
			return true
		}
	}
	return false
}

func (v *validator) hostProcesses(durationOK bool) {
	spanOK := make([]bool, len(v.s.HostProcesses))
	for i, h := range v.s.HostProcesses {
		path := fmt.Sprintf("host_processes[%d]", i)
		if h.User == "" {
			v.errorf(path+".user", path+".user", "must not be empty")
		}
		if v.gpu(path+".gpu", path+".gpu", h.GPU) {
			v.memory(path+".memory", h.Memory, h.GPU)
		}
		v.util(path+".util", h.Util)
		spanOK[i] = v.span(path, h.Start, h.End, durationOK)
	}
	// One user's entries on one GPU are one process at a time: two that
	// overlap would be the same process counted twice.
	for i, h := range v.s.HostProcesses {
		if !spanOK[i] {
			continue
		}
		for j := range i {
			o := v.s.HostProcesses[j]
			if spanOK[j] && o.User == h.User && o.GPU == h.GPU && h.Start < o.End && o.Start < h.End {
				path := fmt.Sprintf("host_processes[%d]", i)
				v.errorf(path, path, "overlaps host_processes[%d] (%s on GPU %d from %s to %s)", j, o.User, o.GPU, units.FormatDuration(o.Start), units.FormatDuration(o.End))
				break
			}
		}
	}
}

// fmtDuration writes d the way a scenario file would: 1h10m, not 1h10m0s.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
