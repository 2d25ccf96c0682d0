package sqlledger

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// nodeByName is f's condition, on the minute table's keys, that keeps the
// rows of the node named by the parameter arg.
func (f *family) nodeByName(arg string) string {
	if f == containerFamily {
		return "owner_id IN (SELECT o.id FROM owners o JOIN nodes n ON n.id = o.node_id WHERE n.name = " + arg + ")"
	}
	return "gpu_id IN (SELECT g.id FROM gpus g JOIN nodes n ON n.id = g.node_id WHERE n.name = " + arg + ")"
}

// selectCols are the columns of f's minute table that scanRow reads, in
// its order: start, the ids, the values (the nullable one as 0 and a
// flag after the rest).
func (f *family) selectCols() string {
	cols := append([]string{"start"}, f.keys...)
	for i, c := range f.cols {
		if i == f.nullable {
			c = "COALESCE(" + c + ", 0)"
		}
		cols = append(cols, c)
	}
	if f.nullable >= 0 {
		c := f.cols[f.nullable]
		cols = append(cols, "CASE WHEN "+c+" IS NULL THEN 1 ELSE 0 END")
	}
	return strings.Join(cols, ", ")
}

// scanner scans minute rows of f, reusing its destinations.
type scanner struct {
	f    *family
	row  minuteRow
	null int64
	dest []any
}

func (f *family) scanner() *scanner {
	s := &scanner{f: f}
	s.dest = append(s.dest, &s.row.start)
	for k := range f.keys {
		s.dest = append(s.dest, &s.row.key[k])
	}
	for c := range f.cols {
		s.dest = append(s.dest, &s.row.v[c])
	}
	if f.nullable >= 0 {
		s.dest = append(s.dest, &s.null)
	}
	return s
}

func (s *scanner) scan(rows Cursor) (minuteRow, error) {
	s.null = 0
	if err := rows.Scan(s.dest...); err != nil {
		return minuteRow{}, err
	}
	r := s.row
	r.null = s.null != 0
	return r, nil
}

// readMinutes reads f's minutes in r, of node ("" for every node): the
// chunks' rows and the minute rows still waiting to be compacted, combined
// as the upsert would have combined them, by start and then ids.
func readMinutes(ctx context.Context, q Querier, f *family, node string, r Range) ([]minuteRow, error) {
	if r.Empty() {
		return nil, nil
	}
	out, err := readChunks(ctx, q, f, node, r)
	if err != nil {
		return nil, err
	}
	chunked := len(out)
	if out, err = readRows(ctx, q, f, f.name+"_minute", node, r, out); err != nil {
		return nil, fmt.Errorf("%s minutes: %w", f.name, err)
	}
	if chunked == 0 || chunked == len(out) || out[chunked-1].start < out[chunked].start {
		return out, nil
	}
	// Minute rows of hours already compacted: put them in their place and
	// add those of a minute the chunk holds too.
	return f.combine(out), nil
}

// combine sorts rows by start and ids and merges the rows of one (start,
// ids), in place.
func (f *family) combine(rows []minuteRow) []minuteRow {
	slices.SortStableFunc(rows, func(a, b minuteRow) int { return compareKey(&a, &b) })
	w := 0
	for i := range rows {
		if w > 0 && compareKey(&rows[w-1], &rows[i]) == 0 {
			f.merge(&rows[w-1], &rows[i])
			continue
		}
		rows[w] = rows[i]
		w++
	}
	return rows[:w]
}

// readChunks reads the rows in r of f's chunks, of node ("" for every
// node), by start and then ids.
func readChunks(ctx context.Context, q Querier, f *family, node string, r Range) ([]minuteRow, error) {
	var qb query
	sql := "SELECT c.start, c.data FROM " + f.name + "_chunk c"
	if node != "" {
		sql += " JOIN nodes n ON n.id = c.node_id"
	}
	sql += " WHERE c.start >= " + qb.arg(floor(r.From, 3600)) + " AND c.start < " + qb.arg(r.To)
	if node != "" {
		sql += " AND n.name = " + qb.arg(node)
	}
	sql += " ORDER BY c.start"
	rows, err := q.Query(ctx, sql, qb.args...)
	if err != nil {
		return nil, fmt.Errorf("%s chunks: %w", f.name, err)
	}
	defer rows.Close()
	// Every chunk is decoded before any row is made, so that the rows,
	// large as they are, are allocated once.
	type hourSeries struct {
		hour int64
		list []*series // of the chunks of hour, every node's
	}
	var (
		hours []hourSeries
		total int
	)
	for rows.Next() {
		var (
			start int64
			data  []byte
		)
		if err := rows.Scan(&start, &data); err != nil {
			return nil, fmt.Errorf("%s chunks: %w", f.name, err)
		}
		list, err := f.decodeSeries(start, data)
		if err != nil {
			return nil, err
		}
		if n := len(hours); n > 0 && hours[n-1].hour == start {
			hours[n-1].list = append(hours[n-1].list, list...)
		} else {
			hours = append(hours, hourSeries{start, list})
		}
		for _, s := range list {
			total += len(s.rows)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s chunks: %w", f.name, err)
	}
	out := make([]minuteRow, 0, total)
	for _, h := range hours {
		slices.SortFunc(h.list, func(a, b *series) int {
			return compareKey(&minuteRow{key: a.key}, &minuteRow{key: b.key})
		})
		n := len(out)
		out = emitByMinute(out, h.list)
		if h.hour < r.From || h.hour+3600 > r.To {
			kept := out[:n]
			for _, row := range out[n:] {
				if row.start >= r.From && row.start < r.To {
					kept = append(kept, row)
				}
			}
			out = kept
		}
	}
	return out, nil
}

// Compact moves node's minute rows of the hours before before (a whole
// hour) into chunks, in the caller's transaction: each hour's rows are
// merged into the hour's chunk, made if missing, and deleted. A node that
// is not in the ledger has nothing to compact.
func Compact(ctx context.Context, tx Tx, node string, before int64) error {
	id, found, err := nodeID(ctx, tx, node)
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	if !found {
		return nil
	}
	for _, f := range families {
		if err := compactFamily(ctx, tx, f, id, before); err != nil {
			return fmt.Errorf("compact %s minutes of node %q: %w", f.name, node, err)
		}
	}
	return nil
}

// CompactAll compacts, for every node, the hours before the newest hour
// that holds any of its minute rows: what a ledger from before chunks
// needs once, and what a writer leaves behind.
func CompactAll(ctx context.Context, tx Tx) error {
	var (
		nodes []string
		tops  []int64
	)
	rows, err := tx.Query(ctx, `SELECT n.name, MAX(m.start) FROM nodes n JOIN (
		SELECT g.node_id, u.start FROM gpu_minute u JOIN gpus g ON g.id = u.gpu_id
		UNION ALL SELECT g.node_id, u.start FROM usage_minute u JOIN gpus g ON g.id = u.gpu_id
		UNION ALL SELECT o.node_id, u.start FROM container_minute u JOIN owners o ON o.id = u.owner_id
	) AS m ON m.node_id = n.id GROUP BY n.name ORDER BY n.name`)
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	for rows.Next() {
		var (
			n   string
			top int64
		)
		if err := rows.Scan(&n, &top); err != nil {
			rows.Close()
			return fmt.Errorf("compact: %w", err)
		}
		nodes, tops = append(nodes, n), append(tops, top)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	for i, n := range nodes {
		if err := Compact(ctx, tx, n, floor(tops[i], 3600)); err != nil {
			return err
		}
	}
	return nil
}

// compactFamily compacts f's minute rows of node id before before.
// Rows whose start is not a whole minute (none that gpumeter writes)
// stay as they are.
func compactFamily(ctx context.Context, tx Tx, f *family, id, before int64) error {
	where := " WHERE start < $2 AND start % 60 = 0 AND " + f.node
	rows, err := tx.Query(ctx, "SELECT "+f.selectCols()+" FROM "+f.name+"_minute"+where+" ORDER BY start", id, before)
	if err != nil {
		return err
	}
	var pending []minuteRow
	sc := f.scanner()
	for rows.Next() {
		row, err := sc.scan(rows)
		if err != nil {
			rows.Close()
			return err
		}
		pending = append(pending, row)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	compacted := len(pending)
	for len(pending) > 0 {
		hour := floor(pending[0].start, 3600)
		n := 1
		for n < len(pending) && pending[n].start < hour+3600 {
			n++
		}
		if err := compactHour(ctx, tx, f, id, hour, pending[:n]); err != nil {
			return err
		}
		pending = pending[n:]
	}
	// When these were all the table's rows, as they are on a one-node
	// ledger whose batches come in order, the table is emptied whole,
	// which SQLite does without visiting each row.
	total, err := count(ctx, tx, f.name+"_minute")
	if err != nil {
		return err
	}
	if total == int64(compacted) {
		_, err = tx.Exec(ctx, "DELETE FROM "+f.name+"_minute")
		return err
	}
	_, err = tx.Exec(ctx, "DELETE FROM "+f.name+"_minute"+where, id, before)
	return err
}

// compactHour merges rows, minute rows of node id in the hour starting at
// hour, into that hour's chunk.
func compactHour(ctx context.Context, tx Tx, f *family, id, hour int64, rows []minuteRow) error {
	cur, err := tx.Query(ctx, "SELECT data FROM "+f.name+"_chunk WHERE node_id = $1 AND start = $2", id, hour)
	if err != nil {
		return err
	}
	var data []byte
	found := cur.Next()
	if found {
		err = cur.Scan(&data)
	}
	cur.Close()
	if err == nil {
		err = cur.Err()
	}
	if err != nil {
		return err
	}
	all := rows
	if found {
		old, err := f.decodeChunk(nil, hour, data)
		if err != nil {
			return err
		}
		all = f.combine(append(old, rows...))
	}
	enc, err := f.encodeChunk(hour, all)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+f.name+"_chunk (node_id, start, data) VALUES ($1, $2, $3) "+
		"ON CONFLICT (node_id, start) DO UPDATE SET data = excluded.data", id, hour, enc)
	return err
}

// Compactor keeps, for one writer, the hour before which each node's
// minutes are compacted, so that a batch pays for a compaction only when
// its node's hour has moved on or it wrote minutes into hours compacted
// already. Its methods are safe for concurrent use.
type Compactor struct {
	mu     sync.Mutex
	before map[string]int64
}

// Due returns the compactions that writing r calls for, node by node: the
// hour before which to compact, the hour of the node's newest minute in r
// or the hour compacted up to already. late holds the nodes, of those,
// whose rows in r reach into hours before that: a writer that compacts
// before it writes (as SQLite's does, to empty the minute tables whole)
// compacts those again after.
func (c *Compactor) Due(r *Rows) (due, late map[string]int64) {
	type reach struct{ lo, hi int64 }
	nodes := map[string]reach{}
	see := func(node string, start int64) {
		n, ok := nodes[node]
		if !ok {
			n = reach{start, start}
		}
		nodes[node] = reach{min(n.lo, start), max(n.hi, start)}
	}
	for i := range r.UsageMinute {
		see(r.UsageMinute[i].Key.Node, r.UsageMinute[i].Key.Start)
	}
	for i := range r.GPUMinute {
		see(r.GPUMinute[i].Key.Node, r.GPUMinute[i].Key.Start)
	}
	for i := range r.ContainerMinute {
		see(r.ContainerMinute[i].Key.Node, r.ContainerMinute[i].Key.Start)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for node, n := range nodes {
		hour := floor(n.hi, 3600)
		prev, ok := c.before[node]
		if ok && hour <= prev && n.lo >= prev {
			continue
		}
		if due == nil {
			due = map[string]int64{}
		}
		before := max(hour, prev)
		due[node] = before
		if n.lo < before {
			if late == nil {
				late = map[string]int64{}
			}
			late[node] = before
		}
	}
	return due, late
}

// Done records compactions of Due once their transaction has committed.
func (c *Compactor) Done(due map[string]int64) {
	if len(due) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.before == nil {
		c.before = map[string]int64{}
	}
	for node, before := range due {
		c.before[node] = max(c.before[node], before)
	}
}

// CompactDue runs the compactions of Due in the caller's transaction.
func CompactDue(ctx context.Context, tx Tx, due map[string]int64) error {
	nodes := slices.Sorted(maps.Keys(due))
	for _, node := range nodes {
		if err := Compact(ctx, tx, node, due[node]); err != nil {
			return err
		}
	}
	return nil
}

// Migrated runs what a migration needs beyond its SQL, in the migrating
// transaction: the minutes of a ledger from before ChunkVersion are
// compacted, and the jobs that start or run on a ledger from before
// FleetVersion get their allocations.
func Migrated(ctx context.Context, tx Tx, pending []Migration) error {
	for _, m := range pending {
		switch m.Version {
		case ChunkVersion:
			if err := CompactAll(ctx, tx); err != nil {
				return err
			}
		case FleetVersion:
			if err := allocateActive(ctx, tx); err != nil {
				return err
			}
		}
	}
	return nil
}

// CompactRows compacts node's minutes before before from r, the rows of
// the batch written last, instead of reading them back: the caller
// vouches that r's minute rows are all the minute tables hold (it wrote
// them into tables it had emptied, and nothing has written minutes
// since). gpuID and ownerID give the ids r's names were stored under.
// The tables' row counts are checked against r all the same; ok is false,
// with nothing done, when they differ, when r holds another node's rows
// or rows from before, or when a name has no id: the caller then
// compacts as usual.
func CompactRows(ctx context.Context, tx Tx, node string, before int64, r *Rows,
	gpuID func(GPURef) (int64, bool), ownerID func(OwnerRef) (int64, bool)) (ok bool, err error) {
	var sets [3][]minuteRow
	for _, u := range r.UsageMinute {
		g, okG := gpuID(GPURef{Node: u.Key.Node, UUID: u.Key.GPU})
		o, okO := ownerID(OwnerRef{Node: u.Key.Node, Kind: u.Key.Kind, Name: u.Key.Owner})
		if !okG || !okO || u.Key.Node != node || u.Key.Start >= before {
			return false, nil
		}
		v := u.Val
		sets[0] = append(sets[0], minuteRow{start: u.Key.Start, key: [2]int64{g, o},
			v: [maxCols]int64{v.AllocatedUS, v.HeldUS, v.PresentUS, v.UsedUS, v.MemoryByteS, v.EnergyMJ, v.PeakMemory, v.PeakUtil}})
	}
	for _, u := range r.GPUMinute {
		g, okG := gpuID(GPURef{Node: u.Key.Node, UUID: u.Key.GPU})
		if !okG || u.Key.Node != node || u.Key.Start >= before {
			return false, nil
		}
		v, x := u.Val, u.Val.Gauges
		sets[1] = append(sets[1], minuteRow{start: u.Key.Start, key: [2]int64{g},
			v: [maxCols]int64{v.SecondsUS, v.AllocatedUS, v.IdleUS, v.UsedUS, v.UnattributedUS, v.EnergyMJ, v.IdleEnergyMJ, v.PeakUtil,
				x.Samples, x.UtilSum, x.UtilMax, x.MemSum, x.MemMax, x.PowerSum, x.PowerMax, x.TempSum, x.TempMax}})
	}
	for _, u := range r.ContainerMinute {
		o, okO := ownerID(OwnerRef{Node: u.Key.Node, Kind: ledger.KindContainer, Name: u.Key.ID})
		if !okO || u.Key.Node != node || u.Key.Start >= before {
			return false, nil
		}
		sets[2] = append(sets[2], minuteRow{start: u.Key.Start, key: [2]int64{o}, v: [maxCols]int64{u.Val.CPUUS, u.Val.RAMByteS}})
	}
	for i, f := range families {
		n, err := count(ctx, tx, f.name+"_minute")
		if err != nil {
			return false, err
		}
		if n != int64(len(sets[i])) {
			return false, nil
		}
	}
	id, found, err := nodeID(ctx, tx, node)
	if err != nil || !found {
		return false, err
	}
	for i, f := range families {
		rows := sets[i]
		slices.SortFunc(rows, func(a, b minuteRow) int { return compareKey(&a, &b) })
		for len(rows) > 0 {
			hour := floor(rows[0].start, 3600)
			n := 1
			for n < len(rows) && rows[n].start < hour+3600 {
				n++
			}
			if err := compactHour(ctx, tx, f, id, hour, rows[:n]); err != nil {
				return false, fmt.Errorf("compact %s minutes of node %q: %w", f.name, node, err)
			}
			rows = rows[n:]
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+f.name+"_minute"); err != nil {
			return false, err
		}
	}
	return true, nil
}

// MinutesEmpty reports whether the three minute tables hold no row.
func MinutesEmpty(ctx context.Context, tx Tx) (bool, error) {
	for _, f := range families {
		n, err := count(ctx, tx, "(SELECT 1 FROM "+f.name+"_minute LIMIT 1) AS x")
		if err != nil || n > 0 {
			return false, err
		}
	}
	return true, nil
}

// count reads SELECT count(*) FROM from.
func count(ctx context.Context, tx Tx, from string) (int64, error) {
	rows, err := tx.Query(ctx, "SELECT count(*) FROM "+from)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	if rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
	}
	return n, rows.Err()
}

// nodeID reads the id of the node named name.
func nodeID(ctx context.Context, tx Tx, name string) (id int64, found bool, err error) {
	rows, err := tx.Query(ctx, "SELECT id FROM nodes WHERE name = $1", name)
	if err != nil {
		return 0, false, err
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return 0, false, err
		}
		found = true
	}
	return id, found, rows.Err()
}
