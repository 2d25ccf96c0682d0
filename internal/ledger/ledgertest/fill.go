package ledgertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// FillVersion changes whenever Fill30Days writes something different;
// key caches of a filled ledger on it. Version 2 added the GPUs' sampled
// figures (ledger schema 9); the plan's random draws are version 1's.
const FillVersion = 2

// Month describes the ledger Fill30Days writes: one node with 8 GPUs,
// 2,000 containers over 30 days, each running 1–4 hours on 1 or 2 GPUs
// (GPUs are shared when several hold them), a root process on GPU 0 for
// ten minutes a night, and every GPU's totals, all at minute resolution.
type Month struct {
	From, To   time.Time // the 30 days, whole hours
	Node       string
	GPUs       []ledger.GPU
	Containers []ledger.Container
	runs       []run
}

// run is one container's stay on its GPUs.
type run struct {
	ctr        int
	gpus       []int
	from, to   int // minutes since From
	used, mem  float64
	cores      float64
	ramBytes   float64
	util       float64
	memoryPeak uint64
}

const (
	monthMinutes  = 30 * 24 * 60
	monthGPUs     = 8
	monthCtrs     = 2000
	idleWatts     = 70.0
	activeWatts   = 550.0
	batchMinutes  = 360 // six hours of rows per Write
	monthNodeName = "node-01"
)

// Plan30Days describes the month Fill30Days writes, without writing it.
func Plan30Days() Month {
	rng := rand.New(rand.NewPCG(20250101, 1))
	m := Month{
		From: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		Node: monthNodeName,
	}
	m.To = m.From.Add(monthMinutes * time.Minute)
	for i := range monthGPUs {
		m.GPUs = append(m.GPUs, ledger.GPU{
			Node: m.Node, UUID: fmt.Sprintf("GPU-%08x-4b1d-9c2e-8f3a-%012x", 0xa100+i, 0x5eed0000+i),
			Index: i, Model: "NVIDIA H100 80GB HBM3", MemoryTotal: 80 << 30,
		})
	}
	teams := []string{"vision", "nlp", "speech", "rl", "infra", "robotics", "bio", "search"}
	images := []string{"nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/tensorflow:24.01-tf2-py3", "jupyter/pytorch-notebook:cuda12",
		"vllm/vllm-openai:v0.4.0", "huggingface/transformers-pytorch-gpu:4.38", "rapidsai/base:24.02-cuda12.0-py3.10"}
	for c := range monthCtrs {
		user := rng.IntN(40)
		dur := 60 + rng.IntN(181)
		start := rng.IntN(monthMinutes - dur)
		gpus := []int{rng.IntN(monthGPUs)}
		if rng.IntN(10) < 4 {
			g2 := (gpus[0] + 1 + rng.IntN(monthGPUs-1)) % monthGPUs
			gpus = append(gpus, g2)
			slices.Sort(gpus)
		}
		project := fmt.Sprintf("proj-%02d", rng.IntN(20))
		exit := 0
		if rng.IntN(10) == 0 {
			exit = 137
		}
		startT := m.From.Add(time.Duration(start) * time.Minute)
		endT := m.From.Add(time.Duration(start+dur) * time.Minute)
		m.Containers = append(m.Containers, ledger.Container{
			Node: m.Node, ID: fmt.Sprintf("%016x%016x%016x%016x", rng.Uint64(), rng.Uint64(), rng.Uint64(), uint64(c)),
			Name:  fmt.Sprintf("job-%04d", c),
			Image: images[rng.IntN(len(images))],
			Labels: map[string]string{
				"gpumeter.user": fmt.Sprintf("user%02d", user), "gpumeter.team": teams[user%len(teams)],
				"gpumeter.project": project, "com.docker.compose.project": project,
			},
			User: fmt.Sprintf("user%02d", user), Team: teams[user%len(teams)], Project: project,
			GPURequest: fmt.Sprintf("count=%d", len(gpus)),
			StartedAt:  startT, FinishedAt: endT, ExitCode: &exit, FirstSeen: startT, LastSeen: endT,
		})
		m.runs = append(m.runs, run{
			ctr: c, gpus: gpus, from: start, to: start + dur,
			used:     0.2 + 0.75*rng.Float64(),
			mem:      float64(4+rng.IntN(70)) * (1 << 30),
			cores:    float64(1 + rng.IntN(16)),
			ramBytes: float64(2+rng.IntN(60)) * (1 << 30),
			util:     float64(50 + rng.IntN(51)),
		})
		m.runs[c].memoryPeak = uint64(m.runs[c].mem) + uint64(rng.IntN(1<<30))
	}
	return m
}

// Fill30Days writes the month Plan30Days describes into s, in batches of
// six hours, and returns it.
func Fill30Days(tb testing.TB, s ledger.Store) Month {
	tb.Helper()
	return fill(tb, s, Plan30Days())
}

// Fill30DaysTo is Fill30Days with the month moved to end at the hour to
// falls in, so that an agent running now finds the last day and week of
// it in its ledger.
func Fill30DaysTo(tb testing.TB, s ledger.Store, to time.Time) Month {
	tb.Helper()
	return fill(tb, s, plan30DaysTo(to))
}

// plan30DaysTo is Plan30Days moved to end at the hour to falls in.
func plan30DaysTo(to time.Time) Month {
	m := Plan30Days()
	d := to.UTC().Truncate(time.Hour).Sub(m.To)
	m.From, m.To = m.From.Add(d), m.To.Add(d)
	for i := range m.Containers {
		c := &m.Containers[i]
		c.StartedAt, c.FinishedAt = c.StartedAt.Add(d), c.FinishedAt.Add(d)
		c.FirstSeen, c.LastSeen = c.FirstSeen.Add(d), c.LastSeen.Add(d)
	}
	return m
}

// Fill30DaysToAs is Fill30DaysTo with the node's GPUs given uuids, in index
// order (as many as the month has GPUs): an agent whose GPUs are those, on
// the month's node, then carries on the same GPUs' series instead of
// adding GPUs of its own next to them.
func Fill30DaysToAs(tb testing.TB, s ledger.Store, to time.Time, uuids []string) Month {
	tb.Helper()
	m := plan30DaysTo(to)
	if len(uuids) != len(m.GPUs) {
		tb.Fatalf("Fill30DaysToAs: %d GPU UUIDs, want %d", len(uuids), len(m.GPUs))
	}
	for i := range m.GPUs {
		m.GPUs[i].UUID = uuids[i]
	}
	return fill(tb, s, m)
}

func fill(tb testing.TB, s ledger.Store, m Month) Month {
	tb.Helper()
	ctx := context.Background()
	// holders[minute*8+gpu] is how many containers hold the GPU then.
	holders := make([]uint8, monthMinutes*monthGPUs)
	// Containers are recorded running when they start and finished when
	// they end, as the agent would.
	startsAt, endsAt := map[int][]int{}, map[int][]int{}
	for i, r := range m.runs {
		for t := r.from; t < r.to; t++ {
			for _, g := range r.gpus {
				holders[t*monthGPUs+g]++
			}
		}
		startsAt[r.from] = append(startsAt[r.from], i)
		endsAt[r.to] = append(endsAt[r.to], i)
	}
	var active []int
	var b ledger.Batch
	flush := func() {
		if err := s.Write(ctx, b); err != nil {
			tb.Fatalf("Fill30Days: %v", err)
		}
		b = ledger.Batch{}
	}
	b.Nodes = []ledger.Node{{Name: m.Node, FirstSeen: m.From, LastSeen: m.To}}
	b.GPUs = m.GPUs
	for t := range monthMinutes {
		start := m.From.Add(time.Duration(t) * time.Minute)
		for _, i := range startsAt[t] {
			active = append(active, i)
			c := m.Containers[m.runs[i].ctr]
			c.FinishedAt, c.ExitCode, c.LastSeen = time.Time{}, nil, c.FirstSeen
			b.Containers = append(b.Containers, c)
		}
		for _, i := range endsAt[t] {
			b.Containers = append(b.Containers, m.Containers[m.runs[i].ctr])
		}
		var used, energy [monthGPUs]float64
		active = slices.DeleteFunc(active, func(i int) bool { return m.runs[i].to <= t })
		for _, i := range active {
			r := &m.runs[i]
			id := m.Containers[r.ctr].ID
			for _, g := range r.gpus {
				n := float64(holders[t*monthGPUs+g])
				u := 60 * r.used / n
				e := (activeWatts-idleWatts)*u + idleWatts*60/n
				used[g] += u
				energy[g] += e
				b.Usage = append(b.Usage, ledger.Usage{
					Node: m.Node, Start: start, OwnerKind: ledger.KindContainer, OwnerID: id, GPU: m.GPUs[g].UUID,
					Sums: ledger.Sums{
						AllocatedSeconds: 60 / n, HeldSeconds: 60, PresentSeconds: 60, UsedSeconds: u,
						MemoryByteSeconds: 60 * r.mem, EnergyJoules: e,
						PeakMemoryBytes: r.memoryPeak, PeakUtil: r.util,
					},
				})
			}
			b.ContainerUsage = append(b.ContainerUsage, ledger.ContainerUsage{
				Node: m.Node, Start: start, ContainerID: id,
				CPUSeconds: 60 * r.cores * 0.7, RAMByteSeconds: 60 * r.ramBytes,
			})
		}
		if t%1440 >= 120 && t%1440 < 130 { // a root process on GPU 0 at 02:00
			used[0] += 6
			energy[0] += 6 * (activeWatts - idleWatts)
			b.Usage = append(b.Usage, ledger.Usage{
				Node: m.Node, Start: start, OwnerKind: ledger.KindHost, OwnerID: "root", GPU: m.GPUs[0].UUID,
				Sums: ledger.Sums{PresentSeconds: 60, UsedSeconds: 6, MemoryByteSeconds: 60 * (512 << 20),
					EnergyJoules: 6 * (activeWatts - idleWatts), PeakMemoryBytes: 512 << 20, PeakUtil: 10},
			})
		}
		for g := range monthGPUs {
			held := holders[t*monthGPUs+g] > 0
			gs := ledger.GPUSums{Seconds: 60, UsedSeconds: min(used[g], 60), EnergyJoules: energy[g], PeakUtil: min(100, used[g]/60*100)}
			if held {
				gs.AllocatedSeconds = 60
			} else {
				gs.IdleSeconds = 60
				gs.IdleEnergyJoules = idleWatts * 60
				gs.EnergyJoules += idleWatts * 60
			}
			b.GPUUsage = append(b.GPUUsage, ledger.GPUUsage{Node: m.Node, Start: start, GPU: m.GPUs[g].UUID, GPUSums: gs,
				Gauges: minuteGauges(gs, held)})
		}
		if (t+1)%batchMinutes == 0 {
			flush()
		}
	}
	if !b.Empty() {
		flush()
	}
	return m
}

// BenchWriteMinute measures Write with one minute of an 8-GPU node running
// 64 containers that each hold 4 GPUs: 256 usage rows, 8 GPU rows and 64
// container rows per batch. Nodes, GPUs and containers are written once
// before the timer starts; each iteration writes the next minute.
func BenchWriteMinute(b *testing.B, s ledger.Ledger) {
	ctx := context.Background()
	m := Plan30Days()
	meta := ledger.Batch{Nodes: []ledger.Node{{Name: m.Node, FirstSeen: m.From}}, GPUs: m.GPUs, Containers: m.Containers[:64]}
	if err := s.Write(ctx, meta); err != nil {
		b.Fatal(err)
	}
	var batch ledger.Batch
	for c, ct := range m.Containers[:64] {
		for k := range 4 {
			g := m.GPUs[(c+k)%monthGPUs].UUID
			batch.Usage = append(batch.Usage, ledger.Usage{Node: m.Node, OwnerKind: ledger.KindContainer, OwnerID: ct.ID, GPU: g,
				Sums: ledger.Sums{AllocatedSeconds: 1.875, HeldSeconds: 60, PresentSeconds: 60, UsedSeconds: 12.345678, MemoryByteSeconds: 60 * 3.5 * (1 << 30),
					EnergyJoules: 812.345, PeakMemoryBytes: 4 << 30, PeakUtil: 37.5}})
		}
		batch.ContainerUsage = append(batch.ContainerUsage, ledger.ContainerUsage{Node: m.Node, ContainerID: ct.ID, CPUSeconds: 187.654321, RAMByteSeconds: 60 * 9.25 * (1 << 30)})
	}
	for _, g := range m.GPUs {
		batch.GPUUsage = append(batch.GPUUsage, ledger.GPUUsage{Node: m.Node, GPU: g.UUID,
			GPUSums: ledger.GPUSums{Seconds: 60, AllocatedSeconds: 60, UsedSeconds: 51.2, EnergyJoules: 26000.5, PeakUtil: 98}})
	}
	// As the agent writes: under the node's lease, each batch fenced and
	// numbered.
	l, err := s.Acquire(ctx, ledger.Lease{Node: m.Node, Instance: "bench", Host: "bench", PID: 1}, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	batch.ID = ledger.BatchID{Node: l.Node, Instance: l.Instance}
	minute := 0
	for b.Loop() {
		start := m.From.Add(time.Duration(minute) * time.Minute)
		minute++
		batch.ID.Seq = uint64(minute)
		for i := range batch.Usage {
			batch.Usage[i].Start = start
		}
		for i := range batch.GPUUsage {
			batch.GPUUsage[i].Start = start
		}
		for i := range batch.ContainerUsage {
			batch.ContainerUsage[i].Start = start
		}
		if err := s.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(batch.Usage)+len(batch.GPUUsage)+len(batch.ContainerUsage)), "rows/op")
}

// Report is the whole of `gpumeter report` grouped by by over [from, to)
// on s: both ledger queries and the report. The backends' benchmarks pass
// report.Run behind it, so that this package needs no report.
type Report func(ctx context.Context, s ledger.Store, by string, from, to time.Time) error

// BenchUsage measures Usage and GPUs over the month Fill30Days wrote: the
// whole 30 days (hour rows only), and with both edges inside an hour
// (minute rows at the edges); report over the month; and Series and
// ContainerSeries at both steps.
func BenchUsage(b *testing.B, s ledger.Store, m Month, report Report) {
	ctx := context.Background()
	for _, w := range []struct {
		name string
		f    ledger.Filter
	}{
		{"Month", ledger.Filter{From: m.From, To: m.To}},
		{"MonthEdges", ledger.Filter{From: m.From.Add(17 * time.Minute), To: m.To.Add(-43 * time.Minute)}},
		{"Day", ledger.Filter{From: m.From.Add(10 * 24 * time.Hour), To: m.From.Add(11 * 24 * time.Hour)}},
	} {
		b.Run(w.name, func(b *testing.B) {
			var rows int
			for b.Loop() {
				got, err := s.Usage(ctx, w.f)
				if err != nil {
					b.Fatal(err)
				}
				rows = len(got)
			}
			b.ReportMetric(float64(rows), "rows")
		})
	}
	// The whole of `gpumeter report` over the month but process start:
	// both ledger queries and the report itself.
	for _, by := range []string{"user", "container"} {
		b.Run("ReportMonthBy"+by, func(b *testing.B) {
			for b.Loop() {
				if err := report(ctx, s, by, m.From, m.To); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("GPUsMonth", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.GPUs(ctx, ledger.Filter{From: m.From, To: m.To}); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The series the waste rules read: every owner's usage and every
	// container's CPU and RAM hour by hour over the month, and minute by
	// minute over a day and over the month.
	for _, w := range []struct {
		name string
		f    ledger.Filter
		step time.Duration
	}{
		{"SeriesMonthHour", ledger.Filter{From: m.From, To: m.To}, time.Hour},
		{"SeriesDayMinute", ledger.Filter{From: m.From.Add(10 * 24 * time.Hour), To: m.From.Add(11 * 24 * time.Hour)}, time.Minute},
		{"SeriesMonthMinute", ledger.Filter{From: m.From, To: m.To}, time.Minute},
	} {
		b.Run(w.name, func(b *testing.B) {
			var rows int
			for b.Loop() {
				got, err := s.Series(ctx, w.f, w.step)
				if err != nil {
					b.Fatal(err)
				}
				rows = len(got)
			}
			b.ReportMetric(float64(rows), "rows")
		})
		b.Run("Container"+w.name, func(b *testing.B) {
			var rows int
			for b.Loop() {
				got, err := s.ContainerSeries(ctx, w.f, w.step)
				if err != nil {
					b.Fatal(err)
				}
				rows = len(got)
			}
			b.ReportMetric(float64(rows), "rows")
		})
	}
}

// minuteGauges are a minute's 60 readings of a GPU as a one-second sampler
// would take them: utilisation and power from the minute's sums,
// memory and temperature following utilisation.
func minuteGauges(gs ledger.GPUSums, held bool) ledger.GPUGauges {
	util := gs.UsedSeconds / 60 * 100
	power := gs.EnergyJoules / 60
	mem := 0.0
	if held {
		mem = float64(8<<30) + util/100*float64(64<<30)
	}
	temp := 32 + util*0.45
	return ledger.GPUGauges{Samples: 60,
		UtilSum: 60 * util, UtilMax: min(100, util*1.1),
		MemorySum: 60 * mem, MemoryMax: mem,
		PowerSum: 60 * power, PowerMax: power * 1.05,
		TempSum: 60 * temp, TempMax: temp + 2}
}
