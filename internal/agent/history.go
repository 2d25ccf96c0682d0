package agent

import (
	"context"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/gpuhistory"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// gpuHistory is server.History over the ring of the last hour and the
// ledger, which both give ledger series.
type gpuHistory struct {
	ring  *gpuhistory.Ring
	store ledger.GPUSeriesStore // nil: the ledger is off
	node  string
}

var _ server.History = gpuHistory{}

// Recent reads the ring; no GPU with samples there is nil.
func (g gpuHistory) Recent(from, to time.Time, step time.Duration) []ledger.GPUHistory {
	hs := g.ring.Recent(from, to, step)
	if len(hs) == 0 {
		return nil
	}
	return hs
}

// Stored reads the node's GPU series from the ledger.
func (g gpuHistory) Stored(ctx context.Context, from, to time.Time, step time.Duration) ([]ledger.GPUHistory, error) {
	if g.store == nil {
		return nil, server.ErrNoLedger
	}
	return g.store.GPUSeries(ctx, g.node, from, to, step)
}

// historySource is what the API reads GPU history from.
func (a *Agent) historySource() server.History {
	if a.history == nil {
		return nil
	}
	g := gpuHistory{ring: a.history, node: a.node}
	if a.store != nil {
		g.store = a.store
	}
	return g
}
