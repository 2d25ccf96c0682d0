package waste

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// LiveConfig wires a Live evaluator.
type LiveConfig struct {
	Rules config.WasteRules
	Cost  cost.Model
	// Bucket is the step the rules see; 0 chooses a tenth of the shortest
	// window, at most a minute and at least 100 ms.
	Bucket time.Duration
}

// Live applies the rules to the sampler's ticks as they come. Add only
// sums the tick into the current bucket; the rules run when a bucket
// closes, so a tick costs little. It is safe for concurrent use: the
// sampler adds, the API and the metrics read.
type Live struct {
	mu     sync.Mutex
	rules  config.WasteRules
	cost   cost.Model
	bucket time.Duration
	keep   time.Duration // how long a subject that stopped is remembered

	ctrs  map[string]*liveSubject
	hosts map[hostKey]*liveSubject
	devs  map[string]*liveSubject
	all   []*liveSubject

	// Caches by position in the tick: in a steady state the rows and
	// containers of one tick sit where they sat in the one before.
	rowCache []rowRef
	ctrCache []ctrRef
	devCache []*liveSubject
	dts      []float64 // interval of the tick by GPU index

	cur         int64 // the open bucket
	open        bool
	tickNo      uint64
	lastTick    *meter.Tick
	first, last time.Time
	node        string

	counters map[metricKey]float64 // wasted GPU-hours by rule and owner
}

type liveSubject struct {
	subject
	t        *tracker
	step     step
	open     bool   // the step holds something
	stamp    uint64 // the tick that last added running time
	lastSeen time.Time
	dead     bool
	prevUn   float64 // devices: unaccounted memory at the last sample
}

type hostKey struct {
	kind container.OwnerKind
	id   string
	gpu  string
}

type rowRef struct {
	row  uint64
	subj *liveSubject
	slot int
}

type ctrRef struct {
	id   string
	subj *liveSubject
}

type metricKey struct{ rule, owner string }

// NewLive returns a live evaluator for validated rules.
func NewLive(cfg LiveConfig) *Live {
	l := &Live{
		rules:    cfg.Rules,
		cost:     cfg.Cost,
		bucket:   cfg.Bucket,
		ctrs:     map[string]*liveSubject{},
		hosts:    map[hostKey]*liveSubject{},
		devs:     map[string]*liveSubject{},
		counters: map[metricKey]float64{},
	}
	if l.bucket <= 0 {
		l.bucket = time.Minute
		if w := shortestWindow(&l.rules); w > 0 {
			l.bucket = min(time.Minute, max(100*time.Millisecond, w/10))
		}
	}
	l.keep = max(10*time.Minute, longestWindow(&l.rules))
	return l
}

// Bucket is the step the rules see.
func (l *Live) Bucket() time.Duration { return l.bucket }

// Add sums a tick into the open bucket and, when the tick starts a new
// bucket, closes the open one: the rules then see it. A tick the sampler
// publishes again (while the GPU source reads nothing) adds nothing.
func (l *Live) Add(t *sampler.Tick) {
	if t == nil || t.Tick == nil || t.Time.IsZero() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.Tick == l.lastTick {
		return
	}
	l.lastTick = t.Tick
	now := t.Time
	// A tick books the interval that ends at it: it belongs with the
	// bucket that interval falls in.
	if b := (now.UnixNano() - 1) / int64(l.bucket); !l.open || b != l.cur {
		if l.open {
			l.close()
		}
		l.cur, l.open = b, true
	}
	if l.first.IsZero() {
		l.first = now
	}
	l.last = now
	l.node = t.Node
	l.tickNo++

	clear(l.dts)
	for i := range t.GPUs {
		g := &t.GPUs[i]
		for len(l.dts) <= g.Index {
			l.dts = append(l.dts, 0)
		}
		l.dts[g.Index] = g.Delta.Seconds
	}
	if len(l.rowCache) < len(t.Usage) {
		l.rowCache = append(l.rowCache, make([]rowRef, len(t.Usage)-len(l.rowCache))...)
	}
	for i := range t.Usage {
		u := &t.Usage[i]
		d := &u.Delta
		if d.AllocatedSeconds == 0 && d.PresentSeconds == 0 && d.UsedSeconds == 0 && d.MemoryByteSeconds == 0 {
			continue
		}
		ref := &l.rowCache[i]
		if ref.row != u.Row || ref.subj == nil || ref.subj.dead {
			*ref = l.lookup(t, u)
		}
		ls := ref.subj
		var dt float64
		if u.GPU >= 0 && u.GPU < len(l.dts) {
			dt = l.dts[u.GPU]
		}
		if dt <= 0 {
			continue
		}
		if ls.stamp != l.tickNo {
			ls.stamp = l.tickNo
			if !ls.open {
				ls.open = true
				ls.step.start = now.Add(-time.Duration(dt * float64(time.Second)))
			}
			ls.step.end = now
			if ls.kind == kindContainer {
				ls.step.seconds += dt
			}
		}
		if ls.kind == kindHost {
			ls.step.seconds += d.PresentSeconds
		}
		g := ls.step.at(ref.slot)
		g.alloc += d.AllocatedSeconds
		g.present += d.PresentSeconds
		g.used += d.UsedSeconds
		g.mem += d.MemoryByteSeconds
		g.held += d.HeldSeconds
		g.heldUsed += d.UsedSeconds
	}

	if len(l.ctrCache) < len(t.Containers) {
		l.ctrCache = append(l.ctrCache, make([]ctrRef, len(t.Containers)-len(l.ctrCache))...)
	}
	for i := range t.Containers {
		c := &t.Containers[i]
		ref := &l.ctrCache[i]
		if ref.id != c.ID || ref.subj == nil || ref.subj.dead {
			*ref = ctrRef{id: c.ID, subj: l.ctrs[c.ID]}
		}
		ls := ref.subj
		if ls == nil {
			continue
		}
		// Writing only what changed spares the garbage collector's write
		// barriers on every tick.
		if ls.name != c.Name || ls.image != c.Image || ls.owner != c.User || ls.team != c.Team || ls.project != c.Project {
			ls.name, ls.image, ls.owner, ls.team, ls.project = c.Name, c.Image, c.User, c.Team, c.Project
		}
		if !c.StartedAt.IsZero() && !c.StartedAt.Equal(ls.started) {
			ls.started = c.StartedAt
		}
		if ls.stamp == l.tickNo {
			ls.step.cpu += c.Delta.CPUSeconds
		}
	}

	if l.rules.Outside.Enabled {
		l.addDevices(t)
	}
}

// addDevices sums the memory no process accounts for on each GPU.
func (l *Live) addDevices(t *sampler.Tick) {
	now := t.Time
	if len(l.devCache) < len(t.Sample.Devices) {
		l.devCache = append(l.devCache, make([]*liveSubject, len(t.Sample.Devices)-len(l.devCache))...)
	}
	for i := range t.Sample.Devices {
		d := &t.Sample.Devices[i]
		if d.Err != nil || i >= len(t.GPUs) {
			continue
		}
		dt := t.GPUs[i].Delta.Seconds
		var procs uint64
		for j := range d.Processes {
			procs += d.Processes[j].MemoryUsed
		}
		var un float64
		if d.MemoryUsed > procs {
			un = float64(d.MemoryUsed - procs)
		}
		ls := l.devCache[i]
		if ls == nil || ls.dead || ls.gpus[0].UUID != d.UUID || ls.gpus[0].Index != d.Index {
			key := meter.GPUKey(d.UUID, d.Index)
			ls = l.devs[key]
			if ls == nil {
				ls = l.newSubject(subject{kind: kindDevice, ownerKind: OwnerNone})
				ls.slot(GPURef{Index: d.Index, UUID: d.UUID, Model: d.Model}, l.cost.GPUHourCost(d.Model))
				l.devs[key] = ls
			}
			l.devCache[i] = ls
		}
		// As the meter does, the sample that opened the interval
		// stands for it.
		prev := ls.prevUn
		ls.prevUn = un
		if dt <= 0 {
			continue
		}
		if !ls.open {
			ls.open = true
			ls.step.start = now.Add(-time.Duration(dt * float64(time.Second)))
		}
		ls.step.end = now
		ls.step.seconds += dt
		ls.step.unaccounted += prev * dt
		ls.step.unaccMax = max(ls.step.unaccMax, prev)
	}
}

// lookup finds (or makes) the subject and GPU slot of a usage row.
func (l *Live) lookup(t *sampler.Tick, u *meter.Usage) rowRef {
	ref := GPURef{Index: u.GPU, UUID: u.UUID}
	for i := range t.Sample.Devices {
		if d := &t.Sample.Devices[i]; d.Index == u.GPU {
			ref.Model = d.Model
			break
		}
	}
	price := l.cost.GPUHourCost(ref.Model)
	var ls *liveSubject
	switch u.Owner.Kind {
	case container.OwnerContainer:
		ls = l.ctrs[u.Owner.ID]
		if ls == nil {
			ls = l.newSubject(subject{kind: kindContainer, ownerKind: OwnerContainer, id: u.Owner.ID, name: container.ShortID(u.Owner.ID)})
			l.ctrs[u.Owner.ID] = ls
		}
	default:
		k := hostKey{u.Owner.Kind, u.Owner.ID, meter.GPUKey(u.UUID, u.GPU)}
		ls = l.hosts[k]
		if ls == nil {
			s := subject{kind: kindHost, ownerKind: OwnerHost, id: u.Owner.ID, owner: u.Owner.ID}
			if u.Owner.Kind != container.OwnerHost {
				s.ownerKind, s.id, s.owner = OwnerNone, "", ""
			}
			ls = l.newSubject(s)
			l.hosts[k] = ls
		}
	}
	return rowRef{row: u.Row, subj: ls, slot: ls.slot(ref, price)}
}

func (l *Live) newSubject(s subject) *liveSubject {
	ls := &liveSubject{subject: s, lastSeen: l.last}
	ls.t = newTracker(&l.rules, &ls.subject)
	l.all = append(l.all, ls)
	return ls
}

// close hands the open bucket to the rules, forgets subjects that stopped
// long ago and brings the wasted GPU-hours counters up to date.
func (l *Live) close() {
	kept := l.all[:0]
	for _, ls := range l.all {
		ls.node = l.node
		if ls.open {
			ls.t.add(&ls.step)
			ls.step.reset()
			ls.open = false
			ls.lastSeen = l.last
		} else {
			ls.t.absent()
		}
		l.count(ls)
		if l.last.Sub(ls.lastSeen) > l.keep {
			ls.dead = true
			l.forget(ls)
			continue
		}
		kept = append(kept, ls)
	}
	clear(l.all[len(kept):])
	l.all = kept
}

// count adds what the subject's findings wasted since the last count to
// the counters.
func (l *Live) count(ls *liveSubject) {
	for _, f := range ls.t.findings {
		if d := f.wasted - f.counted; d > 0 {
			l.counters[metricKey{f.rule, ls.owner}] += d / 3600
			f.counted = f.wasted
		}
	}
}

func (l *Live) forget(ls *liveSubject) {
	switch ls.kind {
	case kindContainer:
		delete(l.ctrs, ls.id)
	case kindHost:
		maps.DeleteFunc(l.hosts, func(_ hostKey, v *liveSubject) bool { return v == ls })
	case kindDevice:
		maps.DeleteFunc(l.devs, func(_ string, v *liveSubject) bool { return v == ls })
	}
}

// Report returns the findings so far: every finding of an owner seen in
// the last while (the longest window, at least ten minutes), active or
// not, from the first tick to the latest.
func (l *Live) Report() *Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	var fs []Finding
	for _, ls := range l.all {
		for _, f := range ls.t.findings {
			fs = append(fs, ls.export(f))
		}
	}
	return newReport(l.first, l.last, l.cost.Currency, fs)
}

var (
	descFindings = prometheus.NewDesc("gpumeter_waste_findings", "Waste findings whose condition holds now, by rule and owner.", []string{"Hostname", "rule", "owner"}, nil)
	descWasted   = prometheus.NewDesc("gpumeter_waste_gpu_hours_total", "GPU-hours wasted by reported findings, by rule and owner.", []string{"Hostname", "rule", "owner"}, nil)
)

// Describe implements prometheus.Collector.
func (l *Live) Describe(ch chan<- *prometheus.Desc) {
	ch <- descFindings
	ch <- descWasted
}

// Collect implements prometheus.Collector.
func (l *Live) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	active := map[metricKey]int{}
	for _, ls := range l.all {
		for _, f := range ls.t.findings {
			if f.active {
				active[metricKey{f.rule, ls.owner}]++
			}
		}
	}
	wasted := maps.Clone(l.counters)
	node := l.node
	l.mu.Unlock()
	for _, k := range slices.SortedFunc(maps.Keys(active), compareKeys) {
		ch <- prometheus.MustNewConstMetric(descFindings, prometheus.GaugeValue, float64(active[k]), node, k.rule, k.owner)
	}
	for _, k := range slices.SortedFunc(maps.Keys(wasted), compareKeys) {
		ch <- prometheus.MustNewConstMetric(descWasted, prometheus.CounterValue, round(wasted[k]), node, k.rule, k.owner)
	}
}

func compareKeys(a, b metricKey) int {
	if a.rule != b.rule {
		return ruleOrder(a.rule) - ruleOrder(b.rule)
	}
	if a.owner < b.owner {
		return -1
	}
	if a.owner > b.owner {
		return 1
	}
	return 0
}

// export renders a finding of the subject.
func (s *subject) export(f *finding) Finding {
	out := Finding{
		Rule: f.rule, Node: s.node, OwnerKind: s.ownerKind, Owner: s.owner, Team: s.team, Project: s.project,
		Since: f.since.UTC(), FirstSeen: f.firstSeen.UTC(), Until: f.until.UTC(), Active: f.active,
		WastedGPUHours: round(f.wasted / 3600), Cost: round(f.cost),
		Evidence: maps.Clone(f.evidence),
		GPUs:     make([]GPURef, 0, len(f.gpus)),
	}
	if out.Evidence == nil {
		out.Evidence = map[string]float64{}
	}
	for _, i := range f.gpus {
		out.GPUs = append(out.GPUs, s.gpus[i])
	}
	slices.SortFunc(out.GPUs, func(a, b GPURef) int { return a.Index - b.Index })
	owner := s.id
	switch s.kind {
	case kindDevice:
		// Not the processes of an unknown owner on the same GPU.
		owner = "unaccounted memory"
	case kindContainer:
		out.ContainerID, out.Container, out.Image = s.id, s.name, s.image
		if out.Container == "" {
			out.Container = container.ShortID(s.id)
		}
	}
	out.ID = findingID(f.rule, s.node, s.ownerKind, owner, out.GPUs)
	return out
}
