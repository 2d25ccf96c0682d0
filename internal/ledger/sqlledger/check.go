package sqlledger

import (
	"context"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// LeaseVersion is the schema version that added node leases.
const LeaseVersion = 4

// ChunkVersion is the schema version that added minute chunks.
const ChunkVersion = 10

// Check fills in what both backends read alike: nodes, the reach of the
// usage rows and, from LeaseVersion on, the leases. h.SchemaVersion must
// be set.
func Check(ctx context.Context, q Querier, h *ledger.Health) error {
	rows, err := q.Query(ctx, "SELECT name, first_seen, last_seen FROM nodes ORDER BY name")
	if err != nil {
		return err
	}
	for rows.Next() {
		var n ledger.Node
		var first, last *int64
		if err := rows.Scan(&n.Name, &first, &last); err != nil {
			rows.Close()
			return err
		}
		n.FirstSeen, n.LastSeen = fromUnix(first), fromUnix(last)
		h.Nodes = append(h.Nodes, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for i, table := range []string{"usage_minute", "usage_hour"} {
		first, last, err := span(ctx, q, table)
		if err != nil {
			return err
		}
		if i == 0 && h.SchemaVersion >= ChunkVersion {
			// The minutes compacted into chunks: from the first chunk's
			// hour to the last minute of the last chunk.
			cFirst, cLast, err := span(ctx, q, "usage_chunk")
			if err != nil {
				return err
			}
			if cLast != nil {
				rows, err := readChunks(ctx, q, usageFamily, "", Range{*cLast, *cLast + 3600})
				if err != nil {
					return err
				}
				if n := len(rows); n > 0 && (last == nil || rows[n-1].start > *last) {
					last = &rows[n-1].start
				}
			}
			if cFirst != nil && (first == nil || *cFirst < *first) {
				first = cFirst
			}
		}
		s := [2]time.Time{fromUnix(first), fromUnix(last)}
		if i == 0 {
			h.MinuteRows = s
		} else {
			h.HourRows = s
		}
	}
	if h.SchemaVersion < LeaseVersion {
		return nil
	}
	rows, err = q.Query(ctx, "SELECT node, instance, host, pid, started_us, heartbeat_us, seq, released FROM node_leases WHERE instance <> '' ORDER BY node")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var l ledger.LeaseState
		var started, hb, seq int64
		if err := rows.Scan(&l.Node, &l.Instance, &l.Host, &l.PID, &started, &hb, &seq, &l.Released); err != nil {
			return err
		}
		l.Started, l.Heartbeat, l.Seq = time.UnixMicro(started).UTC(), time.UnixMicro(hb).UTC(), uint64(seq)
		h.Leases = append(h.Leases, l)
	}
	return rows.Err()
}

func fromUnix(p *int64) time.Time {
	if p == nil {
		return time.Time{}
	}
	return time.Unix(*p, 0).UTC()
}

// span reads the first and last start of table's rows, nil when it has
// none.
func span(ctx context.Context, q Querier, table string) (first, last *int64, err error) {
	rows, err := q.Query(ctx, "SELECT min(start), max(start) FROM "+table)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	if rows.Next() {
		err = rows.Scan(&first, &last)
	}
	if err == nil {
		err = rows.Err()
	}
	return first, last, err
}
