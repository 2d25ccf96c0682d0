package run

import (
	"context"
	"errors"
)

// Run reconciles the store with the engine's job containers, then runs
// the event loop until ctx ends; it returns nil then. Without an Engine it
// returns at once.
func (q *Queue) Run(ctx context.Context) error {
	if q.engine == nil {
		return nil
	}
	return errors.New("queue: the launcher is not built yet")
}
