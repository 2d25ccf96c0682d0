// Package ledger defines the usage ledger: the records gpumeter keeps for
// every node, GPU and container, the per-minute and per-hour usage sums
// that every report reads, the audit log (of audit.Event), node leases,
// the GPU queue's jobs (JobStore), which live in the same database so
// that the queue survives a restart, and the fleet's coordination
// (Fleet): registered nodes, the scheduler lease, start intents and the
// GPU allocations the database refuses to double. Backends (ledger/sqlite,
// ledger/postgres) implement Ledger, every capability at once, and pass
// the shared suite in ledger/ledgertest.
package ledger

import (
	"context"
	"errors"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
)

// Owner kinds as stored.
const (
	KindContainer = "container"
	KindHost      = "host"
	KindNone      = "none"
)

// Node is one metered host.
type Node struct {
	Name      string
	FirstSeen time.Time
	LastSeen  time.Time
}

// GPU is one GPU of a node.
type GPU struct {
	Node        string
	UUID        string
	Index       int
	Model       string
	MemoryTotal uint64
}

// Container is one container as last seen. Writing a container again
// replaces what is known of it (LastSeen, FinishedAt and ExitCode move
// on), except that FirstSeen keeps the earliest sighting, LastSeen the
// latest, and a zero StartedAt does not erase a known one. Stores keep
// times to the second.
type Container struct {
	Node       string
	ID         string
	Name       string
	Image      string
	Labels     map[string]string
	User       string
	Team       string
	Project    string
	GPURequest string
	StartedAt  time.Time // zero when unknown
	FinishedAt time.Time // zero while running
	ExitCode   *int
	FirstSeen  time.Time
	LastSeen   time.Time
}

// Sums are usage totals of one owner on one GPU over a period.
//
// Stores keep sums as fixed-point integers, so that adding is exact and
// does not depend on order: seconds to the microsecond, energy to the
// millijoule, byte-seconds to the byte-second and PeakUtil to a hundredth
// of a percent. What is read back is rounded to those units.
type Sums struct {
	AllocatedSeconds float64
	// HeldSeconds is the GPU time a running container holding the GPU
	// had it, not split among holders as AllocatedSeconds is: efficiency
	// is UsedSeconds / HeldSeconds. Rows written before gpumeter kept it
	// (ledger schema 4 and older) have none; a read sums it over the rows
	// that have it, and UsageTotal.Unheld and UsagePoint.Unheld say what
	// it leaves out.
	HeldSeconds       float64
	PresentSeconds    float64
	UsedSeconds       float64
	MemoryByteSeconds float64
	EnergyJoules      float64
	PeakMemoryBytes   uint64  // maximum, not a sum
	PeakUtil          float64 // maximum SM utilisation, percent
}

// Add adds o to s: the sums add up, the peaks take the larger of the two.
func (s *Sums) Add(o Sums) {
	s.AllocatedSeconds += o.AllocatedSeconds
	s.HeldSeconds += o.HeldSeconds
	s.PresentSeconds += o.PresentSeconds
	s.UsedSeconds += o.UsedSeconds
	s.MemoryByteSeconds += o.MemoryByteSeconds
	s.EnergyJoules += o.EnergyJoules
	s.PeakMemoryBytes = max(s.PeakMemoryBytes, o.PeakMemoryBytes)
	s.PeakUtil = max(s.PeakUtil, o.PeakUtil)
}

// Usage is one owner's use of one GPU in one minute (or hour).
type Usage struct {
	Node      string
	Start     time.Time // start of the minute (or hour), UTC
	OwnerKind string    // KindContainer, KindHost or KindNone
	OwnerID   string    // container ID or Unix user name; "" for KindNone
	GPU       string    // GPU UUID
	Sums
}

// Unheld is the part of a read sum whose rows have no held GPU-seconds:
// rows written before gpumeter kept them (ledger schema 4 and older), or
// that such a release began and a later one added to. Their held time is
// unknown, not 0: HeldSeconds sums the other rows only. The zero value
// says that every row has held seconds.
type Unheld struct {
	// Rows counts the rows summed that have no held seconds; All is set
	// when none of the rows summed has them, so that HeldSeconds is
	// unknown rather than 0.
	Rows int
	All  bool
	// UsedSeconds is the UsedSeconds of those rows, which efficiency over
	// the rows that have held seconds leaves out with them.
	UsedSeconds float64
}

// GPUSums are one GPU's totals over a period.
type GPUSums struct {
	Seconds             float64
	AllocatedSeconds    float64
	IdleSeconds         float64
	UsedSeconds         float64
	UnattributedSeconds float64
	EnergyJoules        float64
	IdleEnergyJoules    float64
	PeakUtil            float64 // maximum, percent
}

// Add adds o to s: the sums add up, PeakUtil takes the larger of the two.
func (s *GPUSums) Add(o GPUSums) {
	s.Seconds += o.Seconds
	s.AllocatedSeconds += o.AllocatedSeconds
	s.IdleSeconds += o.IdleSeconds
	s.UsedSeconds += o.UsedSeconds
	s.UnattributedSeconds += o.UnattributedSeconds
	s.EnergyJoules += o.EnergyJoules
	s.IdleEnergyJoules += o.IdleEnergyJoules
	s.PeakUtil = max(s.PeakUtil, o.PeakUtil)
}

// GPUUsage is one GPU's totals in one minute (or hour), and its sampled
// figures there.
type GPUUsage struct {
	Node  string
	Start time.Time
	GPU   string
	GPUSums
	Gauges GPUGauges
}

// ContainerUsage is one container's CPU and RAM in one minute (or hour).
type ContainerUsage struct {
	Node           string
	Start          time.Time
	ContainerID    string
	CPUSeconds     float64
	RAMByteSeconds float64
}

// Batch is one flush. A store writes a batch atomically: all of it or
// none. Usage sums are added to what the store holds for the same key
// (peaks take the maximum) in both the minute and the hour tables, so a
// batch must carry only what was not written before, and ID makes
// writing the same batch twice harmless.
type Batch struct {
	ID             BatchID // zero: written without a lease
	Nodes          []Node
	GPUs           []GPU
	Containers     []Container
	Usage          []Usage
	GPUUsage       []GPUUsage
	ContainerUsage []ContainerUsage
}

// Empty reports whether the batch holds nothing.
func (b *Batch) Empty() bool {
	return len(b.Nodes) == 0 && len(b.GPUs) == 0 && len(b.Containers) == 0 &&
		len(b.Usage) == 0 && len(b.GPUUsage) == 0 && len(b.ContainerUsage) == 0
}

// Filter selects usage for a report.
type Filter struct {
	// From and To bound the window [From, To). Both are truncated to the
	// minute. A zero From reaches back to the oldest row, a zero To has no
	// end.
	From, To time.Time
	Node     string // "" for all nodes
}

// UsageTotal is one owner's use of one GPU summed over a window, with what
// the ledger knows of the owner and the GPU.
type UsageTotal struct {
	Node      string
	OwnerKind string
	OwnerID   string
	// GPU carries Model and Index from the gpus table; Index is -1 for a
	// GPU that usage named but no batch described. A container that used
	// CPU but no GPU in the window has one row with the zero GPU (UUID "")
	// and zero Sums.
	GPU GPU
	Sums
	// Unheld says which of the summed rows HeldSeconds does not cover.
	Unheld Unheld
	// Container is set for KindContainer owners the ledger knows. The rows
	// of one container share one Container.
	Container *Container
	// CPUSeconds and RAMByteSeconds are the container's, over the window,
	// reported once per container on the row of its first GPU (by UUID)
	// so that sums over rows do not count them twice.
	CPUSeconds     float64
	RAMByteSeconds float64
}

// GPUTotal is one GPU's totals over a window.
type GPUTotal struct {
	GPU GPU
	GPUSums
}

// UsagePoint is one owner's use of one GPU in one step (a minute or an
// hour) of a series, with what the ledger knows of the owner and the GPU.
type UsagePoint struct {
	Start     time.Time // start of the minute or hour, UTC
	Node      string
	OwnerKind string
	OwnerID   string
	// GPU carries Model and Index as in UsageTotal: Index is -1 for a GPU
	// that usage named but no batch described.
	GPU GPU
	Sums
	// Unheld is set when the point's row has no held seconds (Rows 1,
	// All, UsedSeconds the point's).
	Unheld Unheld
	// Container is set for KindContainer owners the ledger knows. The
	// points of one container share one Container.
	Container *Container
}

// Store is a usage ledger.
//
// Usage and GPUs read hour rows for the whole hours inside the window and
// minute rows for the partial hours at its edges. Where Retain has already
// deleted the minute rows of an edge hour, that hour's row stands in whole,
// so the window widens to the hour there.
type Store interface {
	// Write validates a batch (see Batch.Validate) and adds it atomically.
	Write(ctx context.Context, b Batch) error
	// Usage sums usage per (node, owner, GPU) over the filter's window,
	// ordered by node, owner kind, owner ID and GPU UUID.
	Usage(ctx context.Context, f Filter) ([]UsageTotal, error)
	// GPUs sums per-GPU totals over the filter's window, ordered by node,
	// GPU index and UUID.
	GPUs(ctx context.Context, f Filter) ([]GPUTotal, error)
	// Series returns usage per (node, owner, GPU) and step within the
	// filter's window, ordered by start (oldest first), node, owner kind,
	// owner ID and GPU UUID. step is time.Minute, which reads minute rows,
	// or time.Hour, which reads hour rows and so widens a window edge that
	// falls inside an hour to that hour; any other step is an error. A step
	// without a row has no point (it is not a zero). Minute rows that
	// Retain deleted have no stand-in: a minute series starts where they
	// do.
	Series(ctx context.Context, f Filter, step time.Duration) ([]UsagePoint, error)
	// ContainerSeries returns each container's CPU and RAM per step, read
	// as Series reads usage, ordered by start, node and container ID.
	ContainerSeries(ctx context.Context, f Filter, step time.Duration) ([]ContainerUsage, error)
	// Totals reads what Usage and GPUs read, in one snapshot, so that the
	// owners' rows and the GPUs' totals agree while agents write.
	Totals(ctx context.Context, f Filter) ([]UsageTotal, []GPUTotal, error)
	// Retain deletes node's minute rows older than minutes and its hour
	// rows older than hours, counted back from now; node "" deletes every
	// node's. On a ledger that many nodes share, each agent deletes only
	// its own rows, under its own settings. Cut-offs are rounded down to
	// the hour, so minute rows always cover whole hours; a duration of
	// zero or less keeps those rows forever. Audit events go with the hour
	// rows. Nodes, GPUs and containers are kept.
	Retain(ctx context.Context, node string, now time.Time, minutes, hours time.Duration) error
	Close() error
}

// Ledger is a ledger backend whole: the usage store and every other
// record it keeps. Both backends implement all of it, and Open in
// ledger/backend returns it, so that no consumer asks at run time whether
// a store keeps audit events, leases or jobs; a consumer that needs less
// takes the smaller interface it reads.
type Ledger interface {
	Store
	audit.Store
	BudgetStore
	GPUSeriesStore
	GPULister
	MinuteCompacter
	JobStore
	LeaseTaker
	OwnerUsageReader
	Fleet
}

// Retention defaults for Store.Retain.
const (
	DefaultMinuteRetention = 35 * 24 * time.Hour
	DefaultHourRetention   = 400 * 24 * time.Hour
)

// ErrNotLedger is wrapped by Open when the database exists but is not a
// gpumeter ledger.
var ErrNotLedger = errors.New("not a gpumeter ledger")

// ErrSchemaTooNew is wrapped by Open when the ledger was written by a newer
// gpumeter whose schema this one does not know.
var ErrSchemaTooNew = errors.New("ledger schema is newer than this gpumeter")

// ErrDamaged is wrapped by an open that finds the ledger's file damaged
// (SQLite's quick_check fails, or a page cannot be read): the agent must
// not write on it, and the fix is a restore.
var ErrDamaged = errors.New("the ledger file is damaged")

// ErrFull is wrapped by a write that failed because the disk or the
// database is full (SQLITE_FULL, ENOSPC): nothing was written, and more
// writes fail until room is made.
var ErrFull = errors.New("the ledger's disk is full")

// ErrUnavailable is wrapped by the error of a read or write that failed
// because the database could not be reached (a refused or broken
// connection, a server shutting down): nothing was wrong with what was
// asked, and it may be asked again once the database is back.
var ErrUnavailable = errors.New("ledger database unavailable")

// Minute truncates t to its minute in UTC.
func Minute(t time.Time) time.Time { return t.UTC().Truncate(time.Minute) }

// Hour truncates t to its hour in UTC.
func Hour(t time.Time) time.Time { return t.UTC().Truncate(time.Hour) }
