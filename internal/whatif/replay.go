package whatif

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/gpumeter/gpumeter/internal/queue"
)

// Mode is a way of sharing GPUs that the replay plays.
type Mode string

// The modes.
const (
	// Exclusive gives every holder whole GPUs, as the queue does today.
	Exclusive Mode = "exclusive"
	// Timeslice lets up to Params.Share holders take turns on one GPU.
	Timeslice Mode = "timeslice"
	// Memory packs holders of one GPU by their measured peak memory
	// within Params.MemoryFraction of a GPU, as the queue's --gpu-memory
	// rule does on shared GPUs.
	Memory Mode = "memory"
)

// Modes are the modes' names, in the order they print.
func Modes() []Mode { return []Mode{Exclusive, Timeslice, Memory} }

// ParseModes reads a comma-separated list of modes, without repeats.
func ParseModes(s string) ([]Mode, error) {
	var out []Mode
	for _, part := range splitList(s) {
		m := Mode(part)
		if !slices.Contains(Modes(), m) {
			return nil, fmt.Errorf("%q is not a mode (modes: exclusive, timeslice, memory)", part)
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no mode given (modes: exclusive, timeslice, memory)")
	}
	return out, nil
}

// Params are the model's knobs.
type Params struct {
	// Share is how many holders may take turns on one GPU in Timeslice.
	Share int
	// MemoryFraction is the part of a GPU's memory that holders packed by
	// memory may fill, as queue.shared_memory_fraction.
	MemoryFraction float64
	// SwitchOverhead is the part of its time a holder loses to context
	// switches while it shares a GPU with another one that computes.
	SwitchOverhead float64
	// Sched is the queue's settings the scheduler replays with.
	Sched queue.Config
	// Step is the utilisation series' step; 0: an hour.
	Step time.Duration
}

// outcome is one node's replay in one mode at one GPU count.
type outcome struct {
	gpus     int
	used     float64            // GPU-seconds used
	occupied map[string]float64 // by model: GPU-seconds a GPU had a holder
	waits    []float64          // queue jobs' waits, seconds
	stretch  []float64          // run time in the replay over the measured one
	end      time.Time          // when the last holder ended
	series   []float64          // GPU-seconds used per step of Params.Step from the start
	unplaced int                // holders that never started (too big, capped)
	overLim  int                // holders that ran past their time limit
}

// job is one holder in a replay.
type job struct {
	h        *Holder
	id       string
	user     string // the scheduler's user and team: a container by hand is never capped
	team     string
	memory   uint64 // memory asked in Memory mode; 0 for whole GPUs
	start    float64
	progress float64
	gpus     []int    // physical GPUs, positions in the node's list
	uuids    []string // as the scheduler placed it
	speed    float64
	rate     float64
}

// replay plays hs on gpus (one node's) in mode m, from from to the end
// of the last holder.
func replay(hs []*Holder, gpus []queue.GPU, models map[string]string, m Mode, p Params, from time.Time) outcome {
	out := outcome{gpus: len(gpus), occupied: map[string]float64{}}
	n := len(gpus)
	if n == 0 {
		out.unplaced = len(hs)
		return out
	}
	t0 := float64(from.Unix()) + float64(from.Nanosecond())/1e9
	cfg := p.Sched
	cfg.UserMaxGPUs = userCaps(cfg.UserMaxGPUs)
	cfg.SharedGPUs = nil
	cfg.OutsideMemoryThreshold = 1

	// The GPUs the scheduler sees: the node's, or Share slots of each.
	slots := 1
	if m == Timeslice {
		slots = max(1, p.Share)
	}
	var vgpus []queue.GPU
	phys := map[string]int{}
	for s := 0; s < slots; s++ {
		for i, g := range gpus {
			u := g.UUID
			if slots > 1 {
				u = g.UUID + "/" + strconv.Itoa(s)
			}
			vgpus = append(vgpus, queue.GPU{UUID: u, Index: s*n + i, MemoryTotal: g.MemoryTotal})
			phys[u] = i
		}
	}

	// Jobs; in Memory mode one-GPU holders ask for their peak memory on a
	// shared GPU, and the shared part of the node is as large as their
	// part of the GPU time.
	frac := p.MemoryFraction
	if frac <= 0 {
		frac = queue.DefaultSharedMemoryFraction
	}
	cfg.SharedMemoryFraction = frac
	jobs := make([]*job, 0, len(hs))
	var memSecs, allSecs float64
	maxWhole := 0
	for _, h := range hs {
		if h.GPUs > n {
			out.unplaced++
			continue
		}
		j := &job{h: h, id: h.ID, user: "u:" + h.User, team: h.Team}
		if h.JobID == "" {
			// Nothing capped a container started by hand.
			j.user, j.team = "c:"+h.ID, ""
			cfg.UserMaxGPUs[j.user] = n
		}
		secs := h.Duration() * float64(h.GPUs)
		allSecs += secs
		if m == Memory && h.GPUs == 1 {
			mem := max(h.PeakMemory, 1<<20)
			if float64(mem) <= frac*float64(gpus[0].MemoryTotal) {
				j.memory = mem
				memSecs += secs
			}
		}
		if j.memory == 0 {
			maxWhole = max(maxWhole, h.GPUs)
		}
		jobs = append(jobs, j)
	}
	if m == Memory {
		shared := n
		if maxWhole > 0 {
			shared = int(math.Round(float64(n) * memSecs / max(allSecs, 1)))
			if memSecs > 0 {
				shared = max(shared, 1)
			}
			shared = min(shared, n-maxWhole)
		}
		if shared <= 0 {
			for _, j := range jobs {
				j.memory = 0
			}
			shared = 0
		}
		for i := n - shared; i < n; i++ {
			cfg.SharedGPUs = append(cfg.SharedGPUs, gpus[i].UUID)
		}
	}

	byID := make(map[string]*job, len(jobs))
	for _, j := range jobs {
		byID[j.id] = j
	}
	var (
		next    int // next arrival in jobs (sorted by Submit)
		queued  []*job
		running []*job
		now     float64 // seconds since from
		demand  = make([]float64, n)
		count   = make([]int, n)
		busyGPU = make([]int, n) // holders on each GPU
		lastEnd = 0.0
	)
	arrival := func(j *job) float64 {
		if j.h.Prestarted {
			return 0
		}
		return max(0, j.h.Submit.Sub(from).Seconds())
	}
	slices.SortStableFunc(jobs, func(a, b *job) int {
		return cmpFloat(arrival(a), arrival(b))
	})
	// The scheduler's input is built afresh for every pass into slices
	// kept between passes.
	var qbuf []queue.QueuedJob
	var rbuf []queue.RunningJob
	schedule := func() bool {
		if len(queued) == 0 {
			return false
		}
		in := queue.Input{GPUs: vgpus, Config: cfg, Now: time.Unix(0, int64((t0+now)*1e9)).UTC(), Queued: qbuf[:0], Running: rbuf[:0]}
		for _, j := range queued {
			q := queue.QueuedJob{ID: j.id, User: j.user, Team: j.team, GPUs: j.h.GPUs, GPUMemory: j.memory,
				TimeLimit: j.h.TimeLimit, SubmittedAt: j.h.Submit}
			if j.memory > 0 {
				q.GPUs = 0
			}
			if j.h.Prestarted {
				// Running when the window began: first in line.
				q.SubmittedAt = from.AddDate(-1, 0, 0)
			}
			in.Queued = append(in.Queued, q)
		}
		for _, j := range running {
			in.Running = append(in.Running, queue.RunningJob{ID: j.id, User: j.user, Team: j.team, GPUs: j.uuids,
				GPUMemory: j.memory, StartedAt: time.Unix(0, int64((t0+j.start)*1e9)).UTC(), TimeLimit: j.h.TimeLimit})
		}
		qbuf, rbuf = in.Queued, in.Running
		plan := queue.Schedule(in)
		started := false
		for _, s := range plan.Starts {
			j := byID[s.JobID]
			var ps []int
			twice := false
			for _, u := range s.GPUs {
				i := phys[u]
				if slices.Contains(ps, i) {
					twice = true
				}
				ps = append(ps, i)
			}
			if twice {
				// A slot layout may hand one job two slots of one GPU:
				// it waits for a start on distinct GPUs.
				continue
			}
			j.gpus, j.uuids, j.start = ps, s.GPUs, now
			for _, i := range ps {
				busyGPU[i]++
			}
			running = append(running, j)
			queued = slices.DeleteFunc(queued, func(x *job) bool { return x == j })
			started = true
		}
		return started
	}

	for {
		changed := false
		for next < len(jobs) && arrival(jobs[next]) <= now {
			queued = append(queued, jobs[next])
			next++
			changed = true
		}
		if changed || len(running) == 0 {
			schedule()
		}
		if len(running) == 0 {
			if next >= len(jobs) {
				out.unplaced += len(queued)
				break
			}
			now = arrival(jobs[next])
			continue
		}
		// Rates: each running holder's demand on its GPUs and the speed
		// the sharing leaves it.
		clear(demand)
		clear(count)
		for _, j := range running {
			j.rate = j.h.rateAt(j.progress)
			d := j.rate / float64(len(j.gpus))
			for _, i := range j.gpus {
				demand[i] += d
				if d > 0 {
					count[i]++
				}
			}
		}
		for _, j := range running {
			j.speed = 1
			if j.rate == 0 {
				continue
			}
			for _, i := range j.gpus {
				f := 1.0
				if demand[i] > 1 {
					f = 1 / demand[i]
				}
				if count[i] > 1 {
					f *= 1 - p.SwitchOverhead
				}
				j.speed = min(j.speed, f)
			}
		}
		// The next event: an arrival, a holder's next minute row or end,
		// an hour of the clock or the window's end.
		dt := math.Inf(1)
		if next < len(jobs) {
			dt = arrival(jobs[next]) - now
		}
		for _, j := range running {
			d := j.h.Duration()
			step := math.Min(d, (math.Floor((j.h.Offset+j.progress)/60)+1)*60-j.h.Offset) - j.progress
			dt = math.Min(dt, step/j.speed)
		}
		step := p.Step.Seconds()
		if step <= 0 {
			step = 3600
		}
		dt = math.Min(dt, (math.Floor(now/step)+1)*step-now)
		dt = math.Max(dt, 1e-6)
		for i := range n {
			if busyGPU[i] > 0 {
				out.occupied[models[gpus[i].UUID]] += dt
			}
		}
		bucket := int(now / step)
		for len(out.series) <= bucket {
			out.series = append(out.series, 0)
		}
		for _, j := range running {
			u := j.rate * j.speed * dt
			out.used += u
			out.series[bucket] += u
		}
		now += dt
		ended := false
		running = slices.DeleteFunc(running, func(j *job) bool {
			j.progress += j.speed * dt
			if j.progress < j.h.Duration()-1e-6 {
				return false
			}
			for _, i := range j.gpus {
				busyGPU[i]--
			}
			ran := now - j.start
			if d := j.h.Duration(); d > 0 {
				out.stretch = append(out.stretch, ran/d)
			}
			if j.h.TimeLimit > 0 && ran > j.h.TimeLimit.Seconds()+1e-6 {
				out.overLim++
			}
			if j.h.JobID != "" && !j.h.Prestarted {
				out.waits = append(out.waits, j.start-arrival(j)+max(0, from.Sub(j.h.Submit).Seconds()))
			}
			lastEnd = max(lastEnd, now)
			ended = true
			return true
		})
		if ended {
			schedule()
		}
	}
	out.end = from.Add(time.Duration(lastEnd * float64(time.Second)))
	return out
}

// rateAt is the holder's busy GPUs at progress p seconds into its run.
func (h *Holder) rateAt(p float64) float64 {
	k := int((h.Offset + p) / 60)
	if k < 0 || k >= len(h.Rate) {
		return 0
	}
	return h.Rate[k]
}

func userCaps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out["u:"+k] = v
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
