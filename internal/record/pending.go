// What waits to be written: the per-minute rows Add sums, the bound on
// them, and the batch Flush renders them to.

package record

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

type usageKey struct {
	minute int64
	row    uint64 // meter.Usage.Row; rows says whose
}

// rowInfo is what a meter row number stands for.
type rowInfo struct {
	owner container.Owner
	gpu   string
}

type gpuKey struct {
	minute int64
	gpu    string
}

// gpuRow is one GPU's minute: its sums over the intervals booked there
// and the readings of the samples taken in it.
type gpuRow struct {
	ledger.GPUSums
	gauges ledger.GPUGauges
}

type ctrKey struct {
	minute int64
	id     string
}

// pending is what waits to be written.
type pending struct {
	usage      map[usageKey]*ledger.Sums
	rowInfo    map[uint64]rowInfo
	gpus       map[gpuKey]*gpuRow
	containers map[ctrKey]*ledger.ContainerUsage
	meta       map[string]*meta
	gpuMeta    map[string]ledger.GPU
	node       *ledger.Node

	// hotUsage[i] and hotCtrs[i] remember where the i-th usage row and
	// container of the last tick were summed: in a steady state the next
	// tick has the same rows in the same order and the same minute, so Add
	// looks nothing up. They point into usage, containers and meta;
	// whatever deletes from those clears them.
	hotUsage []hotUsage
	hotCtrs  []hotCtr
}

type hotUsage struct {
	row    uint64 // 0: none; meter rows start at 1
	minute int64
	sums   *ledger.Sums // nil until a minute is known
}

type hotCtr struct {
	id     string // "": none
	meta   *meta
	minute int64
	usage  *ledger.ContainerUsage // nil until a minute is known
}

// slot returns the i-th entry of *hot, growing it as needed.
func slot[T any](hot *[]T, i int) *T {
	if i >= len(*hot) {
		*hot = append(*hot, make([]T, i+1-len(*hot))...)
	}
	return &(*hot)[i]
}

func newPending() *pending {
	return &pending{
		usage:      map[usageKey]*ledger.Sums{},
		rowInfo:    map[uint64]rowInfo{},
		gpus:       map[gpuKey]*gpuRow{},
		containers: map[ctrKey]*ledger.ContainerUsage{},
		meta:       map[string]*meta{},
		gpuMeta:    map[string]ledger.GPU{},
	}
}

func (p *pending) rows() int { return len(p.usage) + len(p.gpus) + len(p.containers) }

// bound drops the oldest minutes while more rows wait than allowed.
func (r *Recorder) bound() {
	p := r.p
	over := p.rows() + r.openRows() - r.cfg.MaxRows
	if over <= 0 {
		return
	}
	minutes := map[int64]bool{}
	for k := range p.usage {
		minutes[k.minute] = true
	}
	for k := range p.gpus {
		minutes[k.minute] = true
	}
	for k := range p.containers {
		minutes[k.minute] = true
	}
	p.hotUsage, p.hotCtrs = nil, nil
	dropped := 0
	for _, m := range slices.Sorted(maps.Keys(minutes)) {
		if dropped >= over {
			break
		}
		for k := range p.usage {
			if k.minute == m {
				delete(p.usage, k)
				dropped++
			}
		}
		for k := range p.gpus {
			if k.minute == m {
				delete(p.gpus, k)
				dropped++
			}
		}
		for k := range p.containers {
			if k.minute == m {
				delete(p.containers, k)
				dropped++
			}
		}
	}
	if r.st.DroppedRows == 0 {
		r.cfg.Logger.Error("ledger unwritable for too long: dropping the oldest unwritten minutes", "max_rows", r.cfg.MaxRows)
	}
	r.st.DroppedRows += uint64(dropped)
}

func (r *Recorder) openRows() int {
	if r.open == nil {
		return 0
	}
	return r.open.rows
}

// span is the first and last minute that pending rows cover.
func (p *pending) span() (from, to time.Time) {
	first, last := int64(math.MaxInt64), int64(math.MinInt64)
	see := func(m int64) {
		first, last = min(first, m), max(last, m)
	}
	for k := range p.usage {
		see(k.minute)
	}
	for k := range p.gpus {
		see(k.minute)
	}
	for k := range p.containers {
		see(k.minute)
	}
	if first > last {
		return time.Time{}, time.Time{}
	}
	return time.Unix(first, 0).UTC(), time.Unix(last, 0).UTC()
}

// batch renders pending rows in a stable order, so that concurrent
// writers to one database take row locks in the same order.
func (r *Recorder) batch(p *pending) ledger.Batch {
	var b ledger.Batch
	if p.node != nil {
		b.Nodes = []ledger.Node{*p.node}
	}
	for _, id := range slices.Sorted(maps.Keys(p.gpuMeta)) {
		b.GPUs = append(b.GPUs, p.gpuMeta[id])
	}
	for _, id := range slices.Sorted(maps.Keys(p.meta)) {
		b.Containers = append(b.Containers, p.meta[id].Container)
	}
	// Two row numbers can stand for one owner and GPU (a row dropped by
	// retention and seen again): they become one ledger row.
	type fullKey struct {
		minute int64
		info   rowInfo
	}
	merged := make(map[fullKey]*ledger.Usage, len(p.usage))
	for k, s := range p.usage {
		info := p.rowInfo[k.row]
		fk := fullKey{k.minute, info}
		if u := merged[fk]; u != nil {
			u.Sums.Add(*s)
			continue
		}
		kind := ledger.KindNone
		switch info.owner.Kind {
		case container.OwnerContainer:
			kind = ledger.KindContainer
		case container.OwnerHost:
			kind = ledger.KindHost
		}
		merged[fk] = &ledger.Usage{Node: r.cfg.Node, Start: time.Unix(k.minute, 0).UTC(), OwnerKind: kind, OwnerID: info.owner.ID, GPU: info.gpu, Sums: *s}
	}
	for _, u := range merged {
		b.Usage = append(b.Usage, *u)
	}
	slices.SortFunc(b.Usage, func(a, c ledger.Usage) int {
		if d := a.Start.Compare(c.Start); d != 0 {
			return d
		}
		if a.OwnerKind != c.OwnerKind {
			return cmp.Compare(a.OwnerKind, c.OwnerKind)
		}
		if a.OwnerID != c.OwnerID {
			return cmp.Compare(a.OwnerID, c.OwnerID)
		}
		return cmp.Compare(a.GPU, c.GPU)
	})
	for k, s := range p.gpus {
		b.GPUUsage = append(b.GPUUsage, ledger.GPUUsage{Node: r.cfg.Node, Start: time.Unix(k.minute, 0).UTC(), GPU: k.gpu, GPUSums: s.GPUSums, Gauges: s.gauges})
	}
	slices.SortFunc(b.GPUUsage, func(a, c ledger.GPUUsage) int {
		if d := a.Start.Compare(c.Start); d != 0 {
			return d
		}
		return cmp.Compare(a.GPU, c.GPU)
	})
	for _, s := range p.containers {
		b.ContainerUsage = append(b.ContainerUsage, *s)
	}
	slices.SortFunc(b.ContainerUsage, func(a, c ledger.ContainerUsage) int {
		if d := a.Start.Compare(c.Start); d != 0 {
			return d
		}
		return cmp.Compare(a.ContainerID, c.ContainerID)
	})
	return b
}
