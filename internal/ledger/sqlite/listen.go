package sqlite

import "context"

// Listen returns a channel that never receives: a fleet needs PostgreSQL,
// and one host's agent learns of its own changes without the database.
func (s *Store) Listen(ctx context.Context) <-chan struct{} { return make(chan struct{}) }
