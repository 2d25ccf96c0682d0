package sqlledger

import (
	"context"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// ownerHourSQL sums hour rows per hour and owner; sums are read as
// floating point, so that a sum past int64 is not an error.
const ownerHourSQL = `SELECT u.start, o.kind, CASE WHEN o.kind = 'host' THEN o.name ELSE c.user_name END AS user_name,
	CASE WHEN o.kind = 'host' THEN '' ELSE c.team END AS team,
	CAST(SUM(u.allocated_us) AS DOUBLE PRECISION), CAST(SUM(COALESCE(u.held_us, 0)) AS DOUBLE PRECISION),
	CAST(SUM(u.used_us) AS DOUBLE PRECISION),
	CAST(SUM(CASE WHEN u.held_us IS NULL THEN u.allocated_us ELSE 0 END) AS DOUBLE PRECISION)
FROM usage_hour u JOIN owners o ON o.id = u.owner_id LEFT JOIN containers c ON c.owner_id = u.owner_id
WHERE u.start >= $1 AND u.start < $2 AND (o.kind = 'host' OR o.kind = 'container' AND c.owner_id IS NOT NULL)
GROUP BY u.start, o.kind, 3, 4
ORDER BY u.start, o.kind, 3, 4`

// UsageByOwner sums hour rows per hour, owner kind, user and team.
func (l Ledger) UsageByOwner(ctx context.Context, from, to time.Time) ([]ledger.OwnerHour, error) {
	f, t := ledger.Hour(from).Unix(), ledger.Hour(to).Unix()
	if f >= t {
		return nil, nil
	}
	return read(ctx, l, "usage by owner from", func(q Querier) ([]ledger.OwnerHour, error) {
		rows, err := q.Query(ctx, ownerHourSQL, f, t)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []ledger.OwnerHour
		for rows.Next() {
			var (
				h     ledger.OwnerHour
				start int64
			)
			if err := rows.Scan(&start, &h.Kind, &h.User, &h.Team, &h.AllocatedSeconds, &h.HeldSeconds, &h.UsedSeconds, &h.UnheldAllocatedSeconds); err != nil {
				return nil, err
			}
			h.Start = time.Unix(start, 0).UTC()
			h.AllocatedSeconds /= 1e6
			h.HeldSeconds /= 1e6
			h.UsedSeconds /= 1e6
			h.UnheldAllocatedSeconds /= 1e6
			out = append(out, h)
		}
		return out, rows.Err()
	})
}
