package sqlledger

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Backend is what each database does its own way: how it opens a read
// snapshot and how it runs a batch's, the audit log's and the job store's
// transactions.
// Ledger builds the rest of the ledger's methods on it.
type Backend struct {
	// Name names the ledger in errors: its file, or "postgres
	// host:port/database".
	Name string
	// Read runs fn in one read-only snapshot.
	Read func(ctx context.Context, fn func(Querier) error) error
	// WriteRows writes a batch's rows in one transaction which, when b.ID
	// is set, checks that b's instance holds its node's lease, skips a
	// batch already written and records b as the lease's last.
	WriteRows func(ctx context.Context, b *ledger.Batch, rows *Rows) error
	// InsertAudit runs InsertAudit once with each of args, in one
	// transaction.
	InsertAudit func(ctx context.Context, args [][]any) error
	// WriteTx runs fn in one write transaction and commits it when fn
	// returns nil (the job store's writes).
	WriteTx func(ctx context.Context, fn func(Tx) error) error
	// Now reads the store's clock through q, which judges leases: the
	// database server's, so that agents with skewed clocks agree.
	Now func(ctx context.Context, q Querier) (time.Time, error)
	// RowLocks is set for a database whose write transactions run at
	// once and lock rows (PostgreSQL): the fleet's writes then take the
	// rows they decide on FOR UPDATE, and claims skip locked ones. A
	// database that runs one write transaction at a time (SQLite) needs
	// neither.
	RowLocks bool
	// UniqueViolation reports whether err is the database's refusal of a
	// row that a unique index already holds.
	UniqueViolation func(err error) bool
	// LockGPUs, where set, takes a lock on each of node's GPUs (given
	// sorted) that tx holds until it ends, so that transactions at once
	// that give out one GPU check its holders one after the other: the
	// unique index refuses a second whole holder by itself, not a whole
	// holder beside memory jobs' shares. Nil for a database that runs
	// one write transaction at a time.
	LockGPUs func(ctx context.Context, tx Tx, node string, gpus []string) error
	// Notify, where set, tells the fleet's agents through tx that the
	// queue changed in a way the scheduler may act on (a job submitted,
	// GPUs freed, a node drained or undrained) or, with intents, that
	// start intents were written: sent when tx commits, never when it
	// rolls back (ledger.FleetWakes). Nil for a database without
	// notifications (SQLite, where a fleet cannot run).
	Notify func(ctx context.Context, tx Tx, intents bool) error
	// GroupSubmits writes the job submissions that arrive while one is
	// being written together, in the next transaction (one sequence
	// step, one statement for their rows, one for their audit events,
	// one wake-up): for a database across a connection, where each
	// statement is a round trip. A database in the process (SQLite) pays
	// little a statement and leaves it unset.
	GroupSubmits bool
}

// notify sends the queue's wake-up through tx, where the backend has one.
func (l Ledger) notify(ctx context.Context, tx Tx) error {
	if l.b.Notify == nil {
		return nil
	}
	return l.b.Notify(ctx, tx, false)
}

// notifyIntents sends the intents' wake-up through tx, where the backend
// has one.
func (l Ledger) notifyIntents(ctx context.Context, tx Tx) error {
	if l.b.Notify == nil {
		return nil
	}
	return l.b.Notify(ctx, tx, true)
}

// Ledger is the part of ledger.Ledger that the SQL backends share: the
// reads, the checks and roll-up before a write, the audit events and the
// job store. A backend's Store embeds it.
type Ledger struct {
	b Backend
	// g gathers concurrent submissions, where b.GroupSubmits is set.
	g *group
}

// NewLedger returns the shared methods over b.
func NewLedger(b Backend) Ledger {
	l := Ledger{b: b}
	if b.GroupSubmits {
		l.g = &group{}
	}
	return l
}

// Write adds a batch in one transaction.
func (l Ledger) Write(ctx context.Context, b ledger.Batch) error {
	if err := l.write(ctx, &b); err != nil {
		return fmt.Errorf("write ledger %s: %w", l.b.Name, err)
	}
	return nil
}

func (l Ledger) write(ctx context.Context, b *ledger.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rows, err := Rollup(b)
	if err != nil {
		return err
	}
	if b.Empty() && b.ID.IsZero() {
		return nil
	}
	return l.b.WriteRows(ctx, b, &rows)
}

// Audit adds audit events in one transaction.
func (l Ledger) Audit(ctx context.Context, events []audit.Event) error {
	if err := l.audit(ctx, events); err != nil {
		return fmt.Errorf("audit to ledger %s: %w", l.b.Name, err)
	}
	return nil
}

func (l Ledger) audit(ctx context.Context, events []audit.Event) error {
	if err := ctx.Err(); err != nil || len(events) == 0 {
		return err
	}
	args := make([][]any, len(events))
	for i, e := range events {
		var err error
		if args[i], err = AuditArgs(e); err != nil {
			return err
		}
	}
	return l.b.InsertAudit(ctx, args)
}

// Usage sums usage per (node, owner, GPU) over the filter's window.
func (l Ledger) Usage(ctx context.Context, f ledger.Filter) ([]ledger.UsageTotal, error) {
	return read(ctx, l, "ledger", func(q Querier) ([]ledger.UsageTotal, error) { return Usage(ctx, q, f) })
}

// GPUs sums per-GPU totals over the filter's window.
func (l Ledger) GPUs(ctx context.Context, f ledger.Filter) ([]ledger.GPUTotal, error) {
	return read(ctx, l, "ledger", func(q Querier) ([]ledger.GPUTotal, error) { return GPUs(ctx, q, f) })
}

// Series returns usage per (node, owner, GPU) and step within the
// filter's window.
func (l Ledger) Series(ctx context.Context, f ledger.Filter, step time.Duration) ([]ledger.UsagePoint, error) {
	return read(ctx, l, "ledger", func(q Querier) ([]ledger.UsagePoint, error) { return Series(ctx, q, f, step) })
}

// ContainerSeries returns each container's CPU and RAM per step within
// the filter's window.
func (l Ledger) ContainerSeries(ctx context.Context, f ledger.Filter, step time.Duration) ([]ledger.ContainerUsage, error) {
	return read(ctx, l, "ledger", func(q Querier) ([]ledger.ContainerUsage, error) { return ContainerSeries(ctx, q, f, step) })
}

// GPUUsageSeries returns every GPU's rows per step within the filter's
// window.
func (l Ledger) GPUUsageSeries(ctx context.Context, f ledger.Filter, step time.Duration) ([]ledger.GPUUsage, error) {
	return read(ctx, l, "ledger", func(q Querier) ([]ledger.GPUUsage, error) { return GPUUsageSeries(ctx, q, f, step) })
}

// KnownGPUs answers ledger.GPULister.KnownGPUs, ordered by node, index
// and UUID.
func (l Ledger) KnownGPUs(ctx context.Context) ([]ledger.GPU, error) {
	return read(ctx, l, "ledger", func(q Querier) ([]ledger.GPU, error) {
		gpus, err := readGPUs(ctx, q, "")
		if err != nil {
			return nil, err
		}
		out := slices.Collect(maps.Values(gpus))
		slices.SortFunc(out, func(a, b ledger.GPU) int {
			return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Index, b.Index), cmp.Compare(a.UUID, b.UUID))
		})
		return out, nil
	})
}

// CompactMinutes answers ledger.MinuteCompacter.CompactMinutes.
func (l Ledger) CompactMinutes(ctx context.Context, node string, before time.Time) error {
	b := floor(before.Unix()+3599, 3600)
	if err := l.b.WriteTx(ctx, func(tx Tx) error { return Compact(ctx, tx, node, b) }); err != nil {
		return fmt.Errorf("compact ledger %s: %w", l.b.Name, err)
	}
	return nil
}

// Totals reads Usage and GPUs in one snapshot.
func (l Ledger) Totals(ctx context.Context, f ledger.Filter) ([]ledger.UsageTotal, []ledger.GPUTotal, error) {
	var gpus []ledger.GPUTotal
	usage, err := read(ctx, l, "ledger", func(q Querier) (u []ledger.UsageTotal, err error) {
		u, gpus, err = Totals(ctx, q, f)
		return u, err
	})
	return usage, gpus, err
}

// AuditEvents reads audit events.
func (l Ledger) AuditEvents(ctx context.Context, f audit.Filter) ([]audit.Event, error) {
	return read(ctx, l, "audit events from ledger", func(q Querier) ([]audit.Event, error) { return AuditEvents(ctx, q, f) })
}

// AuditNewest reads the newest n audit events of a window.
func (l Ledger) AuditNewest(ctx context.Context, f audit.Filter, n int) ([]audit.Event, bool, error) {
	type page struct {
		events []audit.Event
		more   bool
	}
	p, err := read(ctx, l, "audit events from ledger", func(q Querier) (page, error) {
		ev, more, err := AuditNewest(ctx, q, f, n)
		return page{ev, more}, err
	})
	return p.events, p.more, err
}

// read runs fn in one read snapshot of l's backend and names what it read
// and the ledger in its error.
func read[T any](ctx context.Context, l Ledger, what string, fn func(Querier) (T, error)) (T, error) {
	var out T
	err := l.b.Read(ctx, func(q Querier) (err error) {
		out, err = fn(q)
		return err
	})
	if err != nil {
		var zero T
		return zero, fmt.Errorf("read %s %s: %w", what, l.b.Name, err)
	}
	return out, nil
}
