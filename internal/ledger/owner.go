package ledger

import (
	"context"
	"time"
)

// OwnerHour is the GPU use of one user (and team) in one hour, summed
// over every node, GPU and container of theirs: what fair share reads.
type OwnerHour struct {
	Start time.Time // start of the hour, UTC
	// Kind is KindContainer (User and Team are the container's) or
	// KindHost (User is the Unix user of host processes, Team "").
	Kind       string
	User, Team string
	// Seconds on each basis. HeldSeconds sums the rows that have held
	// seconds; UnheldAllocatedSeconds is the allocated seconds of the
	// rows that have none (ledger schema 4 and older).
	AllocatedSeconds       float64
	HeldSeconds            float64
	UsedSeconds            float64
	UnheldAllocatedSeconds float64
}

// OwnerUsageReader reads use per owner and hour. Both backends implement
// it.
type OwnerUsageReader interface {
	// UsageByOwner sums the hour rows of [from, to) (both truncated to
	// the hour) per hour, owner kind, user and team, ordered by start,
	// kind, user and team. Owners of KindNone, and containers the ledger
	// has no record of, are left out.
	UsageByOwner(ctx context.Context, from, to time.Time) ([]OwnerHour, error)
}
