package sqlledger

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Series answers ledger.Store.Series. The GPUs, owners and containers of
// the window are read first, so that the points of one owner share their
// strings and their Container; then the rows, by start.
func Series(ctx context.Context, q Querier, f ledger.Filter, step time.Duration) ([]ledger.UsagePoint, error) {
	p, err := PlanSeries(f, step)
	if err != nil {
		return nil, err
	}
	if p.Empty() {
		return nil, nil
	}
	// Each query numbers its own parameters.
	usageRows := func(qb *query, cols string) string {
		var where string
		if f.Node != "" {
			where = "gpu_id IN (SELECT g.id FROM gpus g JOIN nodes n ON n.id = g.node_id WHERE n.name = " + qb.arg(f.Node) + ")"
		}
		return qb.union("usage", cols, where, p)
	}
	var oq query
	owners, err := readOwners(ctx, q, "SELECT owner_id FROM ("+usageRows(&oq, "owner_id")+") AS u", oq.args)
	if err != nil || len(owners) == 0 {
		return nil, err
	}
	var cq query
	ctrs, err := readContainers(ctx, q, "SELECT owner_id FROM ("+usageRows(&cq, "owner_id")+") AS u", cq.args)
	if err != nil {
		return nil, err
	}
	gpus, err := readGPUs(ctx, q, f.Node)
	if err != nil {
		return nil, err
	}

	// The rows come by start; the points of each start are put in order
	// once they are made.
	var uq query
	// held_us is NULL in rows written before it existed: read as 0 and a
	// flag, which spares scanning a pointer per row.
	rows, err := q.Query(ctx, usageRows(&uq, "start, gpu_id, owner_id, allocated_us, COALESCE(held_us, 0), CASE WHEN held_us IS NULL THEN 1 ELSE 0 END, "+
		"present_us, used_us, memory_byte_s, energy_mj, peak_memory_bytes, peak_util_cpct")+" ORDER BY start", uq.args...)
	if err != nil {
		return nil, fmt.Errorf("usage series: %w", err)
	}
	defer rows.Close()
	type row struct {
		start, gpu, owner int64
		unheld            int64 // 1 when held_us is NULL
		v                 UsageValues
	}
	var rs chunks[row]
	for rows.Next() {
		r := rs.next()
		if err := rows.Scan(&r.start, &r.gpu, &r.owner, &r.v.AllocatedUS, &r.v.HeldUS, &r.unheld, &r.v.PresentUS, &r.v.UsedUS, &r.v.MemoryByteS,
			&r.v.EnergyMJ, &r.v.PeakMemory, &r.v.PeakUtil); err != nil {
			return nil, fmt.Errorf("usage series: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("usage series: %w", err)
	}

	// Points hold pointers, which make growing a slice of them dear:
	// they are made at their final number, then sorted start by start.
	out := make([]ledger.UsagePoint, rs.len())
	var (
		group int // where the points of the current start begin
		start int64
	)
	for i, r := range rs.all() {
		g, ok := gpus[r.gpu]
		if !ok {
			return nil, fmt.Errorf("usage series: no GPU with id %d", r.gpu)
		}
		o, ok := owners[r.owner]
		if !ok {
			return nil, fmt.Errorf("usage series: no owner with id %d", r.owner)
		}
		if i == 0 || r.start != start {
			slices.SortFunc(out[group:i], compareUsagePoints)
			group, start = i, r.start
		}
		out[i] = ledger.UsagePoint{
			Start: time.Unix(r.start, 0).UTC(), Node: g.Node, OwnerKind: o.Kind, OwnerID: o.Name,
			GPU: g, Sums: r.v.Sums(), Container: ctrs[r.owner],
		}
		if r.unheld != 0 {
			out[i].Unheld = ledger.Unheld{Rows: 1, All: true, UsedSeconds: out[i].UsedSeconds}
		}
	}
	slices.SortFunc(out[group:], compareUsagePoints)
	return out, nil
}

// compareUsagePoints orders the points of one start.
func compareUsagePoints(a, b ledger.UsagePoint) int {
	if c := strings.Compare(a.Node, b.Node); c != 0 {
		return c
	}
	if c := strings.Compare(a.OwnerKind, b.OwnerKind); c != 0 {
		return c
	}
	if c := strings.Compare(a.OwnerID, b.OwnerID); c != 0 {
		return c
	}
	return strings.Compare(a.GPU.UUID, b.GPU.UUID)
}

// ContainerSeries answers ledger.Store.ContainerSeries as Series answers
// Series.
func ContainerSeries(ctx context.Context, q Querier, f ledger.Filter, step time.Duration) ([]ledger.ContainerUsage, error) {
	p, err := PlanSeries(f, step)
	if err != nil {
		return nil, err
	}
	if p.Empty() {
		return nil, nil
	}
	ctrRows := func(qb *query, cols string) string {
		var where string
		if f.Node != "" {
			where = "owner_id IN (SELECT o.id FROM owners o JOIN nodes n ON n.id = o.node_id WHERE n.name = " + qb.arg(f.Node) + ")"
		}
		return qb.union("container", cols, where, p)
	}
	var oq query
	owners, err := readOwners(ctx, q, "SELECT owner_id FROM ("+ctrRows(&oq, "owner_id")+") AS u", oq.args)
	if err != nil || len(owners) == 0 {
		return nil, err
	}

	var cq query
	rows, err := q.Query(ctx, ctrRows(&cq, "start, owner_id, cpu_us, ram_byte_s")+" ORDER BY start", cq.args...)
	if err != nil {
		return nil, fmt.Errorf("container series: %w", err)
	}
	defer rows.Close()
	type row struct {
		start, owner int64
		v            ContainerValues
	}
	var rs chunks[row]
	for rows.Next() {
		r := rs.next()
		if err := rows.Scan(&r.start, &r.owner, &r.v.CPUUS, &r.v.RAMByteS); err != nil {
			return nil, fmt.Errorf("container series: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("container series: %w", err)
	}

	out := make([]ledger.ContainerUsage, rs.len())
	var (
		group int
		start int64
	)
	for i, r := range rs.all() {
		o, ok := owners[r.owner]
		if !ok {
			return nil, fmt.Errorf("container series: no owner with id %d", r.owner)
		}
		if i == 0 || r.start != start {
			slices.SortFunc(out[group:i], compareContainerUsage)
			group, start = i, r.start
		}
		out[i] = ledger.ContainerUsage{
			Node: o.Node, Start: time.Unix(r.start, 0).UTC(), ContainerID: o.Name,
			CPUSeconds: float64(r.v.CPUUS) / MicrosPerSecond, RAMByteSeconds: float64(r.v.RAMByteS),
		}
	}
	slices.SortFunc(out[group:], compareContainerUsage)
	return out, nil
}

// compareContainerUsage orders the points of one start.
func compareContainerUsage(a, b ledger.ContainerUsage) int {
	if c := strings.Compare(a.Node, b.Node); c != 0 {
		return c
	}
	return strings.Compare(a.ContainerID, b.ContainerID)
}

// chunks holds rows as they are read, in blocks that are never copied as
// more arrive: a month of minute rows is tens of megabytes.
type chunks[T any] struct {
	blocks [][]T
	n      int
}

// chunkRows is the number of rows in a block.
const chunkRows = 4096

// next adds a zero row and returns it to be filled.
func (c *chunks[T]) next() *T {
	if c.n%chunkRows == 0 {
		c.blocks = append(c.blocks, make([]T, chunkRows))
	}
	r := &c.blocks[c.n/chunkRows][c.n%chunkRows]
	c.n++
	return r
}

func (c *chunks[T]) len() int { return c.n }

// all yields the rows in the order they were added.
func (c *chunks[T]) all() iter.Seq2[int, *T] {
	return func(yield func(int, *T) bool) {
		for i := range c.n {
			if !yield(i, &c.blocks[i/chunkRows][i%chunkRows]) {
				return
			}
		}
	}
}

// readGPUs reads the GPUs of node ("" for all nodes) by id. The table holds
// a few rows per node, so it is read whole rather than narrowed to the
// GPUs a window names.
func readGPUs(ctx context.Context, q Querier, node string) (map[int64]ledger.GPU, error) {
	var gq query
	sql := "SELECT g.id, n.name, g.uuid, g.idx, g.model, g.memory_total FROM gpus g JOIN nodes n ON n.id = g.node_id"
	if node != "" {
		sql += " WHERE n.name = " + gq.arg(node)
	}
	rows, err := q.Query(ctx, sql, gq.args...)
	if err != nil {
		return nil, fmt.Errorf("gpus: %w", err)
	}
	defer rows.Close()
	out := map[int64]ledger.GPU{}
	for rows.Next() {
		var (
			id  int64
			g   ledger.GPU
			idx *int64
		)
		if err := rows.Scan(&id, &g.Node, &g.UUID, &idx, &g.Model, &g.MemoryTotal); err != nil {
			return nil, fmt.Errorf("gpus: %w", err)
		}
		g.Index = -1
		if idx != nil {
			g.Index = int(*idx)
		}
		out[id] = g
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("gpus: %w", err)
	}
	return out, nil
}

// readOwners reads the owners whose ids the query in selects, by id.
func readOwners(ctx context.Context, q Querier, in string, args []any) (map[int64]OwnerRef, error) {
	rows, err := q.Query(ctx, "SELECT o.id, n.name, o.kind, o.name FROM owners o JOIN nodes n ON n.id = o.node_id WHERE o.id IN ("+in+")", args...)
	if err != nil {
		return nil, fmt.Errorf("owners: %w", err)
	}
	defer rows.Close()
	out := map[int64]OwnerRef{}
	for rows.Next() {
		var (
			id int64
			o  OwnerRef
		)
		if err := rows.Scan(&id, &o.Node, &o.Kind, &o.Name); err != nil {
			return nil, fmt.Errorf("owners: %w", err)
		}
		out[id] = o
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("owners: %w", err)
	}
	return out, nil
}

// readContainers reads the containers among the owners whose ids the query
// in selects, by owner id.
func readContainers(ctx context.Context, q Querier, in string, args []any) (map[int64]*ledger.Container, error) {
	rows, err := q.Query(ctx, fmt.Sprintf(containerSQL, in), args...)
	if err != nil {
		return nil, fmt.Errorf("containers: %w", err)
	}
	defer rows.Close()
	out := map[int64]*ledger.Container{}
	for rows.Next() {
		id, c, err := scanContainer(rows)
		if err != nil {
			return nil, fmt.Errorf("containers: %w", err)
		}
		out[id] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("containers: %w", err)
	}
	return out, nil
}
