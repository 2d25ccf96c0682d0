package sqlledger

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Series answers ledger.Store.Series. The rows come first, by start
// (hour rows, or the minutes of chunks and minute rows); then the GPUs,
// owners and containers they name, so that the points of one owner share
// their strings and their Container.
func Series(ctx context.Context, q Querier, f ledger.Filter, step time.Duration) ([]ledger.UsagePoint, error) {
	p, err := PlanSeries(f, step)
	if err != nil {
		return nil, err
	}
	if p.Empty() {
		return nil, nil
	}
	var rs []minuteRow
	if len(p.Minutes) > 0 {
		if rs, err = readMinutes(ctx, q, usageFamily, f.Node, p.Minutes[0]); err != nil {
			return nil, fmt.Errorf("usage series: %w", err)
		}
	} else if rs, err = readHourRows(ctx, q, usageFamily, f.Node, p.Hours); err != nil {
		return nil, fmt.Errorf("usage series: %w", err)
	}
	if len(rs) == 0 {
		return nil, nil
	}
	ids := make([]int64, 0, 64)
	for i := range rs {
		ids = append(ids, rs[i].key[1])
	}
	slices.Sort(ids)
	list := idList(slices.Compact(ids))
	owners, ctrs, err := readOwnersContainers(ctx, q, list)
	if err != nil {
		return nil, err
	}
	gpus, err := readGPUs(ctx, q, f.Node)
	if err != nil {
		return nil, err
	}

	// Points hold pointers, which make growing a slice of them dear:
	// they are made at their final number, then sorted start by start.
	out := make([]ledger.UsagePoint, len(rs))
	var (
		group int // where the points of the current start begin
		start int64
	)
	for i := range rs {
		r := &rs[i]
		g, ok := gpus[r.key[0]]
		if !ok {
			return nil, fmt.Errorf("usage series: no GPU with id %d", r.key[0])
		}
		o, ok := owners[r.key[1]]
		if !ok {
			return nil, fmt.Errorf("usage series: no owner with id %d", r.key[1])
		}
		if i == 0 || r.start != start {
			slices.SortFunc(out[group:i], compareUsagePoints)
			group, start = i, r.start
		}
		v := UsageValues{AllocatedUS: r.v[0], HeldUS: r.v[1], PresentUS: r.v[2], UsedUS: r.v[3],
			MemoryByteS: r.v[4], EnergyMJ: r.v[5], PeakMemory: r.v[6], PeakUtil: r.v[7]}
		out[i] = ledger.UsagePoint{
			Start: time.Unix(r.start, 0).UTC(), Node: g.Node, OwnerKind: o.Kind, OwnerID: o.Name,
			GPU: g, Sums: v.Sums(), Container: ctrs[r.key[1]],
		}
		if r.null {
			out[i].Unheld = ledger.Unheld{Rows: 1, All: true, UsedSeconds: out[i].UsedSeconds}
		}
	}
	slices.SortFunc(out[group:], compareUsagePoints)
	return out, nil
}

// readHourRows reads f's hour rows in r, of node ("" for every node), by
// start and then ids.
func readHourRows(ctx context.Context, q Querier, f *family, node string, r Range) ([]minuteRow, error) {
	return readRows(ctx, q, f, f.name+"_hour", node, r, nil)
}

// readRows appends to out the rows of table (one of f's) in r, of node
// ("" for every node), by start and then ids.
func readRows(ctx context.Context, q Querier, f *family, table, node string, r Range, out []minuteRow) ([]minuteRow, error) {
	var qb query
	sql := "SELECT " + f.selectCols() + " FROM " + table + " WHERE start >= " + qb.arg(r.From) + " AND start < " + qb.arg(r.To)
	if node != "" {
		sql += " AND " + f.nodeByName(qb.arg(node))
	}
	sql += " ORDER BY start, " + strings.Join(f.keys, ", ")
	rows, err := q.Query(ctx, sql, qb.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	sc := f.scanner()
	for rows.Next() {
		row, err := sc.scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rows.Err()
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
	var rs []minuteRow
	if len(p.Minutes) > 0 {
		if rs, err = readMinutes(ctx, q, containerFamily, f.Node, p.Minutes[0]); err != nil {
			return nil, fmt.Errorf("container series: %w", err)
		}
	} else if rs, err = readHourRows(ctx, q, containerFamily, f.Node, p.Hours); err != nil {
		return nil, fmt.Errorf("container series: %w", err)
	}
	if len(rs) == 0 {
		return nil, nil
	}
	ids := make([]int64, 0, 64)
	for i := range rs {
		ids = append(ids, rs[i].key[0])
	}
	slices.Sort(ids)
	owners, err := readOwners(ctx, q, idList(slices.Compact(ids)), nil)
	if err != nil {
		return nil, err
	}

	out := make([]ledger.ContainerUsage, len(rs))
	var (
		group int
		start int64
	)
	for i := range rs {
		r := &rs[i]
		o, ok := owners[r.key[0]]
		if !ok {
			return nil, fmt.Errorf("container series: no owner with id %d", r.key[0])
		}
		if i == 0 || r.start != start {
			slices.SortFunc(out[group:i], compareContainerUsage)
			group, start = i, r.start
		}
		out[i] = ledger.ContainerUsage{
			Node: o.Node, Start: time.Unix(r.start, 0).UTC(), ContainerID: o.Name,
			CPUSeconds: float64(r.v[0]) / MicrosPerSecond, RAMByteSeconds: float64(r.v[1]),
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

// readOwnersContainers reads the owners whose ids in lists (an SQL list of
// integers) by id, and the containers among them by owner id, in one
// query.
func readOwnersContainers(ctx context.Context, q Querier, in string) (map[int64]OwnerRef, map[int64]*ledger.Container, error) {
	rows, err := q.Query(ctx, `SELECT o.id, n.name, o.kind, o.name, CASE WHEN c.owner_id IS NULL THEN 0 ELSE 1 END,
	COALESCE(c.container_id, ''), COALESCE(c.name, ''), COALESCE(c.image, ''), COALESCE(CAST(c.labels AS TEXT), ''),
	COALESCE(c.user_name, ''), COALESCE(c.team, ''), COALESCE(c.project, ''), COALESCE(c.gpu_request, ''),
	c.started_at, c.finished_at, c.exit_code, c.first_seen, c.last_seen
FROM owners o JOIN nodes n ON n.id = o.node_id LEFT JOIN containers c ON c.owner_id = o.id
WHERE o.id IN (`+in+`)`)
	if err != nil {
		return nil, nil, fmt.Errorf("owners: %w", err)
	}
	defer rows.Close()
	owners := map[int64]OwnerRef{}
	ctrs := map[int64]*ledger.Container{}
	for rows.Next() {
		var (
			id                             int64
			o                              OwnerRef
			has                            int64
			c                              ledger.Container
			labels                         string
			started, finished, first, last *int64
			exit                           *int64
		)
		if err := rows.Scan(&id, &o.Node, &o.Kind, &o.Name, &has, &c.ID, &c.Name, &c.Image, &labels, &c.User, &c.Team, &c.Project,
			&c.GPURequest, &started, &finished, &exit, &first, &last); err != nil {
			return nil, nil, fmt.Errorf("owners: %w", err)
		}
		owners[id] = o
		if has == 0 {
			continue
		}
		c.Node = o.Node
		c.StartedAt, c.FinishedAt, c.FirstSeen, c.LastSeen = Time(started), Time(finished), Time(first), Time(last)
		if exit != nil {
			code := int(*exit)
			c.ExitCode = &code
		}
		if c.Labels, err = DecodeLabels(labels); err != nil {
			return nil, nil, fmt.Errorf("container %s labels: %w", c.ID, err)
		}
		ctrs[id] = &c
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("owners: %w", err)
	}
	return owners, ctrs, nil
}
