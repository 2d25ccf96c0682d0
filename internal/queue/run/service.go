package run

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// Service is what the API calls: submit, list, cancel, hold, release and
// logs. It works on the job store, and asks the launcher only what
// launch offers, so that the two may one day run on different nodes.
type Service struct {
	writer
	log *slog.Logger

	// fixed settings
	identity     func(string) (spec.Identity, error)
	highUsers    []string
	stageRefusal string // why jobs with mounts are refused; "": they are not
	notices      bool   // a job's start and end can be notified (Config.OnEvent)
	fleet        bool   // the node is one of a fleet (Config.Fleet)
	// fleetStore and takeover read the fleet's nodes for what a job may
	// ask of any of them; nil on one node.
	fleetStore ledger.Fleet
	takeover   time.Duration

	settings *settings
	env      *envStore
	// holds orders a hold and a start intent of the same job: setHeld
	// and the launcher's start take it.
	holds  *sync.Mutex
	launch launch
	// ranks is the launcher's last pass, which says why each queued job
	// waits.
	ranks *ranking
}

// launch is what the service asks of the launcher: all it knows of it
// besides the job store they share.
type launch interface {
	// poke wakes the launcher for a pass, without blocking.
	poke()
	// submitted wakes it, without blocking, for a job queued, where the
	// launcher places jobs.
	submitted()
	// askStop asks for a stop of job id's container, and returns a
	// channel closed once the job has ended.
	askStop(id string, s *stop) <-chan struct{}
	// jobEnded is told of a job the service ended itself: a queued job
	// cancelled, or any job of a queue that runs no containers.
	jobEnded(j queue.Job)
	// runs reports whether the launcher runs containers (has an Engine).
	runs() bool
	// logs copies container cid's output to w, following it when follow
	// is set.
	logs(ctx context.Context, cid string, follow bool, w io.Writer) error
}
