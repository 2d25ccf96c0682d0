package record

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// DefaultLeaseTakeover is how long a node's lease must be silent before
// another agent may take it over, for a flush interval: three intervals
// on top of the longest a live agent can go without renewing (one write
// that runs to its deadline, see WriteTimeout): 45 s at the default 5 s.
// A live agent renews the lease with every flush, so only a dead or
// partitioned one is that silent; and even a takeover of a live but stuck
// agent double-counts nothing, because its next batch is fenced.
func DefaultLeaseTakeover(flush time.Duration) time.Duration {
	return 3*flush + WriteTimeout(flush)
}

// Acquire takes node's lease in the ledger lt for this process, before
// anything is written: an agent or a simulation that another agent's
// lease refuses fails here with the holder named (a
// *ledger.LeaseHeldError).
func Acquire(ctx context.Context, lt ledger.LeaseTaker, node string, takeover time.Duration) (ledger.Lease, error) {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown host"
	}
	var id [8]byte
	rand.Read(id[:])
	return lt.Acquire(ctx, ledger.Lease{Node: node, Instance: hex.EncodeToString(id[:]), Host: host, PID: os.Getpid()}, takeover)
}

// Release gives back a lease that Acquire took; a lease that is not set
// is nothing to give back.
func Release(ctx context.Context, lt ledger.LeaseTaker, l ledger.Lease) error {
	if l.Instance == "" {
		return nil
	}
	return lt.Release(ctx, l)
}
