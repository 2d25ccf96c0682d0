package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
)

// minutes is the ledger's minute data in its stored units (microseconds,
// millijoules, byte-seconds, hundredths of a percent, milliwatts,
// hundredths of a degree): what the converter turns into series. Each
// row names its series by index; rows come grouped by series and in time
// order within one.
type minutes struct {
	UsageSeries     []usageKey
	GPUSeries       []gpuInfo
	ContainerSeries []ownerInfo
	Usage           []usageMinute
	GPU             []gpuMinute
	Containers      []containerMinute
}

// gpuInfo is one GPU as its series' labels name it.
type gpuInfo struct {
	Node, UUID string
	Index      int
}

// ownerInfo is an owner and, for a container, what its labels say.
type ownerInfo struct {
	Node, Kind, ID                        string // ID: the container ID or the host user's name; "" for nobody
	Container, Image, User, Team, Project string
}

// usageKey is one owner on one GPU.
type usageKey struct {
	GPU   gpuInfo
	Owner ownerInfo
}

type usageMinute struct {
	Start                          int64 // unix seconds
	Series                         int
	AllocatedUS, HeldUS, PresentUS int64
	UsedUS, MemoryByteS, EnergyMJ  int64
	PeakMemoryBytes, PeakUtilCpct  int64
}

type gpuMinute struct {
	Start, Series                              int64
	SecondsUS, AllocatedUS, IdleUS, UsedUS     int64
	UnattributedUS, EnergyMJ, IdleEnergyMJ     int64
	PeakUtilCpct, Samples                      int64
	UtilSumCpct, UtilMaxCpct, MemSum, MemMax   int64
	PowerSumMW, PowerMaxMW, TempSumCC, TempMax int64
}

type containerMinute struct {
	Start, Series, CPUUS, RAMByteS int64
}

func (r *usageMinute) series() int64     { return int64(r.Series) }
func (r *gpuMinute) series() int64       { return r.Series }
func (r *containerMinute) series() int64 { return r.Series }

// readWindow is how much history one read asks for: a day of minutes is
// about 10 MB of points for the 30-day history, so memory stays bounded by
// the compact rows kept, not by the readers' points.
const readWindow = 24 * time.Hour

// readMinutes reads every minute of the SQLite ledger at path within
// [from, to) through the ledger's own readers (Series, GPUUsageSeries,
// ContainerSeries), a day at a time, so that it reads minutes whatever
// the ledger's layout (minute rows or the chunks of closed hours). It is
// the one place that reads minute data.
func readMinutes(ctx context.Context, path string, from, to time.Time) (*minutes, error) {
	store, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	whole := ledger.Filter{From: from, To: to}

	// Who the owners are and which index each GPU has, from the totals:
	// they name every container, those without GPU use among them.
	totals, gpuTotals, err := store.Totals(ctx, whole)
	if err != nil {
		return nil, fmt.Errorf("read totals: %w", err)
	}
	gpus := map[[2]string]gpuInfo{}
	for _, g := range gpuTotals {
		gpus[[2]string{g.GPU.Node, g.GPU.UUID}] = gpuInfo{Node: g.GPU.Node, UUID: g.GPU.UUID, Index: g.GPU.Index}
	}
	owners := map[[3]string]ownerInfo{}
	for i := range totals {
		u := &totals[i]
		if u.GPU.UUID != "" {
			gpus[[2]string{u.Node, u.GPU.UUID}] = gpuInfo{Node: u.Node, UUID: u.GPU.UUID, Index: u.GPU.Index}
		}
		owners[[3]string{u.Node, u.OwnerKind, u.OwnerID}] = owner(u.Node, u.OwnerKind, u.OwnerID, u.Container)
	}

	m := &minutes{}
	usageIdx := map[[4]string]int{}
	gpuIdx := map[[2]string]int64{}
	ctrIdx := map[[2]string]int64{}
	for start := from; start.Before(to); start = start.Add(readWindow) {
		f := ledger.Filter{From: start, To: start.Add(readWindow)}
		if f.To.After(to) {
			f.To = to
		}
		points, err := store.Series(ctx, f, time.Minute)
		if err != nil {
			return nil, fmt.Errorf("read usage minutes: %w", err)
		}
		for i := range points {
			p := &points[i]
			k := [4]string{p.Node, p.OwnerKind, p.OwnerID, p.GPU.UUID}
			s, ok := usageIdx[k]
			if !ok {
				s = len(m.UsageSeries)
				usageIdx[k] = s
				m.UsageSeries = append(m.UsageSeries, usageKey{
					GPU:   gpuInfo{Node: p.Node, UUID: p.GPU.UUID, Index: p.GPU.Index},
					Owner: owner(p.Node, p.OwnerKind, p.OwnerID, p.Container)})
			}
			m.Usage = append(m.Usage, usageMinute{Start: p.Start.Unix(), Series: s,
				AllocatedUS: micro(p.AllocatedSeconds), HeldUS: micro(p.HeldSeconds), PresentUS: micro(p.PresentSeconds),
				UsedUS: micro(p.UsedSeconds), MemoryByteS: whole1(p.MemoryByteSeconds), EnergyMJ: milli(p.EnergyJoules),
				PeakMemoryBytes: int64(p.PeakMemoryBytes), PeakUtilCpct: hundredth(p.PeakUtil)})
		}

		gus, err := store.GPUUsageSeries(ctx, f, time.Minute)
		if err != nil {
			return nil, fmt.Errorf("read GPU minutes: %w", err)
		}
		for i := range gus {
			g := &gus[i]
			k := [2]string{g.Node, g.GPU}
			s, ok := gpuIdx[k]
			if !ok {
				s = int64(len(m.GPUSeries))
				gpuIdx[k] = s
				info, known := gpus[k]
				if !known {
					info = gpuInfo{Node: g.Node, UUID: g.GPU, Index: -1}
				}
				m.GPUSeries = append(m.GPUSeries, info)
			}
			ga := &g.Gauges
			m.GPU = append(m.GPU, gpuMinute{Start: g.Start.Unix(), Series: s,
				SecondsUS: micro(g.Seconds), AllocatedUS: micro(g.AllocatedSeconds), IdleUS: micro(g.IdleSeconds),
				UsedUS: micro(g.UsedSeconds), UnattributedUS: micro(g.UnattributedSeconds),
				EnergyMJ: milli(g.EnergyJoules), IdleEnergyMJ: milli(g.IdleEnergyJoules), PeakUtilCpct: hundredth(g.PeakUtil),
				Samples: ga.Samples, UtilSumCpct: hundredth(ga.UtilSum), UtilMaxCpct: hundredth(ga.UtilMax),
				MemSum: whole1(ga.MemorySum), MemMax: whole1(ga.MemoryMax), PowerSumMW: milli(ga.PowerSum),
				PowerMaxMW: milli(ga.PowerMax), TempSumCC: hundredth(ga.TempSum), TempMax: hundredth(ga.TempMax)})
		}

		cus, err := store.ContainerSeries(ctx, f, time.Minute)
		if err != nil {
			return nil, fmt.Errorf("read container minutes: %w", err)
		}
		for i := range cus {
			c := &cus[i]
			k := [2]string{c.Node, c.ContainerID}
			s, ok := ctrIdx[k]
			if !ok {
				s = int64(len(m.ContainerSeries))
				ctrIdx[k] = s
				o, known := owners[[3]string{c.Node, ledger.KindContainer, c.ContainerID}]
				if !known {
					o = owner(c.Node, ledger.KindContainer, c.ContainerID, nil)
				}
				m.ContainerSeries = append(m.ContainerSeries, o)
			}
			m.Containers = append(m.Containers, containerMinute{Start: c.Start.Unix(), Series: s,
				CPUUS: micro(c.CPUSeconds), RAMByteS: whole1(c.RAMByteSeconds)})
		}
	}
	// The readers give each window by start; the families want each
	// series whole and in time order. Windows come in time order, so a
	// stable sort by series keeps it.
	slices.SortStableFunc(m.Usage, func(a, b usageMinute) int { return cmp.Compare(a.Series, b.Series) })
	slices.SortStableFunc(m.GPU, func(a, b gpuMinute) int { return cmp.Compare(a.Series, b.Series) })
	slices.SortStableFunc(m.Containers, func(a, b containerMinute) int { return cmp.Compare(a.Series, b.Series) })
	return m, nil
}

// owner is what the series' labels say of an owner.
func owner(node, kind, id string, c *ledger.Container) ownerInfo {
	o := ownerInfo{Node: node, Kind: kind, ID: id}
	switch {
	case c != nil:
		o.Container, o.Image, o.User, o.Team, o.Project = c.Name, c.Image, c.User, c.Team, c.Project
	case kind == ledger.KindHost:
		o.User = id
	}
	return o
}

// The readers give the stored fixed-point figures as floats; these turn
// them back into the stored integers, exactly, so that the counters add
// up as the ledger does.
func micro(v float64) int64     { return int64(math.Round(v * 1e6)) }
func milli(v float64) int64     { return int64(math.Round(v * 1e3)) }
func hundredth(v float64) int64 { return int64(math.Round(v * 100)) }
func whole1(v float64) int64    { return int64(math.Round(v)) }
