// Package run is the GPU queue's runtime, split by role: the Service the
// API calls (submit, list, cancel, hold, release, logs) over the ledger's
// job store; the Launcher, one goroutine that runs the pure scheduler on
// events (a submission, a cancel, a release, a job container's death, a
// change in use outside the queue, a time limit) and starts, stops and
// reconciles job containers through an Engine; the memory enforcer, which
// holds memory jobs to the GPU memory they declared; and the env store,
// which keeps the jobs' environment values out of the ledger. Each keeps
// its own state under its own lock; Queue wires them for one node.
package run

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// Engine runs job containers. *docker.Jobs implements it over the Docker
// Engine API.
type Engine interface {
	// Create creates the container of s, named s.Name; a name already
	// taken is an error wrapping container.ErrExists. Every method's
	// error wraps container.ErrUnavailable when the engine could not be
	// reached or could not serve: the engine's fault, not the job's.
	Create(ctx context.Context, s *spec.Spec) (id string, err error)
	Start(ctx context.Context, id string) error
	// Inspect returns the container; one that is gone is an error
	// wrapping container.ErrNotFound.
	Inspect(ctx context.Context, id string) (container.JobContainer, error)
	// Stop stops the container: SIGTERM, then a kill after grace.
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Remove removes the container by force; one that is gone is fine.
	Remove(ctx context.Context, id string) error
	// Logs copies the container's output to w, following it while it
	// runs when follow is set.
	Logs(ctx context.Context, id string, follow bool, w io.Writer) error
	// List returns every container labelled gpumeter.job, in any state.
	List(ctx context.Context) ([]container.JobContainer, error)
	// Ping reports whether the engine answers; the loop pings an engine
	// that went away until it does.
	Ping(ctx context.Context) error
	// Events sends the ids of job containers that died. It reconnects by
	// itself, sending "" after a reconnection (anything may have died
	// meanwhile), and is closed once ctx ends.
	Events(ctx context.Context) <-chan string
}

// ErrExists is wrapped by Engine.Create's error when the container's
// name is taken: the job's container was created before.
var ErrExists = container.ErrExists

// KindQueue is the audit kind of what the queue does by itself: start,
// time out, end or requeue a job.
const KindQueue = "queue"

// Config configures a Queue.
type Config struct {
	Store ledger.JobStore
	// Engine runs the containers; nil keeps and lists jobs and starts
	// none (Run returns at once).
	Engine  Engine
	Rules   spec.Rules
	Sched   queue.Config
	Passing spec.GPUPassing
	// Identity looks a user up in the host's passwd and group files.
	Identity         func(user string) (spec.Identity, error)
	Node             string
	DefaultTimeLimit time.Duration // 0: a request without one is refused
	StopGrace        time.Duration
	// PreemptGrace is how long a preempted job has between SIGTERM and
	// a kill (0: StopGrace); its container has it in
	// GPUMETER_PREEMPT_GRACE.
	PreemptGrace time.Duration
	MaxRequeue   int
	// RequeueOn are the causes that put a running job back in the queue
	// (config.RequeueCauses, as queue.requeue_on names them); nil is
	// every cause, an empty list none.
	RequeueOn        []string
	MaxStartAttempts int // 0: 1
	// LogRetention is how long an ended job's container (and its logs)
	// is kept before it is removed; 0 keeps it.
	LogRetention time.Duration
	Notify       []string // "start", "end" (config checked them): for every job
	// MemoryOverrunGrace is how long a memory job may stay over the GPU
	// memory it declared before it is stopped (0:
	// DefaultMemoryOverrunGrace); MemoryOverrunAction is stop (""
	// too) or warn, as config checked it.
	MemoryOverrunGrace  time.Duration
	MemoryOverrunAction config.OverrunAction
	// Standing gives each pass the fair share's factors, expected shares
	// and teams over budget; nil: everyone stands equal.
	Standing Standing
	// HighUsers may submit jobs of class high (queue.priority.high_users),
	// beside admins.
	HighUsers []string
	// OnEvent is called when a job starts or ends and its notify list
	// (its own plus Notify) names that event. It must not block for
	// long: the loop waits for it.
	OnEvent func(event string, j queue.Job)
	// Audited writes an event the store already committed (in a job's
	// own transaction) to the audit log's file too; nil: nothing more.
	Audited func(ctx context.Context, e audit.Event)
	// Fleet makes the queue one node of a fleet sharing the ledger's
	// queue (queue.fleet); nil: the node schedules its own GPUs alone.
	Fleet *FleetConfig
	// EnvDir keeps the environment values of jobs (0700 directory, 0600
	// files), which the ledger never holds; a job's file is removed when
	// the job ends.
	EnvDir string
	// StageDir is where a job's mount sources are bound for Docker
	// (internal/queue/stage): a 0700 directory the agent owns, in the
	// mount namespace dockerd uses. "": jobs with mounts are refused.
	StageDir string
	// StageRefusal, when set, says why this agent cannot stage mounts
	// (stage.Probe): jobs with mounts are refused at submit with it.
	StageRefusal string
	Logger       *slog.Logger
	Now          func() time.Time
}

// BadRequest is a request the queue cannot take as it is, naming the
// field at fault. The API answers it with a 400.
type BadRequest struct {
	Field string
	Text  string
}

func (e *BadRequest) Error() string { return e.Field + ": " + e.Text }

// StateError is an action on a job in a state that does not allow it.
// The API answers it with a 409.
type StateError struct {
	ID     string
	State  queue.State   // the state the job is in
	Want   []queue.State // the states the action needs
	Action string        // cancel, hold, release
}

func (e *StateError) Error() string {
	want := make([]string, len(e.Want))
	for i, s := range e.Want {
		want[i] = string(s)
	}
	return fmt.Sprintf("job %s is %s; %s needs it %s", e.ID, e.State, e.Action, strings.Join(want, " or "))
}

// Queue is the job queue of one node: its Service, which the API calls,
// and its Launcher, which runs the jobs' containers, wired in one
// process. The two share the job store, the settings and the env store;
// the service reaches the launcher only through launch (a wake, a stop, a
// job it ended, a container's logs), so that a scheduler may one day run
// on another node than the launcher.
type Queue struct {
	*Service
	*Launcher
}

// New returns a queue for cfg. It creates cfg.EnvDir when missing.
func New(cfg Config) (*Queue, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("queue: no job store")
	case cfg.Identity == nil:
		return nil, errors.New("queue: no identity lookup (host.passwd_file)")
	case cfg.EnvDir == "":
		return nil, errors.New("queue: no directory for the jobs' environment values")
	case cfg.DefaultTimeLimit < 0, cfg.StopGrace < 0, cfg.LogRetention < 0, cfg.MaxRequeue < 0, cfg.MaxStartAttempts < 0:
		return nil, errors.New("queue: default_time_limit, stop_grace, log_retention, max_requeue and max_start_attempts may not be negative")
	}
	requeueOn, err := requeueCauses(cfg.RequeueOn)
	if err != nil {
		return nil, err
	}
	if cfg.MemoryOverrunGrace < 0 {
		return nil, errors.New("queue.memory_overrun_grace may not be negative")
	}
	if cfg.Engine != nil {
		switch cfg.Passing {
		case spec.DeviceRequests, spec.CDI, spec.Env:
		default:
			return nil, fmt.Errorf("queue: gpu passing %q is not device_requests, cdi or env", cfg.Passing)
		}
	}
	if err := cfg.Rules.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.EnvDir, 0o700); err != nil {
		return nil, fmt.Errorf("queue: env dir: %w", err)
	}
	if err := os.Chmod(cfg.EnvDir, 0o700); err != nil {
		return nil, fmt.Errorf("queue: env dir: %w", err)
	}
	stageDir, stageRefusal, err := openStage(cfg)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	log = log.With("component", "queue")
	w := writer{store: cfg.Store, node: cfg.Node, now: now, audited: cfg.Audited}
	set := &settings{rules: cfg.Rules, sched: cfg.Sched, defaultTimeLimit: cfg.DefaultTimeLimit}
	env := &envStore{dir: cfg.EnvDir, log: log, now: now, keep: cfg.LogRetention}
	holds := &sync.Mutex{}
	l := &Launcher{
		writer: w, engine: cfg.Engine, log: log,
		passing: cfg.Passing, identity: cfg.Identity,
		stopGrace: cfg.StopGrace, preemptGrace: cmp.Or(max(cfg.PreemptGrace, 0), cfg.StopGrace), maxRequeue: cfg.MaxRequeue, requeueOn: requeueOn, maxStartAttempts: max(cfg.MaxStartAttempts, 1),
		logRetention: cfg.LogRetention, notify: append([]string(nil), cfg.Notify...),
		onEvent: cfg.OnEvent, stage: stageDir, stageRefusal: stageRefusal, standing: cfg.Standing,
		settings: set, env: env, holds: holds,
		wake:    make(chan struct{}, 1),
		stops:   newStopRequests(),
		metrics: newMetrics(),
		ranks:   newRanking(),
		deps:    newDepCache(),
	}
	if cfg.Fleet != nil {
		switch {
		case cfg.Fleet.Store == nil:
			return nil, errors.New("queue.fleet: no fleet store (the ledger)")
		case cfg.Fleet.Instance == "":
			return nil, errors.New("queue.fleet: no agent instance to hold the scheduler lease under")
		case cfg.Fleet.Takeover <= 0:
			return nil, errors.New("queue.fleet: ledger.lease_takeover must be positive")
		}
		l.fleet = &fleetState{FleetConfig: *cfg.Fleet}
		l.metrics.setLeader(false)
	}
	l.memory = &memoryEnforcer{
		writer: w, onEvent: cfg.OnEvent, stops: l.stops, poke: l.poke,
		grace: cfg.MemoryOverrunGrace, action: cmp.Or(cfg.MemoryOverrunAction, config.OverrunStop),
		jobs: memoryJobs{}, overruns: map[string]*overrun{},
	}
	if l.memory.grace == 0 {
		l.memory.grace = DefaultMemoryOverrunGrace
	}
	s := &Service{
		writer: w, log: log, identity: cfg.Identity, highUsers: append([]string(nil), cfg.HighUsers...),
		stageRefusal: stageRefusal, notices: cfg.OnEvent != nil, fleet: cfg.Fleet != nil,
		settings: set, env: env, holds: holds, launch: l, ranks: l.ranks,
	}
	if cfg.Fleet != nil {
		s.fleetStore, s.takeover = cfg.Fleet.Store, cfg.Fleet.Takeover
	}
	return &Queue{Service: s, Launcher: l}, nil
}

// Reload takes the settings a SIGHUP may change, and wakes the loop: a
// higher cap or a new pattern may let a job start.
func (q *Queue) Reload(rules spec.Rules, sched queue.Config, defaultTimeLimit time.Duration) error {
	if err := rules.Validate(); err != nil {
		return err
	}
	if defaultTimeLimit < 0 {
		return errors.New("queue.default_time_limit may not be negative")
	}
	q.Launcher.settings.reload(rules, sched, defaultTimeLimit)
	q.Launcher.poke()
	return nil
}
