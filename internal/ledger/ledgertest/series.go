package ledgertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// steps are the steps Series accepts.
var steps = []time.Duration{time.Minute, time.Hour}

func readSeries(t *testing.T, s ledger.Ledger, f ledger.Filter, step time.Duration) []ledger.UsagePoint {
	t.Helper()
	got, err := s.Series(context.Background(), f, step)
	if err != nil {
		t.Fatalf("Series(%s, %v): %v", fmtFilter(f), step, err)
	}
	return got
}

func checkSeries(t *testing.T, s ledger.Ledger, f ledger.Filter, step time.Duration, want []ledger.UsagePoint) {
	t.Helper()
	got := readSeries(t, s, f, step)
	if diff := gocmp.Diff(want, got, equateEmpty); diff != "" {
		t.Errorf("Series(%s, %v) mismatch (-want +got):\n%s", fmtFilter(f), step, diff)
	}
	// The points of one container share one Container.
	shared := map[string]*ledger.Container{}
	for _, p := range got {
		if p.Container == nil {
			continue
		}
		k := p.Node + "/" + p.OwnerID
		if c, ok := shared[k]; ok && c != p.Container {
			t.Errorf("Series(%s, %v): container %s has more than one *Container", fmtFilter(f), step, p.OwnerID)
			break
		}
		shared[k] = p.Container
	}
}

func checkContainerSeries(t *testing.T, s ledger.Ledger, f ledger.Filter, step time.Duration, want []ledger.ContainerUsage) {
	t.Helper()
	got, err := s.ContainerSeries(context.Background(), f, step)
	if err != nil {
		t.Fatalf("ContainerSeries(%s, %v): %v", fmtFilter(f), step, err)
	}
	if diff := gocmp.Diff(want, got, equateEmpty); diff != "" {
		t.Errorf("ContainerSeries(%s, %v) mismatch (-want +got):\n%s", fmtFilter(f), step, diff)
	}
}

// seriesWindow is the window a series at step reads for [from, to): the
// minutes of the window, widened to whole hours at an hour step.
func seriesWindow(from, to time.Time, step time.Duration) (time.Time, time.Time) {
	from, to = ledger.Minute(from), ledger.Minute(to)
	if !from.Before(to) || step == time.Minute {
		return from, to
	}
	if h := ledger.Hour(to); !h.Equal(to) {
		to = h.Add(time.Hour)
	}
	return ledger.Hour(from), to
}

// bruteSeries computes what Series must answer from the usage rows of
// batches: those in [from, to), added up per step. gpus and ctrs are what
// the ledger knows of GPUs (by UUID) and containers (by ID).
func bruteSeries(batches []ledger.Batch, from, to time.Time, step time.Duration, gpus map[string]ledger.GPU, ctrs map[string]*ledger.Container) []ledger.UsagePoint {
	from, to = seriesWindow(from, to, step)
	type key struct {
		start                  time.Time
		node, kind, owner, gpu string
	}
	points := map[key]*ledger.UsagePoint{}
	for _, b := range batches {
		for _, u := range b.Usage {
			if u.Start.Before(from) || !u.Start.Before(to) {
				continue
			}
			start := u.Start.UTC().Truncate(step)
			k := key{start, u.Node, u.OwnerKind, u.OwnerID, u.GPU}
			p := points[k]
			if p == nil {
				g, ok := gpus[u.GPU]
				if !ok {
					g = ledger.GPU{Node: u.Node, UUID: u.GPU, Index: -1}
				}
				p = &ledger.UsagePoint{Start: start, Node: u.Node, OwnerKind: u.OwnerKind, OwnerID: u.OwnerID, GPU: g}
				if u.OwnerKind == ledger.KindContainer {
					p.Container = ctrs[u.OwnerID]
				}
				points[k] = p
			}
			p.Sums.Add(u.Sums)
		}
	}
	var out []ledger.UsagePoint
	for _, p := range points {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b ledger.UsagePoint) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Node, b.Node), cmp.Compare(a.OwnerKind, b.OwnerKind),
			cmp.Compare(a.OwnerID, b.OwnerID), cmp.Compare(a.GPU.UUID, b.GPU.UUID))
	})
	return out
}

// bruteContainerSeries is bruteSeries for the container rows.
func bruteContainerSeries(batches []ledger.Batch, from, to time.Time, step time.Duration) []ledger.ContainerUsage {
	from, to = seriesWindow(from, to, step)
	type key struct {
		start    time.Time
		node, id string
	}
	points := map[key]*ledger.ContainerUsage{}
	for _, b := range batches {
		for _, c := range b.ContainerUsage {
			if c.Start.Before(from) || !c.Start.Before(to) {
				continue
			}
			start := c.Start.UTC().Truncate(step)
			k := key{start, c.Node, c.ContainerID}
			p := points[k]
			if p == nil {
				p = &ledger.ContainerUsage{Node: c.Node, Start: start, ContainerID: c.ContainerID}
				points[k] = p
			}
			p.CPUSeconds += c.CPUSeconds
			p.RAMByteSeconds += c.RAMByteSeconds
		}
	}
	var out []ledger.ContainerUsage
	for _, p := range points {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b ledger.ContainerUsage) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Node, b.Node), cmp.Compare(a.ContainerID, b.ContainerID))
	})
	return out
}

// onNode keeps the usage and container rows of node.
func onNode(batches []ledger.Batch, node string) []ledger.Batch {
	var out []ledger.Batch
	for _, b := range batches {
		var o ledger.Batch
		for _, u := range b.Usage {
			if u.Node == node {
				o.Usage = append(o.Usage, u)
			}
		}
		for _, c := range b.ContainerUsage {
			if c.Node == node {
				o.ContainerUsage = append(o.ContainerUsage, c)
			}
		}
		out = append(out, o)
	}
	return out
}

// edgeSeries writes edgeData and returns its batches and what the ledger
// knows of its GPUs and container.
func edgeSeries(t *testing.T, s ledger.Ledger) ([]ledger.Batch, map[string]ledger.GPU, map[string]*ledger.Container) {
	meta, batches := edgeData()
	write(t, s, meta)
	for _, b := range batches {
		write(t, s, b)
	}
	c1 := container1()
	return batches, map[string]ledger.GPU{gpuA: gpuMetaA, gpuB: gpuMetaB}, map[string]*ledger.Container{ctr1: &c1}
}

func testSeriesEmpty(t *testing.T, s ledger.Ledger) {
	for _, step := range steps {
		for _, f := range []ledger.Filter{{}, {From: t0, To: at(5, 0)}, {Node: nodeA}} {
			checkSeries(t, s, f, step, nil)
			checkContainerSeries(t, s, f, step, nil)
		}
	}
}

// testSeriesRoundTrip: minute points are the rows as written, hour points
// their sums, and both add up to what Usage answers over the same hours.
func testSeriesRoundTrip(t *testing.T, s ledger.Ledger) {
	batches, gpus, ctrs := edgeSeries(t, s)
	f := ledger.Filter{From: at(0, 0), To: at(5, 0)}
	for _, step := range steps {
		checkSeries(t, s, f, step, bruteSeries(batches, f.From, f.To, step, gpus, ctrs))
		checkContainerSeries(t, s, f, step, bruteContainerSeries(batches, f.From, f.To, step))
	}

	minutes := readSeries(t, s, f, time.Minute)
	var written int
	for _, b := range batches {
		written += len(b.Usage)
	}
	if len(minutes) != written {
		t.Errorf("Series(%s, 1m) has %d points, want one per row written: %d", fmtFilter(f), len(minutes), written)
	}
	type key struct{ kind, owner, gpu string }
	for _, step := range steps {
		sums := map[key]ledger.Sums{}
		for _, p := range readSeries(t, s, f, step) {
			k := key{p.OwnerKind, p.OwnerID, p.GPU.UUID}
			sum := sums[k]
			sum.Add(p.Sums)
			sums[k] = sum
		}
		totals := readUsage(t, s, f)
		for _, u := range totals {
			if u.GPU.UUID == "" {
				continue
			}
			k := key{u.OwnerKind, u.OwnerID, u.GPU.UUID}
			if diff := gocmp.Diff(u.Sums, sums[k]); diff != "" {
				t.Errorf("Series(%s, %v) of %s %s on %s does not add up to Usage (-usage +series):\n%s", fmtFilter(f), step, u.OwnerKind, u.OwnerID, u.GPU.UUID, diff)
			}
			delete(sums, k)
		}
		if len(sums) != 0 {
			t.Errorf("Series(%s, %v) has owners Usage does not: %v", fmtFilter(f), step, sums)
		}
	}
}

func testSeriesWindowEdges(t *testing.T, s ledger.Ledger) {
	batches, gpus, ctrs := edgeSeries(t, s)
	type window struct{ from, to time.Time }
	windows := []window{
		{at(0, 0), at(5, 0)},   // whole hours
		{at(0, 17), at(4, 43)}, // both edges inside an hour
		{at(0, 17), at(0, 43)}, // inside one hour
		{at(1, 0), at(1, 43)},  // aligned start, partial end
		{at(0, 17), at(2, 0)},  // partial start, aligned end
		{at(-1, 0), at(6, 0)},  // wider than the data
		{at(4, 59), at(5, 0)},  // the last minute
		{at(0, 0), at(0, 1)},   // the first minute
		{at(5, 0), at(6, 0)},   // after the data
		{at(0, 17).Add(30 * time.Second), at(4, 43).Add(10 * time.Second)}, // truncated to minutes
		{at(2, 0).Add(10 * time.Second), at(2, 0).Add(50 * time.Second)},   // empty once truncated
		{at(2, 0), at(2, 0)},     // empty
		{at(3, 0), at(2, 0)},     // inverted
		{at(2, 30), time.Time{}}, // open end
		{time.Time{}, at(2, 30)}, // open start
		{},                       // open
	}
	for from := 0; from < 300; from += 41 {
		for to := from + 1; to <= 300; to += 59 {
			windows = append(windows, window{at(0, from), at(0, to)})
		}
	}
	far := func(t time.Time, d time.Duration) time.Time {
		if t.IsZero() {
			return at(0, 0).Add(d)
		}
		return t
	}
	for _, w := range windows {
		f := ledger.Filter{From: w.from, To: w.to}
		from, to := far(w.from, -100*time.Hour), far(w.to, 100*time.Hour)
		for _, step := range steps {
			checkSeries(t, s, f, step, bruteSeries(batches, from, to, step, gpus, ctrs))
			checkContainerSeries(t, s, f, step, bruteContainerSeries(batches, from, to, step))
		}
	}
}

func testSeriesNodeFilter(t *testing.T, s ledger.Ledger) {
	// gpuOnB is named by usage but never described.
	const gpuOnB = "GPU-bbbb"
	cB := ledger.Container{Node: nodeB, ID: ctr2, Name: "notebook", Image: "jupyter/base", User: "frank", FirstSeen: t0, LastSeen: at(1, 0)}
	sums := func(used float64) ledger.Sums { return ledger.Sums{AllocatedSeconds: 60, UsedSeconds: used} }
	b := ledger.Batch{
		GPUs:       []ledger.GPU{gpuMetaA},
		Containers: []ledger.Container{cB},
	}
	for _, m := range []int{0, 1, 59, 60, 61} {
		b.Usage = append(b.Usage,
			usage(nodeA, at(0, m), ledger.KindHost, "alice", gpuA, sums(float64(m)+0.5)),
			usage(nodeB, at(0, m), ledger.KindHost, "alice", gpuOnB, sums(float64(m)+0.25)),
			usage(nodeB, at(0, m), ledger.KindContainer, ctr2, gpuOnB, sums(float64(m)+0.75)),
		)
		b.ContainerUsage = append(b.ContainerUsage,
			ledger.ContainerUsage{Node: nodeA, Start: at(0, m), ContainerID: ctr1, CPUSeconds: float64(m) + 0.5},
			// The same container ID on another node is another container.
			ledger.ContainerUsage{Node: nodeB, Start: at(0, m), ContainerID: ctr1, CPUSeconds: float64(m) + 0.25},
			ledger.ContainerUsage{Node: nodeB, Start: at(0, m), ContainerID: ctr2, CPUSeconds: float64(m) + 0.75},
		)
	}
	write(t, s, b)
	gpus := map[string]ledger.GPU{gpuA: gpuMetaA}
	ctrs := map[string]*ledger.Container{ctr2: &cB}
	for _, w := range []ledger.Filter{{From: at(0, 0), To: at(2, 0)}, {From: at(0, 30), To: at(1, 1)}} {
		for _, step := range steps {
			f := w
			checkSeries(t, s, f, step, bruteSeries([]ledger.Batch{b}, f.From, f.To, step, gpus, ctrs))
			checkContainerSeries(t, s, f, step, bruteContainerSeries([]ledger.Batch{b}, f.From, f.To, step))
			for _, node := range []string{nodeA, nodeB} {
				f.Node = node
				checkSeries(t, s, f, step, bruteSeries(onNode([]ledger.Batch{b}, node), f.From, f.To, step, gpus, ctrs))
				checkContainerSeries(t, s, f, step, bruteContainerSeries(onNode([]ledger.Batch{b}, node), f.From, f.To, step))
			}
			f.Node = "node-unknown"
			checkSeries(t, s, f, step, nil)
			checkContainerSeries(t, s, f, step, nil)
		}
	}
}

// testSeriesOrder writes nodes, GPUs and owners in the reverse of the
// order Series answers in, batch by batch, so that no order of creation
// (which a store may number them by) gives the answer by chance.
func testSeriesOrder(t *testing.T, s ledger.Ledger) {
	const gpuOnB = "GPU-bbbb"
	sums := ledger.Sums{AllocatedSeconds: 60, UsedSeconds: 1.5}
	var batches []ledger.Batch
	for _, rows := range [][]struct {
		node, kind, owner, gpu string
	}{
		{{nodeB, ledger.KindHost, "zed", gpuOnB}},
		{{nodeA, ledger.KindNone, "", gpuB}, {nodeA, ledger.KindHost, "zed", gpuB}},
		{{nodeA, ledger.KindHost, "amy", gpuA}, {nodeB, ledger.KindContainer, ctr2, gpuOnB}},
		{{nodeA, ledger.KindContainer, ctr2, gpuB}, {nodeA, ledger.KindContainer, ctr2, gpuA}},
		{{nodeA, ledger.KindContainer, ctr1, gpuB}, {nodeA, ledger.KindHost, "amy", gpuB}},
	} {
		var b ledger.Batch
		for _, start := range []time.Time{at(0, 0), at(0, 1), at(1, 0)} {
			for _, r := range rows {
				b.Usage = append(b.Usage, usage(r.node, start, r.kind, r.owner, r.gpu, sums))
				if r.kind == ledger.KindContainer {
					b.ContainerUsage = append(b.ContainerUsage, ledger.ContainerUsage{Node: r.node, Start: start, ContainerID: r.owner, CPUSeconds: 2.5})
				}
			}
		}
		batches = append(batches, b)
		write(t, s, b)
	}
	// Described last, and in the reverse of index order.
	write(t, s, ledger.Batch{GPUs: []ledger.GPU{gpuMetaB, gpuMetaA}})
	gpus := map[string]ledger.GPU{gpuA: gpuMetaA, gpuB: gpuMetaB}
	for _, f := range []ledger.Filter{{From: t0, To: at(2, 0)}, {From: t0, To: at(2, 0), Node: nodeA}} {
		for _, step := range steps {
			all := batches
			if f.Node != "" {
				all = onNode(batches, f.Node)
			}
			checkSeries(t, s, f, step, bruteSeries(all, f.From, f.To, step, gpus, nil))
			checkContainerSeries(t, s, f, step, bruteContainerSeries(all, f.From, f.To, step))
		}
	}
}

// testSeriesRetain: a minute series has no stand-in for deleted minute
// rows; an hour series reads on.
func testSeriesRetain(t *testing.T, s ledger.Ledger) {
	b := ledger.Batch{GPUs: []ledger.GPU{gpuMetaA}}
	for m := range 3 * 60 {
		b.Usage = append(b.Usage, usage(nodeA, at(0, m), ledger.KindHost, "hank", gpuA, ledger.Sums{UsedSeconds: 1}))
		b.ContainerUsage = append(b.ContainerUsage, ledger.ContainerUsage{Node: nodeA, Start: at(0, m), ContainerID: ctr1, CPUSeconds: 1})
	}
	write(t, s, b)
	// Minute rows before 10:00 go, hour rows stay.
	if err := s.Retain(context.Background(), "", at(2, 30), 30*time.Minute, 0); err != nil {
		t.Fatalf("Retain: %v", err)
	}
	f := ledger.Filter{From: at(0, 0), To: at(3, 0)}
	gpus := map[string]ledger.GPU{gpuA: gpuMetaA}
	kept := []ledger.Batch{b}
	checkSeries(t, s, f, time.Minute, bruteSeries(kept, at(2, 0), f.To, time.Minute, gpus, nil))
	checkContainerSeries(t, s, f, time.Minute, bruteContainerSeries(kept, at(2, 0), f.To, time.Minute))
	checkSeries(t, s, f, time.Hour, bruteSeries(kept, f.From, f.To, time.Hour, gpus, nil))
	checkContainerSeries(t, s, f, time.Hour, bruteContainerSeries(kept, f.From, f.To, time.Hour))
}

func testSeriesStep(t *testing.T, s ledger.Ledger) {
	write(t, s, ledger.Batch{
		GPUs:           []ledger.GPU{gpuMetaA},
		Usage:          []ledger.Usage{usage(nodeA, at(0, 0), ledger.KindHost, "lee", gpuA, ledger.Sums{UsedSeconds: 1})},
		ContainerUsage: []ledger.ContainerUsage{{Node: nodeA, Start: at(0, 0), ContainerID: ctr1, CPUSeconds: 1}},
	})
	ctx := context.Background()
	f := ledger.Filter{From: t0, To: at(1, 0)}
	for _, step := range []time.Duration{0, -time.Minute, time.Second, 59 * time.Second, 5 * time.Minute, 2 * time.Hour, 24 * time.Hour} {
		t.Run(fmt.Sprint(step), func(t *testing.T) {
			if got, err := s.Series(ctx, f, step); err == nil {
				t.Errorf("Series(step %v) = %d points, want an error", step, len(got))
			}
			if got, err := s.ContainerSeries(ctx, f, step); err == nil {
				t.Errorf("ContainerSeries(step %v) = %d points, want an error", step, len(got))
			}
		})
	}
}

func testSeriesCancelledContext(t *testing.T, s ledger.Ledger) {
	_, batches := edgeData()
	write(t, s, batches[0])
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := ledger.Filter{From: t0, To: at(1, 0)}
	for _, step := range steps {
		if _, err := s.Series(ctx, f, step); !errors.Is(err, context.Canceled) {
			t.Errorf("Series(step %v) with a cancelled context = %v, want context.Canceled", step, err)
		}
		if _, err := s.ContainerSeries(ctx, f, step); !errors.Is(err, context.Canceled) {
			t.Errorf("ContainerSeries(step %v) with a cancelled context = %v, want context.Canceled", step, err)
		}
	}
}
