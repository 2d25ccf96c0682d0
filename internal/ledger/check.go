package ledger

import "time"

// Health is what a ledger says of itself for `gpumeter ledger check`: its
// schema, whether its file is sound, which nodes it holds and how far its
// rows reach.
type Health struct {
	Backend       string // "SQLite" or "PostgreSQL"
	Where         string // the file, or host:port/database
	SizeBytes     int64  // of the file or database
	SchemaVersion int    // as found (and migrated to on open)
	// Integrity lists what the backend's own check found wrong; empty
	// when IntegrityChecked and nothing is. PostgreSQL checks its pages
	// itself and is not checked here.
	IntegrityChecked bool
	Integrity        []string
	Nodes            []Node
	// MinuteRows and HourRows are the starts of the first and last usage
	// rows of each table (zero when it has none).
	MinuteRows, HourRows [2]time.Time
	Leases               []LeaseState
}

// LeaseState is one node's lease as stored.
type LeaseState struct {
	Lease
	Released bool
}
