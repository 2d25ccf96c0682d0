package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Lease is one agent's claim to be the only writer of a node's rows. An
// agent (or simulate) acquires it before its first write and names it in
// every batch (Batch.ID); a store refuses a batch whose lease another
// instance holds now, inside the batch's own transaction, so an agent that
// lost its lease can never add rows that its successor also adds.
type Lease struct {
	Node     string
	Instance string // new for every run of an agent
	Host     string // the host the agent runs on
	PID      int
	Started  time.Time // when the lease was acquired
	// Heartbeat is when the holder last wrote or renewed, by the store's
	// clock (the database server's for PostgreSQL), so that agents with
	// skewed clocks judge silence alike.
	Heartbeat time.Time
	// Seq is the sequence number of the last batch committed under the
	// lease; a batch at or below it was written already.
	Seq uint64
}

// LeaseTaker is a store that keeps node leases. Both backends implement it.
type LeaseTaker interface {
	// Acquire takes the lease of want.Node for want's instance (Instance,
	// Host and PID must be set). It succeeds when nobody holds the lease,
	// when its holder released it, or when the holder has been silent for
	// longer than takeover; otherwise it fails with a *LeaseHeldError,
	// before anything is written. The SQLite store also takes an
	// exclusive lock on the file, so that no second process writes it
	// while this one lives. The lease returned has Started, Heartbeat and
	// Seq (0) filled in.
	Acquire(ctx context.Context, want Lease, takeover time.Duration) (Lease, error)
	// Release gives the lease up, so that the next agent need not wait
	// for it to go silent. Releasing a lease that another instance holds
	// now does nothing.
	Release(ctx context.Context, l Lease) error
}

// BatchID names a batch for fencing and for writing it exactly once: the
// node's lease, the instance that holds it and the batch's sequence
// number under it (1, 2, 3, ... with no gaps). A store writes a batch
// with an ID only while that instance holds the node's lease, and a batch
// whose Seq is not above the lease's last one is taken as written already
// (Write returns nil and adds nothing). An empty batch with an ID renews
// the lease. A zero ID writes without a lease: tests and tools that own
// the ledger alone.
type BatchID struct {
	Node     string
	Instance string
	Seq      uint64
}

// IsZero reports whether the ID is unset.
func (id BatchID) IsZero() bool { return id == BatchID{} }

// LeaseHeldError is returned by Acquire when another agent holds the lease.
type LeaseHeldError struct {
	Holder   Lease
	Silent   time.Duration // since the holder's heartbeat
	Takeover time.Duration // how long it must be silent to be taken over
	// Locked is set when the SQLite file's writer lock is held: the holder
	// is a live process on this host, however long it has been silent.
	Locked bool
	// File names the SQLite ledger for a lock held by an agent of another
	// node.
	File string
}

func (e *LeaseHeldError) Error() string {
	h := e.Holder
	who := fmt.Sprintf("pid %d on %s, since %s, last seen %s ago", h.PID, h.Host,
		h.Started.Local().Format("15:04"), e.Silent.Round(time.Second))
	switch {
	case h.PID == 0:
		who = "it left no name"
	case h.Started.IsZero():
		who = fmt.Sprintf("pid %d on %s", h.PID, h.Host)
	}
	var what string
	switch {
	case e.File != "" && h.Node != "":
		what = fmt.Sprintf("ledger %s is written by another agent (node %q, %s)", e.File, h.Node, who)
	case e.File != "":
		what = fmt.Sprintf("ledger %s is written by another process (%s)", e.File, who)
	default:
		what = fmt.Sprintf("node %q is written by another agent (%s)", h.Node, who)
	}
	if e.Locked {
		return what + "; stop it, or give this one another data directory or ledger"
	}
	return fmt.Sprintf("%s; stop it, or give this one another --hostname (a lease silent for %s is taken over)", what, e.Takeover)
}

// ErrFenced is wrapped by Write when the batch's instance no longer holds
// its node's lease: another agent took it over. Nothing of the batch was
// written, and the writer must stop.
var ErrFenced = errors.New("this agent no longer holds the node's lease")

// FencedError says who holds the lease now.
type FencedError struct {
	ID     BatchID
	Holder Lease // zero when the lease row is gone
}

func (e *FencedError) Error() string {
	if e.Holder.Instance == "" {
		return fmt.Sprintf("%v: node %q has no lease for instance %s", ErrFenced, e.ID.Node, e.ID.Instance)
	}
	return fmt.Sprintf("%v: node %q is held by pid %d on %s since %s", ErrFenced, e.ID.Node,
		e.Holder.PID, e.Holder.Host, e.Holder.Started.Local().Format(time.RFC3339))
}

func (e *FencedError) Unwrap() error { return ErrFenced }
