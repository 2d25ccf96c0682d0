package run

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/queue/stage"
)

// Launcher turns the scheduler's decisions into containers: Run's loop
// makes a pass on every event, writes each start's intent to the store,
// and starts, stops, ends and reconciles the jobs' containers through
// the Engine. Its loop's own state is in loop; what others hand it (a
// wake, a stop, an observation, a policy's stop) has its own lock.
type Launcher struct {
	writer
	engine Engine
	log    *slog.Logger

	// fixed settings
	passing          spec.GPUPassing
	identity         func(string) (spec.Identity, error)
	stopGrace        time.Duration
	preemptGrace     time.Duration
	maxRequeue       int
	requeueOn        map[config.RequeueCause]bool
	maxStartAttempts int
	logRetention     time.Duration
	notify           []string
	onEvent          func(event string, j queue.Job)
	stage            *stage.Dir // nil: mounts are refused with stageRefusal
	stageRefusal     string
	standing         Standing

	settings *settings
	env      *envStore
	// holds orders a hold and a start intent of the same job: start and
	// the service's setHeld take it.
	holds *sync.Mutex

	wake    chan struct{}
	stops   *stopRequests
	memory  *memoryEnforcer
	metrics *metrics
	ranks   *ranking
	deps    *depCache
	// fleet is set when the node is one of a fleet; only Run's goroutine
	// touches it.
	fleet *fleetState
	// leading is set while this agent holds the fleet's scheduler lease;
	// the loop sets it, the service's submissions read it.
	leading atomic.Bool
}

var _ launch = (*Launcher)(nil)

// submitted wakes the loop for a job queued through this agent: on one
// host, and on the fleet's scheduler; any other agent of a fleet has
// nothing to do with a queued job, and the scheduler hears of it through
// the ledger's NOTIFY.
func (q *Launcher) submitted() {
	if q.fleet != nil && !q.leading.Load() {
		return
	}
	q.poke()
}

// poke wakes the loop without blocking.
func (q *Launcher) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// askStop records a stop of job id for the loop to make (see
// stopRequests.ask).
func (q *Launcher) askStop(id string, s *stop) <-chan struct{} {
	return q.stops.ask(id, s)
}

// runs reports whether the launcher runs containers.
func (q *Launcher) runs() bool { return q.engine != nil }

// logs copies container cid's output to w.
func (q *Launcher) logs(ctx context.Context, cid string, follow bool, w io.Writer) error {
	return q.engine.Logs(ctx, cid, follow, w)
}
