package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpumeter/gpumeter/internal/ledger/sqlledger"
	"github.com/gpumeter/gpumeter/internal/retry"
)

// fleetChannel is the NOTIFY channel of the fleet's wake-ups.
const fleetChannel = "gpumeter_fleet"

// notify sends the fleet's wake-up within tx: PostgreSQL delivers it at
// commit, once however often a transaction sends it.
func notify(ctx context.Context, tx sqlledger.Tx) error {
	_, err := tx.Exec(ctx, "SELECT pg_notify('"+fleetChannel+"', '')")
	return err
}

// listenBackoff spaces the reconnections of a listener whose connection
// broke.
var listenBackoff = retry.Backoff{Initial: 250 * time.Millisecond, Max: 5 * time.Second}

// Listen listens for the fleet's wake-ups on a connection of its own,
// outside the pool: a LISTEN lives as long as its session, which a pooled
// connection would share with whatever borrows it next (and which a
// transaction pooler such as PgBouncer in transaction mode does not keep
// at all). A broken connection is made again with backoff, and a wake-up
// sent once it listens again.
func (s *Store) Listen(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	wake := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	cfg := s.pool.Config().ConnConfig.Copy()
	go func() {
		b := listenBackoff
		for ctx.Err() == nil {
			if s.listen(ctx, cfg, func() { b.Reset(); wake() }) != nil && ctx.Err() == nil {
				_ = retry.Sleep(ctx, b.Next())
			}
		}
	}()
	return out
}

// listen holds one listening connection until it breaks or ctx ends,
// calling wake once it listens and at every notification.
func (s *Store) listen(ctx context.Context, cfg *pgx.ConnConfig, wake func()) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+fleetChannel); err != nil {
		return err
	}
	wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}
