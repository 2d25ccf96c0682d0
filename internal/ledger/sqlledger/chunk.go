package sqlledger

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"sync"
)

// Minute data lives in two places. The writers upsert minute rows
// (usage_minute, gpu_minute, container_minute) as batches come; once a
// node's hour has closed, Compact moves that hour's minute rows into one
// chunk per (node, hour) and table family (usage_chunk, gpu_chunk,
// container_chunk): the hour's series, each with its minutes and every
// column's values delta- and varint-encoded, the whole deflated. A row
// that arrives for an hour already compacted (a spooled batch written
// late) waits in its minute table until the next compaction merges it
// into the chunk; readers combine chunks with whatever minute rows remain,
// as the upsert would have. docs/design.md describes the layout.

// family is one kind of minute data: the minute table, its chunk table,
// the id columns that key a series and the value columns it holds.
type family struct {
	name  string   // usage, gpu or container: tables name_minute and name_chunk
	keys  []string // id columns of a series, in key order
	cols  []string // value columns, in stored order
	peaks uint64   // bit i set: column i combines by maximum, not by sum
	// nullable is the index of the column that may be NULL (held_us,
	// absent from rows written before it existed), or -1.
	nullable int
	// node is the condition, on the minute table's keys, that keeps one
	// node's rows; $1 is the node's id.
	node string
}

// The most value columns of a family (gpu).
const maxCols = 17

// The chunk format's version, its first byte.
const chunkVersion = 1

var (
	usageFamily = &family{
		name: "usage", keys: []string{"gpu_id", "owner_id"},
		cols:  []string{"allocated_us", "held_us", "present_us", "used_us", "memory_byte_s", "energy_mj", "peak_memory_bytes", "peak_util_cpct"},
		peaks: 1<<6 | 1<<7, nullable: 1,
		node: "gpu_id IN (SELECT id FROM gpus WHERE node_id = $1)",
	}
	gpuFamily = &family{
		name: "gpu", keys: []string{"gpu_id"},
		cols: []string{"seconds_us", "allocated_us", "idle_us", "used_us", "unattributed_us", "energy_mj", "idle_energy_mj", "peak_util_cpct",
			"samples", "util_sum_cpct", "util_max_cpct", "mem_sum_bytes", "mem_max_bytes", "power_sum_mw", "power_max_mw", "temp_sum_ccel", "temp_max_ccel"},
		peaks: 1<<7 | 1<<10 | 1<<12 | 1<<14 | 1<<16, nullable: -1,
		node: "gpu_id IN (SELECT id FROM gpus WHERE node_id = $1)",
	}
	containerFamily = &family{
		name: "container", keys: []string{"owner_id"},
		cols: []string{"cpu_us", "ram_byte_s"}, nullable: -1,
		node: "owner_id IN (SELECT id FROM owners WHERE node_id = $1)",
	}
	families = []*family{usageFamily, gpuFamily, containerFamily}
)

// minuteRow is one minute of one series: what a minute table's row holds.
type minuteRow struct {
	start int64
	key   [2]int64 // the family's ids; the second is 0 where it has one
	null  bool     // the nullable column is NULL
	v     [maxCols]int64
}

// compareKey orders rows of one family by start, then ids.
func compareKey(a, b *minuteRow) int {
	if a.start != b.start {
		if a.start < b.start {
			return -1
		}
		return 1
	}
	for i := range a.key {
		if a.key[i] != b.key[i] {
			if a.key[i] < b.key[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// merge adds o into r as the minute tables' upsert does: sums add, peaks
// take the maximum, and a NULL stays NULL.
func (f *family) merge(r *minuteRow, o *minuteRow) {
	for i := range f.cols {
		if f.peaks&(1<<i) != 0 {
			r.v[i] = max(r.v[i], o.v[i])
		} else {
			r.v[i] += o.v[i]
		}
	}
	if o.null {
		r.null = true
	}
	if r.null && f.nullable >= 0 {
		r.v[f.nullable] = 0
	}
}

// series is one series of a chunk while it is encoded or decoded.
type series struct {
	key     [2]int64
	minutes uint64 // bit m: minute m of the hour is present
	nulls   uint64 // bit m: the nullable column is NULL at minute m
	rows    []*minuteRow
}

// encodeChunk encodes rows, all of one node and one hour starting at
// hour, as a chunk. The rows must be minute-aligned and hold each
// (start, key) once; their order does not matter.
func (f *family) encodeChunk(hour int64, rows []minuteRow) ([]byte, error) {
	bySeries := map[[2]int64]*series{}
	for i := range rows {
		r := &rows[i]
		m := (r.start - hour) / 60
		if r.start%60 != 0 || m < 0 || m >= 60 {
			return nil, fmt.Errorf("%s chunk of hour %d: row at %d is not a minute of it", f.name, hour, r.start)
		}
		s := bySeries[r.key]
		if s == nil {
			s = &series{key: r.key}
			bySeries[r.key] = s
		}
		if s.minutes&(1<<m) != 0 {
			return nil, fmt.Errorf("%s chunk of hour %d: two rows for minute %d of series %v", f.name, hour, m, r.key)
		}
		s.minutes |= 1 << m
		if r.null {
			s.nulls |= 1 << m
		}
		s.rows = append(s.rows, r)
	}
	list := make([]*series, 0, len(bySeries))
	for _, s := range bySeries {
		slices.SortFunc(s.rows, func(a, b *minuteRow) int { return compareKey(a, b) })
		list = append(list, s)
	}
	slices.SortFunc(list, func(a, b *series) int {
		return compareKey(&minuteRow{key: a.key}, &minuteRow{key: b.key})
	})

	raw := make([]byte, 0, 64+len(rows)*len(f.cols)*3)
	raw = binary.AppendUvarint(raw, uint64(len(list)))
	var prev [2]int64
	for _, s := range list {
		for k := range f.keys {
			raw = binary.AppendVarint(raw, s.key[k]-prev[k])
		}
		prev = s.key
		raw = binary.AppendUvarint(raw, s.minutes)
		if f.nullable >= 0 {
			raw = binary.AppendUvarint(raw, s.nulls)
		}
		for c := range f.cols {
			var last int64
			for _, r := range s.rows {
				raw = binary.AppendVarint(raw, r.v[c]-last)
				last = r.v[c]
			}
		}
	}
	var out bytes.Buffer
	out.Grow(len(raw)/2 + 16)
	out.WriteByte(chunkVersion)
	w := flateWriters.Get().(*flate.Writer)
	w.Reset(&out)
	if _, err := w.Write(raw); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	flateWriters.Put(w)
	return out.Bytes(), nil
}

var flateWriters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(io.Discard, flate.DefaultCompression) // the level is valid: cannot fail
	return w
}}

// errChunk marks a chunk that does not decode.
var errChunk = errors.New("malformed chunk")

// decodeChunk decodes a chunk of the hour starting at hour into its rows,
// appended to dst by minute and, within a minute, by key.
func (f *family) decodeChunk(dst []minuteRow, hour int64, data []byte) ([]minuteRow, error) {
	list, err := f.decodeSeries(hour, data)
	if err != nil {
		return dst, err
	}
	return emitByMinute(dst, list), nil
}

// decodeSeries decodes a chunk into its series, each with its rows.
func (f *family) decodeSeries(hour int64, data []byte) ([]*series, error) {
	bad := func(what string) error {
		return fmt.Errorf("%s chunk of hour %d: %w: %s", f.name, hour, errChunk, what)
	}
	if len(data) == 0 || data[0] != chunkVersion {
		if len(data) == 0 {
			return nil, bad("empty")
		}
		return nil, bad(fmt.Sprintf("version %d, want %d", data[0], chunkVersion))
	}
	raw, err := inflate(data[1:])
	if err != nil {
		return nil, bad(err.Error())
	}
	defer rawBuffers.Put(raw)
	if len(raw.b) > maxChunkRaw {
		return nil, bad("larger than a chunk can be")
	}
	return f.parseSeries(hour, raw.b, bad)
}

// inflate decompresses a chunk's body into a pooled buffer, with a pooled
// reader: a fresh flate reader costs more than a small chunk's decoding.
func inflate(body []byte) (*rawBuffer, error) {
	src := bytes.NewReader(body)
	var r io.ReadCloser
	if v := flateReaders.Get(); v != nil {
		r = v.(io.ReadCloser)
		r.(flate.Resetter).Reset(src, nil) // never fails for flate's own reader
	} else {
		r = flate.NewReader(src)
	}
	raw := rawBuffers.Get().(*rawBuffer)
	buf := bytes.NewBuffer(raw.b[:0])
	_, err := buf.ReadFrom(io.LimitReader(r, maxChunkRaw+1))
	raw.b = buf.Bytes()
	if err != nil {
		rawBuffers.Put(raw)
		return nil, err
	}
	flateReaders.Put(r)
	return raw, nil
}

type rawBuffer struct{ b []byte }

var (
	flateReaders sync.Pool
	rawBuffers   = sync.Pool{New: func() any { return &rawBuffer{} }}
)

// parseSeries parses a chunk's inflated body; bad makes its errors.
func (f *family) parseSeries(hour int64, raw []byte, bad func(string) error) ([]*series, error) {
	p := 0
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(raw[p:])
		if n <= 0 {
			return 0, false
		}
		p += n
		return v, true
	}
	sv := func() (int64, bool) {
		v, n := binary.Varint(raw[p:])
		if n <= 0 {
			return 0, false
		}
		p += n
		return v, true
	}
	n, ok := uv()
	if !ok || n > uint64(len(raw)) {
		return nil, bad("series count")
	}
	list := make([]*series, 0, n)
	var prev [2]int64
	for range n {
		s := &series{}
		for k := range f.keys {
			d, ok := sv()
			if !ok {
				return nil, bad("series key")
			}
			s.key[k] = prev[k] + d
		}
		prev = s.key
		if s.minutes, ok = uv(); !ok || s.minutes>>60 != 0 || s.minutes == 0 {
			return nil, bad("minutes of a series")
		}
		if f.nullable >= 0 {
			if s.nulls, ok = uv(); !ok || s.nulls&^s.minutes != 0 {
				return nil, bad("nulls of a series")
			}
		}
		rows := make([]minuteRow, bits.OnesCount64(s.minutes))
		s.rows = make([]*minuteRow, len(rows))
		m := s.minutes
		for i := range rows {
			at := bits.TrailingZeros64(m)
			m &^= 1 << at
			rows[i].start = hour + int64(at)*60
			rows[i].key = s.key
			rows[i].null = s.nulls&(1<<at) != 0
			s.rows[i] = &rows[i]
		}
		for c := range f.cols {
			var last int64
			for i := range rows {
				d, ok := sv()
				if !ok {
					return nil, bad("values of a series")
				}
				last += d
				rows[i].v[c] = last
			}
		}
		list = append(list, s)
	}
	if p != len(raw) {
		return nil, bad("trailing bytes")
	}
	return list, nil
}

// maxChunkRaw bounds a chunk's decoded size: far above any real hour (a
// node's hour of 1,000 series of 17 columns is some 3 MB), far below what
// would hurt a reader.
const maxChunkRaw = 64 << 20

// emitByMinute appends the rows of the series to dst minute by minute,
// within a minute in the order of the series.
func emitByMinute(dst []minuteRow, list []*series) []minuteRow {
	next := make([]int, len(list))
	var all uint64
	n := 0
	for _, s := range list {
		all |= s.minutes
		n += len(s.rows)
	}
	dst = slices.Grow(dst, n)
	for all != 0 {
		m := bits.TrailingZeros64(all)
		all &^= 1 << m
		for i, s := range list {
			if s.minutes&(1<<m) != 0 {
				dst = append(dst, *s.rows[next[i]])
				next[i]++
			}
		}
	}
	return dst
}
