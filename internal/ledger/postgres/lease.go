package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlledger"
)

var (
	_ ledger.LeaseTaker       = (*Store)(nil)
	_ ledger.JobStore         = (*Store)(nil)
	_ ledger.BudgetStore      = (*Store)(nil)
	_ ledger.OwnerUsageReader = (*Store)(nil)
	_ ledger.Fleet            = (*Store)(nil)
)

// nowUS is the server's clock in unix microseconds: every agent judges a
// lease's silence by the one clock they share.
const nowUS = `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint`

// serverNow reads the server's clock, by which the fleet's leases are
// judged.
func serverNow(ctx context.Context, q sqlledger.Querier) (time.Time, error) {
	rows, err := q.Query(ctx, "SELECT "+nowUS)
	if err != nil {
		return time.Time{}, err
	}
	defer rows.Close()
	var us int64
	if rows.Next() {
		if err := rows.Scan(&us); err != nil {
			return time.Time{}, err
		}
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, err
	}
	if us == 0 {
		return time.Time{}, errors.New("the server did not say the time")
	}
	return time.UnixMicro(us).UTC(), nil
}

// Acquire takes node's lease when it is free, released, or silent for
// longer than takeover. The check and the take are one transaction that
// locks the lease row, so two agents starting at once cannot both win.
func (s *Store) Acquire(ctx context.Context, want ledger.Lease, takeover time.Duration) (ledger.Lease, error) {
	if want.Node == "" || want.Instance == "" {
		return ledger.Lease{}, fmt.Errorf("lease of node %q: a lease needs a node and an instance", want.Node)
	}
	var got ledger.Lease
	err := s.retry(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			// A row to lock must exist: insert a released one if none.
			if _, err := tx.Exec(ctx, `INSERT INTO node_leases (node, instance, host, pid, started_us, heartbeat_us, seq, released)
				VALUES ($1, '', '', 0, 0, 0, 0, TRUE) ON CONFLICT (node) DO NOTHING`, want.Node); err != nil {
				return err
			}
			h, released, now, err := lockLease(ctx, tx, want.Node)
			if err != nil {
				return err
			}
			silent := now.Sub(h.Heartbeat)
			if !released && h.Instance != want.Instance && silent <= takeover {
				return &ledger.LeaseHeldError{Holder: h, Silent: max(0, silent), Takeover: takeover}
			}
			got = want
			got.Started, got.Heartbeat, got.Seq = now, now, 0
			_, err = tx.Exec(ctx, `UPDATE node_leases SET instance = $2, host = $3, pid = $4,
				started_us = $5, heartbeat_us = $5, seq = 0, released = FALSE WHERE node = $1`,
				want.Node, want.Instance, want.Host, want.PID, now.UnixMicro())
			return err
		})
	})
	var held *ledger.LeaseHeldError
	if errors.As(err, &held) {
		return ledger.Lease{}, err // it names the node and the holder
	}
	if err != nil {
		return ledger.Lease{}, fmt.Errorf("lease of node %q in postgres %s: %w", want.Node, s.where, err)
	}
	return got, nil
}

// lockLease reads node's lease row FOR UPDATE, with the server's time.
func lockLease(ctx context.Context, tx pgx.Tx, node string) (h ledger.Lease, released bool, now time.Time, err error) {
	var started, hb, seq, nowV int64
	err = tx.QueryRow(ctx, `SELECT instance, host, pid, started_us, heartbeat_us, seq, released, `+nowUS+`
		FROM node_leases WHERE node = $1 FOR UPDATE`, node).
		Scan(&h.Instance, &h.Host, &h.PID, &started, &hb, &seq, &released, &nowV)
	if err != nil {
		return h, false, now, err
	}
	h.Node, h.Started, h.Heartbeat, h.Seq = node, time.UnixMicro(started), time.UnixMicro(hb), uint64(seq)
	return h, released, time.UnixMicro(nowV), nil
}

// Release marks the lease released, if l's instance still holds it.
func (s *Store) Release(ctx context.Context, l ledger.Lease) error {
	_, err := s.pool.Exec(ctx, `UPDATE node_leases SET released = TRUE, heartbeat_us = `+nowUS+`
		WHERE node = $1 AND instance = $2`, l.Node, l.Instance)
	if err != nil {
		return fmt.Errorf("release the lease of node %q in postgres %s: %w", l.Node, s.where, err)
	}
	return nil
}

// fence checks, inside a batch's transaction and holding the lease row's
// lock until it commits, that id's instance holds the lease; written says
// the batch was committed before. A takeover waits for that lock, so it
// comes wholly before or wholly after the batch.
func fence(ctx context.Context, tx pgx.Tx, id ledger.BatchID) (written bool, err error) {
	h, released, _, err := lockLease(ctx, tx, id.Node)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, &ledger.FencedError{ID: id}
	}
	if err != nil {
		return false, err
	}
	if h.Instance != id.Instance || released {
		if released {
			h = ledger.Lease{}
		}
		return false, &ledger.FencedError{ID: id, Holder: h}
	}
	return id.Seq <= h.Seq, nil
}

// renewSQL records a batch as the lease's last.
const renewSQL = `UPDATE node_leases SET seq = $3, heartbeat_us = ` + nowUS + ` WHERE node = $1 AND instance = $2`
