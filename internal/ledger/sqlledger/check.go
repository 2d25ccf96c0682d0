package sqlledger

import (
	"context"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// LeaseVersion is the schema version that added node leases.
const LeaseVersion = 4

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
		rows, err := q.Query(ctx, "SELECT min(start), max(start) FROM "+table)
		if err != nil {
			return err
		}
		var first, last *int64
		if rows.Next() {
			err = rows.Scan(&first, &last)
		}
		rows.Close()
		if err != nil {
			return err
		}
		span := [2]time.Time{fromUnix(first), fromUnix(last)}
		if i == 0 {
			h.MinuteRows = span
		} else {
			h.HourRows = span
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
