package whatif

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// Fleet says how many GPUs to replay on besides the measured ones: a
// number (N), or one more or fewer than measured (+N, -N).
type Fleet struct {
	Set   bool
	N     int
	Delta bool // N is added to each node's count
}

// ParseFleet reads --fleet-gpus: N, +N or -N.
func ParseFleet(s string) (Fleet, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Fleet{}, nil
	}
	delta := s[0] == '+' || s[0] == '-'
	n, err := strconv.Atoi(s)
	if err != nil {
		return Fleet{}, fmt.Errorf("%q is not a GPU count: give N, +N or -N", s)
	}
	if !delta && n <= 0 {
		return Fleet{}, fmt.Errorf("%q: a fleet has at least one GPU", s)
	}
	return Fleet{Set: true, N: n, Delta: delta}, nil
}

// size is the GPU count f gives a node of have GPUs.
func (f Fleet) size(have int) int {
	if f.Delta {
		return max(1, have+f.N)
	}
	return f.N
}

// Options shape a replay.
type Options struct {
	Modes  []Mode
	Params Params
	Fleet  Fleet
	Prices cost.Model
	// NoSearch skips the search for the GPUs that keep today's p95 wait
	// (a replay per tried count).
	NoSearch bool
}

// Validate checks the options, naming the setting at fault as the
// command line spells it.
func (o *Options) Validate() error {
	if len(o.Modes) == 0 {
		o.Modes = Modes()
	}
	if o.Params.Share == 0 {
		o.Params.Share = 2
	}
	if o.Params.Share < 1 || o.Params.Share > 64 {
		return fmt.Errorf("--share: %d is not between 1 and 64", o.Params.Share)
	}
	if f := o.Params.MemoryFraction; f != 0 && (!(f > 0) || f > 1) {
		return fmt.Errorf("--memory-fraction: %v is not in (0, 1]", f)
	}
	if f := o.Params.SwitchOverhead; !(f >= 0) || f >= 1 {
		return fmt.Errorf("--switch-overhead: %v is not in [0, 1)", f)
	}
	if f := o.Params.Sched.TargetUtilization; f != 0 && (!(f > 0) || f > 1) {
		return fmt.Errorf("--target: %v is not in (0, 1]", f)
	}
	return nil
}

// Result is a replay's outcome: the JSON contract of `gpumeter whatif`
// and GET /api/v1/whatif.
type Result struct {
	Window   Window       `json:"window"`
	Model    Model        `json:"model"`
	Measured Measured     `json:"measured"`
	Modes    []ModeResult `json:"modes"`
}

// Window is the window asked for and where the replay begins.
type Window struct {
	From         time.Time `json:"from"`
	To           time.Time `json:"to"`
	ReplayedFrom time.Time `json:"replayed_from"`
}

// Model names what the figures are and what they assume.
type Model struct {
	Kind           string   `json:"kind"`
	Share          int      `json:"share"`
	MemoryFraction float64  `json:"memory_fraction"`
	SwitchOverhead float64  `json:"switch_overhead"`
	Placement      string   `json:"placement"`
	Holders        int      `json:"holders"`
	QueueJobs      int      `json:"queue_jobs"`
	Assumptions    []string `json:"assumptions"`
	Notes          []string `json:"notes"`
}

// Measured is what really happened in the replayed window.
type Measured struct {
	GPUs         int     `json:"gpus"`
	UtilMean     float64 `json:"util_mean"`
	GPUHoursHeld float64 `json:"gpu_hours_held"`
	Wait         Spread  `json:"wait_s"`
	MakespanS    float64 `json:"makespan_s"`
}

// Spread is p50, p95 and the largest of a sample (nearest rank).
type Spread struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	Max float64 `json:"max"`
}

// Stretch is p50 and p95 of the holders' run time in the replay over
// their measured one.
type Stretch struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
}

// Money is an amount in a currency.
type Money struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

// ModeResult is one mode's replay at one GPU count.
type ModeResult struct {
	Mode         Mode    `json:"mode"`
	GPUs         int     `json:"gpus"`
	UtilMean     float64 `json:"util_mean"`
	GPUHoursHeld float64 `json:"gpu_hours_held"`
	Wait         Spread  `json:"wait_s"`
	MakespanS    float64 `json:"makespan_s"`
	Stretch      Stretch `json:"stretch"`
	JobsSlowed   int     `json:"jobs_slowed"`
	// GPUsForP95Wait is the fewest GPUs with which the mode keeps the
	// measured p95 wait; nil when there is no queue job to measure it
	// by, or it was not searched.
	GPUsForP95Wait *int  `json:"gpus_for_p95_wait"`
	Cost           Money `json:"cost"`
	// OverTimeLimit counts holders that ran past their time limit (the
	// replay does not stop them); Unplaced those that never started.
	OverTimeLimit int `json:"over_time_limit"`
	Unplaced      int `json:"unplaced"`
	// UtilStepS is the step of UtilSeries in seconds: a minute for
	// histories of up to two hours, five for up to two days, else an
	// hour; UtilSeries is the utilisation in each step from
	// replayed_from.
	UtilStepS  float64   `json:"util_step_s"`
	UtilSeries []float64 `json:"util_series"`
}

// slowed is the stretch above which a holder counts as slowed.
const slowed = 1.01

// assumptions are the model's, said with every result.
var assumptions = []string{
	"a replay of measured use: each holder (queue job, or container started by hand, which arrives when it started) keeps its measured SM use and memory per minute and its measured run time, and arrives as it did",
	"the queue's own scheduler places the holders in order of submission (fair share, budgets and preemption are not replayed; user and team caps are, for queue jobs only)",
	"timeslice: up to share holders per GPU; while a GPU's holders ask for more than 100 % SM together, each computing holder's progress is scaled down to fit, and by switch_overhead while it shares the GPU with another computing holder; memory contention is not modelled",
	"memory: one-GPU holders are packed by their measured peak memory within memory_fraction of a GPU on GPUs marked for sharing (as many as their share of the GPU time), progress as in timeslice; holders of several GPUs keep whole GPUs",
	"a holder that idles is not slowed; a holder slowed past its time limit runs on (counted in over_time_limit)",
	"util_mean is GPU-seconds used over the GPUs' capacity from the replayed window's start until its last holder ends (the makespan), measured and replayed alike; the window's work is replayed to its end, past the window if need be; gpu_hours_held are hours in which a GPU had at least one holder; cost prices those hours at the configured GPU-hour prices",
	"waits are of queue jobs only, p50 and p95 by nearest rank",
}

// Run replays h under every mode of o, on the measured GPUs and, with
// o.Fleet, on the fleet it names.
func Run(h *History, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	prices := o.Prices.WithDefaults()
	frac := o.Params.MemoryFraction
	if frac == 0 {
		frac = o.Params.Sched.SharedMemoryFraction
	}
	if frac == 0 {
		frac = queue.DefaultSharedMemoryFraction
	}
	o.Params.MemoryFraction = frac
	switch span := h.Makespan(); {
	case span <= 2*time.Hour:
		o.Params.Step = time.Minute
	case span <= 48*time.Hour:
		o.Params.Step = 5 * time.Minute
	default:
		o.Params.Step = time.Hour
	}
	placement := string(o.Params.Sched.Placement)
	if placement == "" {
		placement = string(queue.Binpack)
	}
	res := &Result{
		Window: Window{From: h.From, To: h.To, ReplayedFrom: h.ReplayedFrom},
		Model: Model{Kind: "replay of measured use under a model", Share: o.Params.Share, MemoryFraction: frac,
			SwitchOverhead: o.Params.SwitchOverhead, Placement: placement, Holders: len(h.Holders),
			Assumptions: assumptions, Notes: append([]string{}, h.Notes...)},
	}
	byNode := map[string][]*Holder{}
	var realWaits []float64
	measuredGPUs := 0
	for _, gs := range h.GPUs {
		measuredGPUs += len(gs)
	}
	var held float64
	for _, hd := range h.Holders {
		byNode[hd.Node] = append(byNode[hd.Node], hd)
		held += hd.Held
		if hd.JobID != "" && !hd.Prestarted {
			res.Model.QueueJobs++
			realWaits = append(realWaits, max(0, hd.RealStart.Sub(hd.Submit).Seconds()))
		}
	}
	res.Measured = Measured{GPUs: measuredGPUs, UtilMean: ratio(h.Used, float64(measuredGPUs)*h.Makespan().Seconds()),
		GPUHoursHeld: held / 3600, Wait: spread(realWaits), MakespanS: h.Makespan().Seconds()}
	nodes := make([]string, 0, len(h.GPUs))
	for n := range h.GPUs {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	if h.Sharers > 0 {
		res.Model.Notes = append(res.Model.Notes, fmt.Sprintf("%d holders shared a GPU with another one at some time in the window: exclusive mode gives each its own GPUs, so it does not reproduce that sharing", h.Sharers))
	}
	if len(nodes) > 1 {
		res.Model.Notes = append(res.Model.Notes, "each node is replayed on its own GPUs (a job runs on one node)")
	}
	fleets := []Fleet{{}}
	if o.Fleet.Set {
		fleets = append(fleets, o.Fleet)
	}
	for _, fl := range fleets {
		for _, m := range o.Modes {
			var outs []outcome
			for _, n := range nodes {
				gs := h.GPUs[n]
				if fl.Set {
					gs = resize(gs, fl.size(len(gs)))
				}
				outs = append(outs, replay(byNode[n], gs, modelsFor(h.Models, gs, h.GPUs[n]), m, o.Params, h.ReplayedFrom))
			}
			mr := summarise(m, outs, h, prices, o.Params.Step)
			if !o.NoSearch && len(realWaits) > 0 {
				total := 0
				for _, n := range nodes {
					total += gpusFor(byNode[n], h.GPUs[n], h.Models, m, o.Params, h.ReplayedFrom, spread(realWaits).P95)
				}
				mr.GPUsForP95Wait = &total
			}
			res.Modes = append(res.Modes, mr)
		}
	}
	return res, nil
}

// summarise adds up the nodes' outcomes of one mode.
func summarise(m Mode, outs []outcome, h *History, prices cost.Model, step time.Duration) ModeResult {
	mr := ModeResult{Mode: m}
	var used float64
	var waits, stretch []float64
	var series []float64
	end := h.ReplayedFrom
	for _, o := range outs {
		mr.GPUs += o.gpus
		used += o.used
		waits = append(waits, o.waits...)
		stretch = append(stretch, o.stretch...)
		for model, secs := range o.occupied {
			mr.GPUHoursHeld += secs / 3600
			mr.Cost.Amount += secs / 3600 * prices.GPUHourCost(model)
		}
		if o.end.After(end) {
			end = o.end
		}
		for len(series) < len(o.series) {
			series = append(series, 0)
		}
		for i, u := range o.series {
			series[i] += u
		}
		mr.OverTimeLimit += o.overLim
		mr.Unplaced += o.unplaced
	}
	mr.Cost.Currency = prices.Currency
	mr.Cost.Amount = math.Round(mr.Cost.Amount*100) / 100
	mr.Wait = spread(waits)
	mr.MakespanS = end.Sub(h.ReplayedFrom).Seconds()
	mr.UtilMean = ratio(used, float64(mr.GPUs)*mr.MakespanS)
	span := mr.MakespanS
	s := spread(stretch)
	mr.Stretch = Stretch{P50: s.P50, P95: s.P95}
	for _, x := range stretch {
		if x > slowed {
			mr.JobsSlowed++
		}
	}
	mr.UtilStepS = step.Seconds()
	mr.UtilSeries = make([]float64, len(series))
	for i, u := range series {
		secs := math.Min(mr.UtilStepS, span-float64(i)*mr.UtilStepS)
		mr.UtilSeries[i] = ratio(u, float64(mr.GPUs)*secs)
	}
	return mr
}

// gpusFor is the fewest GPUs with which mode m keeps the p95 wait of
// one node's queue jobs at or under target (a bisection: the wait is
// taken to fall as GPUs are added).
func gpusFor(hs []*Holder, gs []queue.GPU, models map[string]string, m Mode, p Params, from time.Time, target float64) int {
	lo := 1
	for _, h := range hs {
		lo = max(lo, h.GPUs)
	}
	ok := func(n int) bool {
		g := resize(gs, n)
		o := replay(hs, g, modelsFor(models, g, gs), m, p, from)
		return o.unplaced == 0 && spread(o.waits).P95 <= target+1e-6
	}
	hi := max(lo, len(gs))
	for !ok(hi) {
		if hi >= 16*max(1, len(gs)) {
			return hi
		}
		hi *= 2
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi
}

// resize gives n GPUs like gs: its first n, or more like its last.
func resize(gs []queue.GPU, n int) []queue.GPU {
	if n <= len(gs) {
		return gs[:n]
	}
	out := append(make([]queue.GPU, 0, n), gs...)
	last := queue.GPU{Index: -1}
	if len(gs) > 0 {
		last = gs[len(gs)-1]
	}
	for i := len(gs); i < n; i++ {
		out = append(out, queue.GPU{UUID: "whatif-" + strconv.Itoa(i), Index: last.Index + 1 + i - len(gs), MemoryTotal: last.MemoryTotal})
	}
	return out
}

// modelsFor names the models of gs, the added GPUs as the last of orig.
func modelsFor(models map[string]string, gs, orig []queue.GPU) map[string]string {
	if len(gs) <= len(orig) || len(orig) == 0 {
		return models
	}
	out := make(map[string]string, len(models)+len(gs))
	for k, v := range models {
		out[k] = v
	}
	for _, g := range gs[len(orig):] {
		out[g.UUID] = models[orig[len(orig)-1].UUID]
	}
	return out
}

// spread is the sample's p50, p95 and max by nearest rank; zeros for an
// empty sample.
func spread(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Spread{P50: rank(s, 0.5), P95: rank(s, 0.95), Max: s[len(s)-1]}
}

// rank is the nearest-rank percentile q of sorted s.
func rank(s []float64, q float64) float64 {
	k := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
