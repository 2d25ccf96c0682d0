package sqlite

import (
	"context"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Listen returns channels that never receive: a fleet needs PostgreSQL,
// and one host's agent learns of its own changes without the database.
func (s *Store) Listen(ctx context.Context) ledger.FleetWakes {
	return ledger.FleetWakes{Queue: make(chan struct{}), Intents: make(chan struct{})}
}
