package sim

import (
	"context"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
)

// Values the simulator reports that a scenario does not describe. Clocks
// are an H100's boost clocks; temperatures follow utilisation.
const (
	driverVersion = "sim"
	smClockMHz    = 1980
	memClockMHz   = 2619
)

// Source plays a scenario. It is a GPU source, a container inventory and a
// process resolver for the synthetic PIDs it makes up. It is safe for
// concurrent use.
type Source struct {
	loop     bool
	start    time.Time
	duration time.Duration
	labels   ownerLabels

	gpus       []timeline
	containers []simContainer
	// owners[pid-syntheticPID] owns each synthetic PID; a zero Owner marks a
	// PID no process uses (that of a container played by a real pid:).
	owners []container.Owner
	// labelled plays real containers by their labels, once
	// PlayContainers is given them.
	labelled labelled

	mu      sync.Mutex
	origin  time.Time // loop mode: the instant offset 0 first mapped to
	started bool

	// reuse (WithReusedLists) makes Containers fill list again.
	reuse bool
	list  []container.Container
}

// timeline is one GPU over the scenario. Its device-wide state is cut into
// segments at every instant something on it changes: segment k runs from
// at[k] to at[k+1], and the last one starts at the scenario's end and runs
// on, idle. Its processes are kept per owner, so that memory grows with the
// size of the file, not with segments times processes.
type timeline struct {
	index       int
	uuid, model string
	total       uint64  // bytes
	idle        float64 // W
	maxW        float64 // W at 100 %
	at          []time.Duration
	seg         []segment
	owners      []ownerSpans // in file order, which is the order of processes
	// nvlink are the UUIDs of the GPUs this one shares NVLink with.
	nvlink     []string
	loopEnergy uint64 // mJ over one whole run of the scenario
}

type segment struct {
	util   float64 // percent, capped at 100
	mem    uint64  // bytes, capped at the GPU's total
	power  float64 // W
	energy float64 // mJ from offset 0 to the segment's start
	n      int     // processes on the GPU
}

// ownerSpans is the process of one container or host process entry on one
// GPU: its stretches in time order, not overlapping; spans[k] starts at
// from[k].
type ownerSpans struct {
	pid   uint32
	from  []time.Duration
	spans []span
}

// span is one stretch of a process with constant util and memory.
type span struct {
	from, to time.Duration
	owner    int // index into timeline.owners
	util     float64
	mem      uint64
}

// simContainer is what the inventory reports for a scenario container.
type simContainer struct {
	id, name, image string
	labels          map[string]string
	// user, team and project come from labels, read once: Containers
	// runs on every tick.
	user, team, project string
	start, end          time.Duration
	cpu                 float64
	ram                 uint64
	pid                 int
	gpus                []string
	real                bool // played by a real PID; the real inventory describes it
}

type ownerLabels struct{ user, team, project string }

// Option changes how a Source reports.
type Option func(*Source)

// WithOwnerLabels sets the label keys that give a container's user, team
// and project; the defaults are gpumeter.user, gpumeter.team and
// gpumeter.project. An empty key leaves that field empty.
func WithOwnerLabels(user, team, project string) Option {
	return func(s *Source) { s.labels = ownerLabels{user, team, project} }
}

// NewSource plays s. With loop false, time t is offset t - s.Start into the
// scenario (a virtual clock): before Start nothing has happened yet and the
// energy counters read 0; past the end every container has ended and the
// GPUs idle on. With loop true (a wall clock) offset 0 is the first instant
// Read or Containers is asked about, the scenario repeats every s.Duration
// and the energy counters keep growing across repeats.
//
// s must be valid (as Parse returns it, or as Validate accepts it); given an
// invalid one, NewSource does not panic, but what it plays is unspecified.
// The Source keeps no reference to s.
func NewSource(s *Scenario, loop bool, opts ...Option) *Source {
	src := &Source{
		loop:     loop && s.Duration > 0,
		start:    s.Start,
		duration: max(s.Duration, 0),
		labels:   ownerLabels{"gpumeter.user", "gpumeter.team", "gpumeter.project"},
	}
	for _, o := range opts {
		o(src)
	}
	src.owners = make([]container.Owner, len(s.Containers)+len(s.HostProcesses))
	for i := range s.Containers {
		c := &s.Containers[i]
		sc := simContainer{
			id:     c.ID,
			name:   c.Name,
			image:  c.Image,
			labels: maps.Clone(c.Labels),
			start:  c.Start,
			end:    c.End,
			cpu:    c.CPU,
			ram:    c.RAM,
			pid:    c.PID,
			real:   c.PID > 0,
		}
		sc.user = label(sc.labels, src.labels.user)
		sc.team = label(sc.labels, src.labels.team)
		sc.project = label(sc.labels, src.labels.project)
		if sc.id == "" {
			sc.id = ContainerID(s.Node, c.Name)
		}
		if !sc.real {
			sc.pid = syntheticPID + i
			src.owners[i] = container.Owner{Kind: container.OwnerContainer, ID: sc.id}
		}
		for _, g := range c.GPUs {
			sc.gpus = append(sc.gpus, strconv.Itoa(g))
		}
		src.containers = append(src.containers, sc)
	}
	src.labelled.on = s.RealContainers
	src.labelled.pids = make(map[int]bool)
	for _, c := range s.Containers {
		if c.PID > 0 {
			src.labelled.pids[c.PID] = true
		}
	}
	for j, h := range s.HostProcesses {
		src.owners[len(s.Containers)+j] = container.Owner{Kind: container.OwnerHost, ID: h.User}
	}
	src.gpus = make([]timeline, len(s.GPUs))
	for i, g := range s.GPUs {
		src.gpus[i] = buildTimeline(s, i, g, src.containers)
	}
	for _, group := range s.NVLink {
		for _, i := range group {
			for _, j := range group {
				if i != j && i >= 0 && i < len(src.gpus) && j >= 0 && j < len(src.gpus) {
					src.gpus[i].nvlink = append(src.gpus[i].nvlink, src.gpus[j].uuid)
				}
			}
		}
	}
	return src
}

// buildTimeline works out GPU i's state between every two instants at which
// something on it changes, and its energy counter at each such instant, so
// that a read takes one binary search per GPU and one per process owner on
// it, wherever the instant falls.
func buildTimeline(s *Scenario, i int, g GPU, cs []simContainer) timeline {
	tl := timeline{
		index: i,
		uuid:  g.UUID,
		model: g.Model,
		total: g.Memory,
		idle:  g.IdlePower,
		maxW:  g.MaxPower,
	}
	if tl.uuid == "" {
		tl.uuid = GPUUUID(s.Node, i)
	}
	d := max(s.Duration, 0)
	var spans []span
	// own adds the stretches of one owner, given in time order.
	own := func(pid uint32, sps []span) {
		o := ownerSpans{pid: pid}
		for _, sp := range sps {
			sp.from, sp.to = max(sp.from, 0), min(sp.to, d)
			if sp.from >= sp.to {
				continue
			}
			sp.owner = len(tl.owners)
			o.from = append(o.from, sp.from)
			o.spans = append(o.spans, sp)
			spans = append(spans, sp)
		}
		if len(o.spans) > 0 {
			tl.owners = append(tl.owners, o)
		}
	}
	for ci, sc := range cs {
		c := &s.Containers[ci]
		if !slices.Contains(c.GPUs, i) {
			continue
		}
		// The entries that apply to this GPU, in time order; each is in
		// force until the next one or the container's end.
		var ps []Phase
		for _, p := range c.Phases {
			if p.GPUs == nil || slices.Contains(p.GPUs, i) {
				ps = append(ps, p)
			}
		}
		sort.SliceStable(ps, func(a, b int) bool { return ps[a].At < ps[b].At })
		sps := make([]span, 0, len(ps))
		for k, p := range ps {
			to := c.End
			if k+1 < len(ps) {
				to = min(to, c.Start+ps[k+1].At)
			}
			sps = append(sps, span{from: c.Start + p.At, to: to, util: p.Util, mem: p.Memory})
		}
		own(uint32(sc.pid), sps)
	}
	for j, h := range s.HostProcesses {
		if h.GPU == i {
			own(uint32(syntheticPID+len(cs)+j), []span{{from: h.Start, to: h.End, util: h.Util, mem: h.Memory}})
		}
	}

	tl.at = make([]time.Duration, 0, 2+2*len(spans))
	tl.at = append(tl.at, 0, d)
	for _, sp := range spans {
		tl.at = append(tl.at, sp.from, sp.to)
	}
	slices.Sort(tl.at)
	tl.at = slices.Compact(tl.at)

	sort.SliceStable(spans, func(a, b int) bool { return spans[a].from < spans[b].from })
	var active []span
	next := 0
	tl.seg = make([]segment, len(tl.at))
	for k, t := range tl.at {
		active = slices.DeleteFunc(active, func(sp span) bool { return sp.to <= t })
		for ; next < len(spans) && spans[next].from <= t; next++ {
			active = append(active, spans[next])
		}
		// Sum in process order, so that the device's util is exactly the
		// sum its processes give.
		slices.SortStableFunc(active, func(a, b span) int { return a.owner - b.owner })
		seg := segment{n: len(active)}
		var util float64
		for _, sp := range active {
			util += sp.util
			seg.mem = addCapped(seg.mem, sp.mem, g.Memory)
		}
		seg.util = min(util, 100)
		seg.power = g.IdlePower + (g.MaxPower-g.IdlePower)*seg.util/100
		if k > 0 {
			prev := tl.seg[k-1]
			seg.energy = prev.energy + energy(prev.power, t-tl.at[k-1])
		}
		tl.seg[k] = seg
	}
	tl.loopEnergy = millijoules(tl.seg[len(tl.seg)-1].energy)
	return tl
}

// energy is the energy in mJ of power w over d.
func energy(w float64, d time.Duration) float64 {
	return w * float64(d) / 1e6
}

// millijoules rounds an energy to the counter's whole millijoules.
func millijoules(e float64) uint64 {
	switch {
	case !(e > 0):
		return 0
	case e >= math.MaxUint64:
		return math.MaxUint64
	}
	return uint64(math.Round(e))
}

func addCapped(a, b, limit uint64) uint64 {
	if b > limit-min(a, limit) {
		return limit
	}
	return a + b
}

func mulCapped(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}

// upper returns how many of the sorted xs are at or before x.
func upper(xs []time.Duration, x time.Duration) int {
	lo, hi := 0, len(xs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if xs[m] <= x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// instant is where in the scenario a moment falls.
type instant struct {
	off   time.Duration // offset into the current run; negative before Start
	loops uint64        // whole runs before the current one (loop mode)
	base  time.Time     // the moment offset 0 of the current run maps to
}

func (s *Source) at(now time.Time) instant {
	if !s.loop {
		return instant{off: now.Sub(s.start), base: s.start}
	}
	s.mu.Lock()
	if !s.started {
		s.origin, s.started = now, true
	}
	origin := s.origin
	s.mu.Unlock()
	// A wall clock stepped back before the origin reads as the origin.
	elapsed := max(now.Sub(origin), 0)
	loops := elapsed / s.duration
	return instant{
		off:   elapsed % s.duration,
		loops: uint64(loops),
		base:  origin.Round(0).Add(loops * s.duration),
	}
}

// segment returns the index of the segment in force at off, or -1 before
// the scenario starts.
func (tl *timeline) segment(off time.Duration) int {
	if off < 0 {
		return -1
	}
	return upper(tl.at, off) - 1
}

// Read reports every GPU at now.
func (s *Source) Read(ctx context.Context, now time.Time) (gpu.Sample, error) {
	if err := ctx.Err(); err != nil {
		return gpu.Sample{}, err
	}
	in := s.at(now)
	devs := make([]gpu.Device, len(s.gpus))
	nprocs := 0
	for i := range s.gpus {
		tl := &s.gpus[i]
		// Before the start the GPU idles with its counter at 0.
		seg, e := segment{power: tl.idle}, uint64(0)
		if k := tl.segment(in.off); k >= 0 {
			seg = tl.seg[k]
			e = millijoules(seg.energy + energy(seg.power, in.off-tl.at[k]))
			e = addCapped(e, mulCapped(in.loops, tl.loopEnergy), math.MaxUint64)
		}
		devs[i] = gpu.Device{
			Index:             tl.index,
			UUID:              tl.uuid,
			Model:             tl.model,
			MemoryTotal:       tl.total,
			MemoryUsed:        seg.mem,
			MemoryFree:        tl.total - seg.mem,
			Util:              seg.util,
			MemCopyUtil:       seg.util * 0.4,
			PowerWatts:        seg.power,
			EnergyMilliJoules: e,
			TempC:             30 + 50*seg.util/100,
			MemTempC:          34 + 40*seg.util/100,
			SMClockMHz:        smClockMHz,
			MemClockMHz:       memClockMHz,
			Topology:          gpu.Topology{NVLink: slices.Clone(tl.nvlink)},
		}
		nprocs += seg.n
	}
	if nprocs > 0 {
		s.timelineProcesses(in, devs, nprocs)
	}
	s.playContainers(ctx, now, devs)
	return gpu.Sample{Time: now, DriverVersion: driverVersion, Devices: devs}, nil
}

// timelineProcesses fills devs with the processes of the timeline at in,
// nprocs of them in all.
func (s *Source) timelineProcesses(in instant, devs []gpu.Device, nprocs int) {
	// One backing array for every device's processes; the caller owns it.
	procs := make([]gpu.Process, 0, nprocs)
	for i := range s.gpus {
		tl := &s.gpus[i]
		if k := tl.segment(in.off); k < 0 || tl.seg[k].n == 0 {
			continue
		}
		lo := len(procs)
		for _, o := range tl.owners {
			k := upper(o.from, in.off) - 1
			if k < 0 || in.off >= o.spans[k].to {
				continue
			}
			procs = append(procs, gpu.Process{
				PID:               o.pid,
				Type:              gpu.Compute,
				MemoryUsed:        o.spans[k].mem,
				SMUtil:            o.spans[k].util,
				GPUInstanceID:     -1,
				ComputeInstanceID: -1,
			})
		}
		devs[i].Processes = procs[lo:len(procs):len(procs)]
	}
}

// Containers lists the scenario's containers running at now, and those
// that stopped in the last KeepStopped, except those played by a real PID,
// which the real inventory describes. The Labels maps and GPU ID slices
// are shared between calls and must not be changed, as with the Docker
// inventory: this runs on every tick.
func (s *Source) Containers(ctx context.Context, now time.Time) ([]container.Container, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	in := s.at(now)
	var out []container.Container
	if s.reuse {
		out = s.list[:0]
	}
	if out == nil {
		out = make([]container.Container, 0, len(s.containers))
	}
	for i := range s.containers {
		c := &s.containers[i]
		if c.real || in.off < c.start {
			continue
		}
		running := in.off < c.end && in.off < s.duration
		if !running && in.off >= c.end+KeepStopped {
			continue
		}
		out = append(out, container.Container{
			ID:          c.id,
			Name:        c.name,
			Image:       c.image,
			Labels:      c.labels,
			User:        c.user,
			Team:        c.team,
			Project:     c.project,
			Running:     running,
			PID:         c.pid,
			StartedAt:   in.base.Add(c.start),
			GPUs:        container.GPURequest{IDs: c.gpus},
			CPUSeconds:  c.cpu * (min(in.off, c.end) - c.start).Seconds(),
			MemoryBytes: c.ram,
		})
		if !running {
			// Stopped, as Docker lists a container for a while after it
			// exits: its final counters close its last interval.
			ctr := &out[len(out)-1]
			ctr.FinishedAt, ctr.MemoryBytes, ctr.PID = in.base.Add(c.end), 0, 0
		}
	}
	if s.reuse {
		s.list = out
	}
	return out, nil
}

// KeepStopped is how long the simulator lists a container after it ended,
// as the Docker inventory does by default.
const KeepStopped = 5 * time.Minute

func label(labels map[string]string, key string) string {
	if key == "" {
		return ""
	}
	return labels[key]
}

// Resolve says who owns a synthetic PID this source made up. Any other PID,
// including a real one that plays a container, is not its to know.
func (s *Source) Resolve(pid uint32) (container.Owner, bool, error) {
	if pid < syntheticPID || uint64(pid-syntheticPID) >= uint64(len(s.owners)) {
		return container.Owner{}, false, nil
	}
	o := s.owners[pid-syntheticPID]
	return o, o.Kind != container.OwnerNone, nil
}
