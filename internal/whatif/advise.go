package whatif

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/units"
)

// Kind is what an advice is about.
type Kind string

// The kinds of advice.
const (
	// KindGPUs: asked for N GPUs, computed on k at p95: --gpus k.
	KindGPUs Kind = "gpus"
	// KindGPUMemory: a small memory peak and low SM use on a whole GPU:
	// --gpu-memory on a shared GPU.
	KindGPUMemory Kind = "gpu_memory"
	// KindTimeLimit: runs end well before their limit, or have none:
	// --time-limit 1.25 × the p95 run.
	KindTimeLimit Kind = "time_limit"
	// KindIdlePolicy: GPUs held idle for long stretches: the idle rule
	// with a stop action.
	KindIdlePolicy Kind = "idle_policy"
	// KindDataLoading: low efficiency with much memory held and SM
	// stalls: a pointer to the input pipeline, not a guess.
	KindDataLoading Kind = "data_loading"
)

// AdviseOptions shape the advice.
type AdviseOptions struct {
	// User and Team, when set, keep only that user's or team's advice.
	User, Team string
	Prices     cost.Model
	// MemoryFraction is queue.shared_memory_fraction (0: the default).
	MemoryFraction float64
	// IdleWindow and IdleGrace are the idle rule's (waste.idle.*), which
	// the idle policy would stop a container after; 0 window: 1 h.
	IdleWindow, IdleGrace time.Duration
}

// Advice is one piece of advice: the JSON contract's element.
type Advice struct {
	User  string `json:"user"`
	Team  string `json:"team"`
	Group string `json:"group"`
	Kind  Kind   `json:"kind"`
	// Flag is what to use: a submit flag, or settings; "" for a pointer.
	Flag          string         `json:"flag"`
	Evidence      map[string]any `json:"evidence"`
	SavedGPUHours float64        `json:"saved_gpu_hours"`
	SavedCost     Money          `json:"saved_cost"`
	// Holders are the containers the advice was drawn from.
	Holders []string `json:"holders"`
}

// AdviceReport is what advise prints: the JSON contract of `gpumeter
// advise` and GET /api/v1/advice.
type AdviceReport struct {
	Window Window   `json:"window"`
	Advice []Advice `json:"advice"`
	Notes  []string `json:"notes"`
}

// Thresholds of the rules, said in the evidence they produce.
const (
	// memoryShareMax: a peak of at most this part of the usable memory
	// lets at least two such jobs share a GPU.
	memoryShareMax = 0.5
	// lowEfficiency is the efficiency under which SM use is low.
	lowEfficiency = 0.5
	// limitFactor: a limit this many times the p95 run or more is far
	// above it.
	limitFactor = 2.0
	// idleShareMin is the part of its held time a group must idle.
	idleShareMin = 0.5
	// stallEfficiency, stallMemory and stallShare: data loading is
	// suspected under this efficiency, with a mean memory of at least
	// this part of the GPU, idling at least this part of the minutes.
	stallEfficiency = 0.3
	stallMemory     = 0.5
	stallShare      = 0.2
)

var digits = regexp.MustCompile(`[0-9]+`)

// namePattern is a container's name with its numbers (run, index, job
// id) made a wildcard, so that the runs of one script group together.
func namePattern(name string) string {
	return digits.ReplaceAllString(name, "*")
}

// group is the holders of one user with the same image, name pattern and
// GPU count.
type group struct {
	user, team, key string
	hs              []*Holder
}

// Advise reads h for advice per user and group of similar jobs.
func Advise(h *History, o AdviseOptions) *AdviceReport {
	prices := o.Prices.WithDefaults()
	frac := o.MemoryFraction
	if frac <= 0 {
		frac = 0.9
	}
	window := o.IdleWindow
	if window <= 0 {
		window = time.Hour
	}
	rep := &AdviceReport{Window: Window{From: h.From, To: h.To, ReplayedFrom: h.ReplayedFrom}, Advice: []Advice{}, Notes: append([]string{}, h.Notes...)}
	groups := map[string]*group{}
	var keys []string
	for _, hd := range h.Holders {
		if o.User != "" && hd.User != o.User || o.Team != "" && hd.Team != o.Team {
			continue
		}
		key := fmt.Sprintf("%s (%s, %s)", namePattern(hd.Name), hd.Image, gpusText(hd.Asked))
		k := hd.User + "\x00" + key
		g := groups[k]
		if g == nil {
			g = &group{user: hd.User, team: hd.Team, key: key}
			groups[k] = g
			keys = append(keys, k)
		}
		g.hs = append(g.hs, hd)
	}
	slices.Sort(keys)
	for _, k := range keys {
		g := groups[k]
		add := func(kind Kind, flag string, ev map[string]any, saved float64) {
			a := Advice{User: g.user, Team: g.team, Group: g.key, Kind: kind, Flag: flag, Evidence: ev,
				SavedGPUHours: round(saved, 4), SavedCost: Money{Currency: prices.Currency}}
			for _, hd := range g.hs {
				a.Holders = append(a.Holders, hd.ID)
			}
			if saved > 0 {
				a.SavedCost.Amount = round(saved*prices.GPUHourCost(g.hs[0].Model), 2)
			}
			rep.Advice = append(rep.Advice, a)
		}
		var held, used, memBS, minutes, idle float64
		var busy []int
		var runs []float64
		asked, limit, noLimit, jobs := g.hs[0].Asked, time.Duration(0), 0, 0
		var peak uint64
		var idleSaved float64
		longest := 0
		for _, hd := range g.hs {
			held += hd.Held
			used += hd.Used
			memBS += hd.MemoryMean * hd.Held
			peak = max(peak, hd.PeakMemory)
			for _, b := range hd.Busy {
				busy = append(busy, int(b))
			}
			if hd.JobID != "" {
				jobs++
				runs = append(runs, hd.RealEndRun())
				if hd.TimeLimit == 0 {
					noLimit++
				}
				limit = max(limit, hd.TimeLimit)
			}
			// Idle stretches: minutes in which none of its GPUs computed.
			run := 0
			flush := func() {
				longest = max(longest, run)
				if over := float64(run) - (window + o.IdleGrace).Minutes(); over > 0 {
					idleSaved += over / 60 * float64(hd.GPUs)
				}
				run = 0
			}
			for _, b := range hd.Busy {
				minutes++
				if b == 0 {
					idle++
					run++
				} else {
					flush()
				}
			}
			flush()
		}
		if held <= 0 {
			continue
		}
		eff := used / held
		memTotal := g.hs[0].MemoryTotal
		idleShare := ratio(idle, minutes)
		memMean := memBS / held

		// gpus: asked for several GPUs, computed on fewer at p95.
		if asked > 1 && len(busy) > 0 {
			k := max(1, int(rankInt(busy, 0.95)))
			if k < asked {
				var saved float64
				for _, hd := range g.hs {
					saved += float64(hd.GPUs-k) * hd.Duration() / 3600
				}
				add(KindGPUs, "--gpus "+strconv.Itoa(k), map[string]any{
					"asked": asked, "used_p95": k, "runs": len(g.hs), "minutes": len(busy),
					"rule": fmt.Sprintf("GPUs computing (SM above %.0f %% of the time held) in a minute, p95 over the runs' minutes", 100*busyShare),
				}, max(0, saved))
			}
		}
		idleAdvice := idleShare >= idleShareMin && float64(longest) >= (window+o.IdleGrace).Minutes()
		// gpu_memory: one GPU, a small peak and low SM use.
		if asked == 1 && memTotal > 0 && !idleAdvice {
			m := ceilGiB(peak)
			usable := frac * float64(memTotal)
			if float64(m) <= memoryShareMax*usable && eff < lowEfficiency {
				share := max(float64(m)/usable, eff)
				add(KindGPUMemory, "--gpu-memory "+units.FormatSize(m), map[string]any{
					"peak_memory_bytes": peak, "gpu_memory_bytes": memTotal, "efficiency": round(eff, 4),
					"memory_fraction": frac, "share_of_gpu": round(share, 4),
					"rule": "a shared GPU holds it for the larger of its memory share and its SM use; the rest of the GPU is saved",
				}, held/3600*(1-share))
			}
		}
		// time_limit: queue jobs that end well before their limit, or
		// have none.
		if jobs > 0 && len(runs) == jobs {
			r := spread(runs).P95
			want := time.Duration(math.Ceil(1.25*r/60)) * time.Minute
			if noLimit > 0 || limit.Seconds() >= limitFactor*r {
				ev := map[string]any{"runs": jobs, "run_p95_s": r, "time_limit_s": limit.Seconds(), "without_limit": noLimit,
					"rule":  "a limit is far above the runs when it is at least twice their p95; advised: 1.25 × p95, to the minute",
					"saves": "waits, not GPU-hours: the scheduler backfills around a job by its limit"}
				add(KindTimeLimit, "--time-limit "+units.FormatDuration(want), ev, 0)
			}
		}
		// idle_policy: GPUs held idle for long stretches.
		if idleAdvice {
			add(KindIdlePolicy, fmt.Sprintf("waste.idle.window: %s, policy.rules.idle.action: stop", units.FormatDuration(window)), map[string]any{
				"idle_share": round(idleShare, 4), "longest_idle_s": float64(longest) * 60, "idle_window_s": window.Seconds(), "idle_grace_s": o.IdleGrace.Seconds(),
				"rule": fmt.Sprintf("minutes in which no GPU held computed (SM at most %.0f %% of the time held); saved: idle time past the window and grace", 100*busyShare),
			}, idleSaved)
		}
		// data_loading: low efficiency with much memory held and stalls.
		if !idleAdvice && memTotal > 0 && eff < stallEfficiency && memMean >= stallMemory*float64(memTotal) && idleShare >= stallShare {
			add(KindDataLoading, "", map[string]any{
				"efficiency": round(eff, 4), "memory_mean_bytes": uint64(math.Round(memMean)), "gpu_memory_bytes": memTotal, "stalled_share": round(idleShare, 4),
				"pointer": "memory is held while the GPU waits: profile the input pipeline (data loader workers, pinned memory, storage throughput) before changing the request",
			}, 0)
		}
	}
	return rep
}

// RealEndRun is the holder's measured run in seconds from its real start.
func (h *Holder) RealEndRun() float64 { return h.End.Sub(h.RealStart).Seconds() }

func gpusText(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return strconv.Itoa(n) + " GPUs"
}

// ceilGiB rounds b up to a whole GiB.
func ceilGiB(b uint64) uint64 {
	const gib = 1 << 30
	return (b + gib - 1) / gib * gib
}

func rankInt(xs []int, q float64) int {
	s := slices.Clone(xs)
	slices.Sort(s)
	k := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

func round(f float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(f*p) / p
}

// WriteJSON writes the report as its JSON contract.
func (r *AdviceReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteCSV writes one row per advice, the evidence as JSON.
func (r *AdviceReport) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"user", "team", "group", "kind", "flag", "saved_gpu_hours", "saved_cost", "currency", "evidence"})
	for _, a := range r.Advice {
		ev, _ := json.Marshal(a.Evidence)
		_ = cw.Write([]string{a.User, a.Team, a.Group, string(a.Kind), a.Flag, num(a.SavedGPUHours), num(a.SavedCost.Amount), a.SavedCost.Currency, string(ev)})
	}
	cw.Flush()
	return cw.Error()
}

// WriteTable writes one line per advice, then its evidence.
func (r *AdviceReport) WriteTable(w io.Writer) error {
	if len(r.Advice) == 0 {
		fmt.Fprintf(w, "No advice over %s – %s: the measured use matches what was asked for.\n", r.Window.From.Format(time.RFC3339), r.Window.To.Format(time.RFC3339))
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "USER\tTEAM\tGROUP\tKIND\tUSE\tSAVED GPU-H\tSAVED")
		for _, a := range r.Advice {
			flag := a.Flag
			if flag == "" {
				flag = "(see evidence)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2f\t%.2f %s\n", a.User, a.Team, a.Group, a.Kind, flag, a.SavedGPUHours, a.SavedCost.Amount, a.SavedCost.Currency)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
		for _, a := range r.Advice {
			keys := make([]string, 0, len(a.Evidence))
			for k := range a.Evidence {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			parts := make([]string, 0, len(keys))
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s=%v", k, a.Evidence[k]))
			}
			fmt.Fprintf(w, "%s %s %s: %s\n", a.User, a.Group, a.Kind, strings.Join(parts, "; "))
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "Note: %s\n", n)
	}
	return nil
}
