// Package whatif replays the ledger's measured history through the queue's
// pure scheduler on a virtual clock, under another way of sharing GPUs
// (exclusive, time-slicing, memory packing) or another GPU count, and
// derives from the same history per-user advice on what to ask for.
// Everything it says is a model of measured use; the model's assumptions
// travel with every result.
package whatif

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// Reader is what the replay reads from a ledger: minute usage, the GPUs
// and the queue's jobs.
type Reader interface {
	Series(ctx context.Context, f ledger.Filter, step time.Duration) ([]ledger.UsagePoint, error)
	KnownGPUs(ctx context.Context) ([]ledger.GPU, error)
	Jobs(ctx context.Context, f ledger.JobFilter) ([]queue.Job, error)
}

// Holder is one job or container that held GPUs in the window, as
// measured: the unit the replay moves around.
type Holder struct {
	// ID is the container's ID; JobID the queue job it ran, "" for a
	// container started by hand.
	ID, JobID string
	Node      string
	Name      string
	Image     string
	User      string
	Team      string
	// Submit is when the holder arrived: the job's submission, or the
	// container's start for one started by hand.
	Submit time.Time
	// Start and End bound the measured run inside the replayed window;
	// RealStart is the real start (before Start when Prestarted).
	Start, End, RealStart time.Time
	// Prestarted holders were running when the replayed window began:
	// they start at its beginning in every mode and their wait is not
	// counted.
	Prestarted bool
	// GPUs is how many GPUs it held; Asked how many it asked for (a
	// queue job's request, else GPUs).
	GPUs, Asked int
	// TimeLimit is the job's limit; 0 when none (a container by hand).
	TimeLimit time.Duration
	// Model is the model of its (first) GPU, for prices; MemoryTotal that
	// GPU's memory.
	Model       string
	MemoryTotal uint64
	// Offset is how far into its first minute row the run starts, in
	// seconds; Rate[m] is how many of its GPUs were busy (SM-weighted,
	// 0..GPUs) in minute row m, and Busy[m] how many of them were busy
	// above busyShare.
	Offset float64
	Rate   []float64
	Busy   []uint8
	// PeakMemory is the largest memory it held on one GPU; MemoryMean the
	// mean per GPU over the time it held them.
	PeakMemory uint64
	MemoryMean float64
	// Used and Held are its measured GPU-seconds in the window.
	Used, Held float64
	// UUIDs are the GPUs it held, sorted.
	UUIDs []string
}

// Duration is the holder's measured run in seconds.
func (h *Holder) Duration() float64 { return h.End.Sub(h.Start).Seconds() }

// busyShare is the SM share above which a GPU of a holder counts as used
// in a minute.
const busyShare = 0.05

// History is the window's measured use: the holders, the GPUs per node
// and what the window lacks.
type History struct {
	From, To time.Time
	// ReplayedFrom is where the ledger's minutes begin inside the window
	// (From when they cover it): nothing before it is replayed.
	ReplayedFrom time.Time
	Holders      []*Holder
	// GPUs are the nodes' GPUs, by node, ordered by index.
	GPUs map[string][]queue.GPU
	// Models names each GPU's model, by UUID.
	Models map[string]string
	// Used is the GPU-seconds the holders used in [ReplayedFrom, To).
	Used float64
	// Notes say what the history leaves out, in sentences.
	Notes []string
	// Sharers counts the holders that held a GPU at the same time as
	// another one: exclusive mode cannot reproduce their sharing.
	Sharers int
}

// Makespan is from the replayed window's start to the measured end of
// its last holder.
func (h *History) Makespan() time.Duration {
	end := h.ReplayedFrom
	for _, hd := range h.Holders {
		if hd.End.After(end) {
			end = hd.End
		}
	}
	return end.Sub(h.ReplayedFrom)
}

// Load reads the window [from, to) of node ("" for all) from the ledger.
func Load(ctx context.Context, r Reader, from, to time.Time, node string) (*History, error) {
	from, to = from.UTC(), to.UTC()
	h := &History{From: from, To: to, ReplayedFrom: from, GPUs: map[string][]queue.GPU{}, Models: map[string]string{}}
	pts, err := r.Series(ctx, ledger.Filter{From: from, To: to, Node: node}, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("read the window's minutes: %w", err)
	}
	if len(pts) > 0 && pts[0].Start.After(from) {
		// The replay starts where the ledger's minutes do. Retention
		// deletes minutes by whole hours: hour rows before the first
		// minute's hour say that minutes were there and are gone.
		first := pts[0].Start
		h.ReplayedFrom = first
		if hourEnd := first.Truncate(time.Hour); hourEnd.After(from) {
			hours, err := r.Series(ctx, ledger.Filter{From: from, To: hourEnd, Node: node}, time.Hour)
			if err != nil {
				return nil, fmt.Errorf("read the window's hours: %w", err)
			}
			if len(hours) > 0 {
				h.Notes = append(h.Notes, fmt.Sprintf("the ledger keeps minutes from %s only (retention): %s of the window before it is not replayed",
					first.Format(time.RFC3339), first.Sub(from).Round(time.Minute)))
			}
		}
		if len(h.Notes) == 0 && first.Sub(from) >= time.Hour {
			h.Notes = append(h.Notes, fmt.Sprintf("the ledger has no use in the window before %s: the replay starts there", first.Format(time.RFC3339)))
		}
	}
	gpus, err := r.KnownGPUs(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the GPUs: %w", err)
	}
	nodes := map[string]bool{}
	for i := range pts {
		nodes[pts[i].Node] = true
	}
	memTotal := map[string]uint64{}
	for _, g := range gpus {
		if !nodes[g.Node] {
			continue
		}
		h.GPUs[g.Node] = append(h.GPUs[g.Node], queue.GPU{UUID: g.UUID, Index: g.Index, MemoryTotal: g.MemoryTotal})
		h.Models[g.UUID] = g.Model
		memTotal[g.UUID] = g.MemoryTotal
	}
	for n := range h.GPUs {
		slices.SortFunc(h.GPUs[n], func(a, b queue.GPU) int { return a.Index - b.Index })
	}
	jobs, err := r.Jobs(ctx, ledger.JobFilter{IncludeEnded: true})
	if err != nil {
		return nil, fmt.Errorf("read the queue's jobs: %w", err)
	}
	byContainer := map[string]*queue.Job{}
	for i := range jobs {
		if jobs[i].ContainerID != "" {
			byContainer[jobs[i].ContainerID] = &jobs[i]
		}
	}

	type minute struct {
		used, held float64
		busy       int
	}
	type acc struct {
		h       *Holder
		c       *ledger.Container
		first   time.Time
		last    time.Time
		gpus    map[string]bool
		minutes map[time.Time]*minute
		memBS   float64
	}
	accs := map[string]*acc{}
	var order []string
	for i := range pts {
		p := &pts[i]
		if p.OwnerKind != ledger.KindContainer || p.Container == nil || p.HeldSeconds <= 0 || p.GPU.UUID == "" {
			continue
		}
		key := p.Node + "/" + p.OwnerID
		a := accs[key]
		if a == nil {
			a = &acc{h: &Holder{ID: p.OwnerID, Node: p.Node}, c: p.Container, first: p.Start, gpus: map[string]bool{}, minutes: map[time.Time]*minute{}}
			accs[key] = a
			order = append(order, key)
		}
		a.last = p.Start
		a.gpus[p.GPU.UUID] = true
		m := a.minutes[p.Start]
		if m == nil {
			m = &minute{}
			a.minutes[p.Start] = m
		}
		m.used += p.UsedSeconds
		m.held += p.HeldSeconds
		if p.UsedSeconds > busyShare*p.HeldSeconds {
			m.busy++
		}
		a.memBS += p.MemoryByteSeconds
		a.h.Used += p.UsedSeconds
		a.h.Held += p.HeldSeconds
		a.h.PeakMemory = max(a.h.PeakMemory, p.PeakMemoryBytes)
		if h.Models[p.GPU.UUID] == "" {
			h.Models[p.GPU.UUID] = p.GPU.Model
		}
		if a.h.Model == "" {
			a.h.Model = p.GPU.Model
			a.h.MemoryTotal = memTotal[p.GPU.UUID]
		}
	}
	for _, key := range order {
		a := accs[key]
		hd, c := a.h, a.c
		hd.Name, hd.Image, hd.User, hd.Team = c.Name, c.Image, c.User, c.Team
		hd.GPUs = len(a.gpus)
		hd.Asked = hd.GPUs
		for u := range a.gpus {
			hd.UUIDs = append(hd.UUIDs, u)
		}
		slices.Sort(hd.UUIDs)
		start := c.StartedAt
		if start.IsZero() || start.After(a.first.Add(time.Minute)) {
			start = a.first
		}
		end := a.last.Add(time.Minute)
		if !c.FinishedAt.IsZero() && c.FinishedAt.Before(end) && c.FinishedAt.After(a.last) {
			end = c.FinishedAt
		}
		end = minTime(end, to)
		hd.RealStart = start
		hd.Submit = start
		if j := byContainer[hd.ID]; j != nil {
			hd.JobID = j.ID
			if !j.SubmittedAt.IsZero() {
				hd.Submit = j.SubmittedAt
			}
			if !j.StartedAt.IsZero() {
				hd.RealStart = j.StartedAt
				if j.StartedAt.Before(start) && !j.StartedAt.Before(a.first.Add(-time.Minute)) {
					start = j.StartedAt
				}
			}
			hd.TimeLimit = j.TimeLimit
			if j.GPUsRequested > 0 {
				hd.Asked = j.GPUsRequested
			}
			if j.User != "" {
				hd.User = j.User
			}
			if j.Team != "" {
				hd.Team = j.Team
			}
			if hd.Name == "" {
				hd.Name = j.Name
			}
		}
		if start.Before(h.ReplayedFrom) {
			start = h.ReplayedFrom
			hd.Prestarted = true
		}
		if !end.After(start) {
			continue
		}
		hd.Start, hd.End = start, end
		base := start.Truncate(time.Minute)
		hd.Offset = start.Sub(base).Seconds()
		n := int(math.Ceil((hd.Offset + hd.Duration()) / 60))
		hd.Rate = make([]float64, n)
		hd.Busy = make([]uint8, n)
		for t, m := range a.minutes {
			k := int(t.Sub(base) / time.Minute)
			if k < 0 || k >= n || m.held <= 0 {
				continue
			}
			hd.Rate[k] = min(float64(hd.GPUs), m.used/(m.held/float64(hd.GPUs)))
			hd.Busy[k] = uint8(min(m.busy, 255))
		}
		if hd.Held > 0 {
			hd.MemoryMean = a.memBS / hd.Held
		}
		h.Used += hd.Used
		h.Holders = append(h.Holders, hd)
	}
	slices.SortFunc(h.Holders, func(a, b *Holder) int {
		if c := a.Submit.Compare(b.Submit); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	h.Sharers = sharers(h.Holders)
	if len(h.Holders) == 0 {
		h.Notes = append(h.Notes, "the window has no measured GPU holders: nothing to replay")
	}
	var missing int
	for i := range jobs {
		j := &jobs[i]
		if j.SubmittedAt.Before(from) || !j.SubmittedAt.Before(to) || (node != "" && j.Node != node) {
			continue
		}
		if j.ContainerID == "" || accs[j.Node+"/"+j.ContainerID] == nil {
			missing++
		}
	}
	if missing > 0 {
		h.Notes = append(h.Notes, fmt.Sprintf("%d queue jobs submitted in the window have no measured use in it (still queued, cancelled, or never held a GPU): they are not replayed", missing))
	}
	return h, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// sharers counts the holders that held a GPU at the same time as
// another holder.
func sharers(hs []*Holder) int {
	byGPU := map[string][]*Holder{}
	for _, h := range hs {
		for _, u := range h.UUIDs {
			byGPU[h.Node+"/"+u] = append(byGPU[h.Node+"/"+u], h)
		}
	}
	shared := map[*Holder]bool{}
	for _, l := range byGPU {
		slices.SortFunc(l, func(a, b *Holder) int { return a.Start.Compare(b.Start) })
		var last *Holder
		for _, h := range l {
			if last != nil && h.Start.Before(last.End) {
				shared[h], shared[last] = true, true
			}
			if last == nil || h.End.After(last.End) {
				last = h
			}
		}
	}
	return len(shared)
}
