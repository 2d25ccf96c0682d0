package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/units"
)

// The labels by which a real container shows GPU use under a scenario with
// docker.containers: from_labels. Either may be left out; it then counts
// as 0.
const (
	// UtilLabel is the SM utilisation, in percent of the GPU (0..100), of
	// the container's process on each of its GPUs: "85" or "85%".
	UtilLabel = "gpumeter.sim.util"
	// MemoryLabel is the GPU memory its process holds on each of its
	// GPUs, a size in the units grammar such as "12GiB".
	MemoryLabel = "gpumeter.sim.memory"
)

// ContainerLister lists the host's real containers, as the Docker
// inventory does. When it returns an error with a list, the list stands.
type ContainerLister interface {
	Containers(ctx context.Context, now time.Time) ([]container.Container, error)
}

// labelled plays the real containers of a from_labels scenario. Their
// processes change a GPU's figures at each Read, so the energy they add
// is summed here, read by read, rather than laid out in the timeline.
type labelled struct {
	on   bool         // the scenario asks for it
	pids map[int]bool // real PIDs the scenario's own pid: entries play

	mu     sync.Mutex
	list   ContainerLister // nil until PlayContainers
	log    *slog.Logger
	warned map[string]bool // container IDs warned about once
	last   time.Time       // the latest Read
	watts  []float64       // per GPU: the power they added at last
	mj     []float64       // per GPU: the energy they added so far
}

// PlayContainers has the source show, at each Read, a GPU process for
// every running container l lists that carries UtilLabel or MemoryLabel:
// one with the container's main PID on each GPU the container was given
// (by index or UUID; all of them for a request for all), with that
// utilisation and memory, which the GPU's utilisation, memory, power and
// energy include (capped at 100 % and at the GPU's memory). Containers
// whose PID one of the scenario's pid: entries names are played by their
// phases instead. A label that does not parse leaves the container
// without a process, and is logged on log once per container.
//
// It does nothing unless the scenario sets docker.containers: from_labels.
// Call it before the source is read from more than one goroutine.
func (s *Source) PlayContainers(l ContainerLister, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &s.labelled
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on {
		return
	}
	p.list, p.log = l, log
	p.warned = map[string]bool{}
	p.watts = make([]float64, len(s.gpus))
	p.mj = make([]float64, len(s.gpus))
}

// playContainers adds the labelled containers' processes to devs, which
// Read has filled from the timeline at now.
func (s *Source) playContainers(ctx context.Context, now time.Time, devs []gpu.Device) {
	p := &s.labelled
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.list == nil {
		return
	}
	ctrs, _ := p.list.Containers(ctx, now)
	if !p.last.IsZero() && now.After(p.last) {
		for i, w := range p.watts {
			p.mj[i] += energy(w, now.Sub(p.last))
		}
	}
	if p.last.IsZero() || now.After(p.last) {
		p.last = now
	}
	var extra [][]gpu.Process // per GPU, made on the first process
	for i := range ctrs {
		c := &ctrs[i]
		if !c.Running || c.PID <= 0 || p.pids[c.PID] {
			continue
		}
		use, ok, err := labelUse(c.Labels)
		if !ok {
			continue
		}
		if err == nil && c.GPUs.Empty() {
			err = errors.New("it has gpumeter.sim.* labels but was given no GPU")
		}
		held := 0
		for g := range devs {
			if err == nil && c.GPUs.Holds(devs[g].Index, devs[g].UUID) {
				if extra == nil {
					extra = make([][]gpu.Process, len(devs))
				}
				extra[g] = append(extra[g], gpu.Process{
					PID:               uint32(c.PID),
					Type:              gpu.Compute,
					MemoryUsed:        min(use.mem, devs[g].MemoryTotal),
					SMUtil:            use.util,
					GPUInstanceID:     -1,
					ComputeInstanceID: -1,
				})
				held++
			}
		}
		if err == nil && held == 0 {
			err = fmt.Errorf("none of its GPUs (%s) is one of the scenario's", c.GPUs)
		}
		if err != nil && !p.warned[c.ID] {
			p.warned[c.ID] = true
			attrs := []any{"container", c.Name, "id", c.ShortID()}
			var bad *badLabel
			if errors.As(err, &bad) {
				attrs = append(attrs, "label", bad.key, "value", bad.value, "err", bad.err)
			} else {
				attrs = append(attrs, "err", err)
			}
			p.log.Warn("sim: container shows no GPU use", attrs...)
		}
	}
	p.forget(ctrs)
	for g := range devs {
		d := &devs[g]
		tl := &s.gpus[g]
		base := d.PowerWatts
		if extra != nil && len(extra[g]) > 0 {
			util := d.Util
			for _, pr := range extra[g] {
				util += pr.SMUtil
				d.MemoryUsed = addCapped(d.MemoryUsed, pr.MemoryUsed, d.MemoryTotal)
			}
			d.Util = min(util, 100)
			d.MemoryFree = d.MemoryTotal - d.MemoryUsed
			d.MemCopyUtil = d.Util * 0.4
			d.PowerWatts = tl.idle + (tl.maxW-tl.idle)*d.Util/100
			d.TempC = 30 + 50*d.Util/100
			d.MemTempC = 34 + 40*d.Util/100
			d.Processes = append(d.Processes[:len(d.Processes):len(d.Processes)], extra[g]...)
		}
		p.watts[g] = d.PowerWatts - base
		d.EnergyMilliJoules = addCapped(d.EnergyMilliJoules, millijoules(p.mj[g]), math.MaxUint64)
	}
}

// forget drops the warnings of containers no longer listed, so that the
// set stays as small as the host's container list.
func (p *labelled) forget(ctrs []container.Container) {
	if len(p.warned) == 0 {
		return
	}
	listed := make(map[string]bool, len(ctrs))
	for i := range ctrs {
		listed[ctrs[i].ID] = true
	}
	for id := range p.warned {
		if !listed[id] {
			delete(p.warned, id)
		}
	}
}

// use is what a container's labels say its process does on each GPU.
type use struct {
	util float64 // percent
	mem  uint64  // bytes
}

// badLabel is a label of a container's that does not parse.
type badLabel struct {
	key, value string
	err        error
}

func (e *badLabel) Error() string { return fmt.Sprintf("label %s=%q: %v", e.key, e.value, e.err) }

// labelUse reads UtilLabel and MemoryLabel. ok is false when neither is
// set; err, a *badLabel, names the first that does not parse.
func labelUse(labels map[string]string) (u use, ok bool, err error) {
	if v, set := labels[UtilLabel]; set {
		ok = true
		if u.util, err = parseUtil(v); err != nil {
			return use{}, true, &badLabel{UtilLabel, v, err}
		}
	}
	if v, set := labels[MemoryLabel]; set {
		ok = true
		if u.mem, err = units.ParseSize(strings.TrimSpace(v)); err != nil {
			return use{}, true, &badLabel{MemoryLabel, v, err}
		}
	}
	return u, ok, nil
}

// parseUtil reads a percentage such as "85", "85%" or "12.5 %".
func parseUtil(v string) (float64, error) {
	num := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "%"))
	u, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(u) || math.IsInf(u, 0) {
		return 0, fmt.Errorf("want a percentage such as 85 or 85%%")
	}
	if u < 0 || u > 100 {
		return 0, fmt.Errorf("%g is outside 0..100", u)
	}
	return u, nil
}
