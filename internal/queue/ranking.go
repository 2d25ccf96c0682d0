package queue

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// A fleet's scheduler ranks every queued job, but the other agents' APIs
// answer for those jobs too: the scheduler shares its plan's ranking (the
// order, which jobs it started, and why each other job waits, with the
// figures of the sentence) through the ledger in this encoding, and the
// other agents decode it into a Plan that ranks as the scheduler's did.
// Starts carry only their job IDs, and there are no preemptions.

// PackRanking compresses an encoded ranking for the ledger: a deep
// queue's ranking repeats its reasons' sentences and job IDs' digits, and
// it is rewritten as often as every second.
func PackRanking(raw []byte) []byte {
	var out bytes.Buffer
	w, _ := flate.NewWriter(&out, flate.BestSpeed) // the level is valid
	w.Write(raw)                                   // a bytes.Buffer takes all
	w.Close()
	return out.Bytes()
}

// maxRankingBytes bounds what UnpackRanking inflates, far above the
// ranking of the deepest queue (10,000 jobs encode to about 1.5 MB).
const maxRankingBytes = 256 << 20

// UnpackRanking decodes a ranking PackRanking compressed.
func UnpackRanking(packed []byte) (Plan, error) {
	raw, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(packed)), maxRankingBytes+1))
	if err != nil {
		return Plan{}, fmt.Errorf("the fleet's ranking does not inflate: %w", err)
	}
	if len(raw) > maxRankingBytes {
		return Plan{}, fmt.Errorf("the fleet's ranking inflates past %d MiB, more than any queue's", maxRankingBytes>>20)
	}
	return DecodeRanking(raw)
}

// rankingVersion is the first byte of an encoded ranking.
const rankingVersion = 1

// maxRankingJobs bounds what a decode allocates for a count it reads.
const maxRankingJobs = 1 << 22

// AppendRanking appends p's ranking, encoded, to b. The priorities come
// last, 8 bytes for each job of Order and then of Waits, so that two
// rankings that differ only in them (a queue that waits, and ages) share
// all but that tail: see RankingOrder.
func AppendRanking(b []byte, p Plan) []byte {
	started := make(map[string]bool, len(p.Starts))
	for _, s := range p.Starts {
		started[s.JobID] = true
	}
	b = append(b, rankingVersion)
	b = binary.AppendUvarint(b, uint64(len(p.Order)))
	for _, r := range p.Order {
		b = appendString(b, r.JobID)
		b = binary.AppendUvarint(b, uint64(max(r.Position, 0)))
		b = appendBool(b, started[r.JobID])
	}
	b = binary.AppendUvarint(b, uint64(len(p.Waits)))
	for _, w := range p.Waits {
		b = appendString(b, w.JobID)
		b = appendString(b, string(w.Reason))
		b = appendBool(b, !w.EstimatedStart.IsZero())
		if !w.EstimatedStart.IsZero() {
			b = binary.AppendVarint(b, w.EstimatedStart.UnixNano())
		}
		b = binary.AppendUvarint(b, uint64(max(w.Position, 0)))
		f := &w.figures
		b = appendString(b, f.text)
		b = append(b, byte(f.pool))
		b = binary.AppendUvarint(b, uint64(max(f.ahead, 0)))
		b = appendString(b, f.by)
		b = appendBool(b, f.otherDay)
	}
	for _, r := range p.Order {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.Priority))
	}
	for _, w := range p.Waits {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(w.Priority))
	}
	return b
}

// RankingOrder is the part of raw, AppendRanking's encoding of p, that
// says the order, the starts and why each job waits: all but the
// priorities.
func RankingOrder(raw []byte, p Plan) []byte {
	return raw[:len(raw)-8*(len(p.Order)+len(p.Waits))]
}

// DecodeRanking reads a ranking AppendRanking wrote. What it reads comes
// from the ledger, so anything malformed is an error saying where.
func DecodeRanking(b []byte) (Plan, error) {
	d := rankDecoder{b: b}
	var p Plan
	if v := d.byte("version"); d.err == nil && v != rankingVersion {
		return p, fmt.Errorf("the fleet's ranking: version %d, this agent reads %d", v, rankingVersion)
	}
	n := d.count("jobs in order")
	if n > 0 {
		p.Order = make([]Ranked, 0, n)
	}
	seen := make(map[string]bool, n)
	for i := 0; i < n && d.err == nil; i++ {
		r := Ranked{JobID: d.string("job ID")}
		if seen[r.JobID] {
			d.fail("job " + r.JobID + " is ranked twice")
		}
		seen[r.JobID] = true
		r.Position = d.int("position")
		if d.bool("started") {
			p.Starts = append(p.Starts, Start{JobID: r.JobID})
		}
		p.Order = append(p.Order, r)
	}
	n = d.count("waits")
	if n > 0 && d.err == nil {
		p.Waits = make([]Wait, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		w := Wait{JobID: d.string("wait's job ID"), Reason: Reason(d.string("reason"))}
		if d.err == nil && !w.Reason.Valid() {
			d.fail(fmt.Sprintf("job %s waits for reason %q, which this agent does not know", w.JobID, w.Reason))
		}
		if d.bool("estimate") {
			w.EstimatedStart = time.Unix(0, d.varint("estimated start")).UTC()
		}
		w.Position = d.int("wait's position")
		f := &w.figures
		f.text = d.string("wait's text")
		f.pool = int8(d.byte("pool"))
		if f.pool < 0 || f.pool > poolMemory {
			d.fail(fmt.Sprintf("job %s waits in pool %d, which is none", w.JobID, f.pool))
		}
		a := d.int("jobs ahead")
		if a > math.MaxInt32 {
			d.fail(fmt.Sprintf("job %s has %d jobs ahead, more than a queue holds", w.JobID, a))
		}
		f.ahead = int32(a)
		f.by = d.string("wait's job by")
		f.otherDay = d.bool("other day")
		p.Waits = append(p.Waits, w)
	}
	for i := range p.Order {
		p.Order[i].Priority = d.float("priority")
	}
	for i := range p.Waits {
		p.Waits[i].Priority = d.float("wait's priority")
	}
	if d.err == nil && d.off != len(b) {
		d.fail(fmt.Sprintf("%d bytes after the end", len(b)-d.off))
	}
	if d.err != nil {
		return Plan{}, d.err
	}
	return p, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// rankDecoder reads a ranking; its first error sticks, and every read
// after it returns a zero value.
type rankDecoder struct {
	b   []byte
	off int
	err error
}

var errRankingShort = errors.New("cut short")

func (d *rankDecoder) fail(text string) {
	if d.err == nil {
		d.err = fmt.Errorf("the fleet's ranking, at byte %d: %s", d.off, text)
	}
}

func (d *rankDecoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail(what + ": " + errRankingShort.Error())
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *rankDecoder) bool(what string) bool {
	switch v := d.byte(what); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail(fmt.Sprintf("%s: %d is not a flag", what, v))
		return false
	}
}

func (d *rankDecoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail(what + ": not a number")
		return 0
	}
	d.off += n
	return v
}

func (d *rankDecoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail(what + ": not a number")
		return 0
	}
	d.off += n
	return v
}

// int reads a count or position, which no queue makes larger than
// maxRankingJobs.
func (d *rankDecoder) int(what string) int {
	v := d.uvarint(what)
	if v > maxRankingJobs {
		d.fail(fmt.Sprintf("%s: %d, more than a queue holds", what, v))
		return 0
	}
	return int(v)
}

// count reads how many entries follow; each takes at least one byte.
func (d *rankDecoder) count(what string) int {
	n := d.int(what)
	if d.err == nil && n > len(d.b)-d.off {
		d.fail(fmt.Sprintf("%s: %d, more than the %d bytes left hold", what, n, len(d.b)-d.off))
		return 0
	}
	return n
}

func (d *rankDecoder) float(what string) float64 {
	if d.err != nil {
		return 0
	}
	if len(d.b)-d.off < 8 {
		d.fail(what + ": " + errRankingShort.Error())
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.b[d.off:]))
	d.off += 8
	if math.IsNaN(v) || math.IsInf(v, 0) {
		d.fail(fmt.Sprintf("%s: %v is not a priority", what, v))
		return 0
	}
	return v
}

func (d *rankDecoder) string(what string) string {
	n := d.uvarint(what)
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail(fmt.Sprintf("%s: %d bytes, more than the %d left", what, n, len(d.b)-d.off))
		return ""
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}
