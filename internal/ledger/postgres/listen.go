package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlledger"
	"github.com/gpumeter/gpumeter/internal/retry"
)

// The NOTIFY channels of the fleet's wake-ups (ledger.FleetWakes): the
// queue's changes, which only the scheduler acts on, and start intents,
// which every agent looks through for its own.
const (
	queueChannel   = "gpumeter_fleet"
	intentsChannel = "gpumeter_fleet_intents"
)

// notify sends a fleet's wake-up within tx: PostgreSQL delivers it at
// commit, once however often a transaction sends it.
func notify(ctx context.Context, tx sqlledger.Tx, intents bool) error {
	ch := queueChannel
	if intents {
		ch = intentsChannel
	}
	_, err := tx.Exec(ctx, "SELECT pg_notify('"+ch+"', '')")
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
func (s *Store) Listen(ctx context.Context) ledger.FleetWakes {
	queue, intents := make(chan struct{}, 1), make(chan struct{}, 1)
	wake := func(ch chan struct{}) {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	heard := func(channel string) {
		switch channel {
		case queueChannel:
			wake(queue)
		case intentsChannel:
			wake(intents)
		default: // (re)connected: anything may have been missed
			wake(queue)
			wake(intents)
		}
	}
	cfg := s.pool.Config().ConnConfig.Copy()
	go func() {
		b := listenBackoff
		for ctx.Err() == nil {
			if s.listen(ctx, cfg, func(ch string) { b.Reset(); heard(ch) }) != nil && ctx.Err() == nil {
				_ = retry.Sleep(ctx, b.Next())
			}
		}
	}()
	return ledger.FleetWakes{Queue: queue, Intents: intents}
}

// listen holds one listening connection until it breaks or ctx ends,
// calling heard with "" once it listens and with the channel of every
// notification.
func (s *Store) listen(ctx context.Context, cfg *pgx.ConnConfig, heard func(channel string)) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+queueChannel+"; LISTEN "+intentsChannel); err != nil {
		return err
	}
	heard("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		heard(n.Channel)
	}
}
