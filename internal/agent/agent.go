// Package agent wires the sources, the sampler, the meter and the sinks of
// `gpumeter serve`, and owns every goroutine they run on.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/cgroup"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/docker"
	"github.com/gpumeter/gpumeter/internal/exporter"
	"github.com/gpumeter/gpumeter/internal/gpuhistory"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/backend"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/policy"
	"github.com/gpumeter/gpumeter/internal/queue/fairshare"
	"github.com/gpumeter/gpumeter/internal/queue/run"
	"github.com/gpumeter/gpumeter/internal/record"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sim"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// ErrNoDriver is returned when no GPU source was chosen and NVML could not
// be loaded.
var ErrNoDriver = errors.New("no NVIDIA driver found")

// The agent wires the policy engine to Docker and to the audit log; the
// checks live here so that neither side imports the other.
var (
	_ policy.Stopper    = docker.Stopper{}
	_ policy.Containers = (*docker.Inventory)(nil)
	_ policy.Auditor    = (*audit.Log)(nil)
)

// Agent is a running `gpumeter serve`.
type Agent struct {
	cfg     config.Config
	log     *slog.Logger
	version string
	node    string // the node this agent meters

	sampler *sampler.Sampler
	// metrics is the /metrics handler that Run renders on every tick
	// (see exporter.MetricsHandler.Run); nil until Handler is built.
	metrics  atomic.Pointer[exporter.MetricsHandler]
	docker   *docker.Inventory
	store    ledger.Ledger
	lease    ledger.Lease  // this agent's lease of its node in store
	takeover time.Duration // how long the lease may be silent (ledger.lease_takeover)
	recorder *record.Recorder
	waste    *liveWaste
	policy   *policy.Engine
	// queue is the GPU job queue, nil when queue.enabled is off;
	// jobNotices sends its job events to the webhook.
	queue      *run.Queue
	jobNotices *policy.JobNotifier
	// digest sends the week's advice to the webhook (advise.digest).
	digest    *policy.AdviceDigest
	history   *gpuhistory.Ring   // the GPUs' figures of the last hour
	fair      *fairshare.Service // the queue's fair share and budgets
	reloadMu  sync.Mutex
	closers   []func() error
	listener  net.Listener
	socket    net.Listener // nil when api.socket is off
	sec       security
	audit     *audit.Log
	auditFile *audit.File
	dataFiles *dataFiles // once checked, see files; the demo's own from the start
	// placementWindow is queue.placement_window, read once: how far back
	// the queue's target placement averages each GPU's utilisation in
	// history.
	placementWindow time.Duration
	// tempDir is the demo's directory of its own, its data_dir, which
	// Close removes; "" for every other source.
	tempDir string
	// socketOptional has the agent serve without the Unix socket when it
	// cannot make one, as the demo does: it is reached with its token
	// over TCP, and a real agent may hold the socket.
	socketOptional bool
	// noDataDir is set when the data directory cannot be written and
	// nothing needs it: no audit log file, no socket in it.
	noDataDir bool

	// reloadMu (above) orders a reload, which reopens the audit file, and
	// Close, which closes it; Close sets closed under it.
	closed bool
	// reloads and load are what ReloadOn set: Run reloads the config
	// load reads on each value from reloads.
	reloads <-chan os.Signal
	load    func() (config.Config, error)

	// dockerClient is the one connection to Docker that the inventory and
	// the queue's job containers share; nil when docker is off.
	dockerClient *docker.Client
}

// New builds the agent from cfg: it opens the GPU source and prepares the
// inventories, but starts nothing.
func New(ctx context.Context, cfg config.Config, logger *slog.Logger, version string) (_ *Agent, err error) {
	// The demo is decided here, once. It charges the demo's prices when
	// the config sets none, makes itself an admin token, may serve
	// without the socket, and plays made-up processes, whose pids are no
	// host process's. Its made-up usage, findings and jobs must not mix
	// with a real ledger (a shared PostgreSQL one least of all) or audit
	// log: its data_dir is a directory of its own for as long as it runs,
	// holding a SQLite ledger new at every start.
	demo := cfg.Source == "demo"
	if demo {
		cfg.Cost = withDemoPrices(cfg.Cost)
		// The demo keeps to a ledger of its own; it joins no fleet.
		cfg.Queue.Fleet = false
	}
	a := &Agent{cfg: cfg, log: logger, version: version, socketOptional: demo}
	defer func() {
		if err != nil {
			a.Close() // the ledger too, giving back its lease
		}
	}()
	ledgerPath, ledgerDSN, hostResolver := cfg.LedgerPath(), cfg.LedgerDSN, !demo
	if demo {
		dir, err := os.MkdirTemp("", "gpumeter-demo")
		if err != nil {
			return nil, err
		}
		a.tempDir = dir
		a.dataFiles = &dataFiles{dir: dir, mode: 0o600, gid: -1}
		ledgerPath, ledgerDSN = filepath.Join(dir, "ledger.db"), ""
	}
	users := cgroup.NewUsers(cfg.PasswdFile)
	procs := cgroup.NewResolver(cfg.ProcRoot, users)
	a.closers = append(a.closers, procs.Close)
	host := &hostProcs{resolver: procs, users: users, procRoot: cfg.ProcRoot, cgroupRoot: cfg.CgroupRoot}

	node := cfg.Hostname
	var (
		gpus        sampler.GPUSource
		gpuName     string
		inventories []sampler.Named
		resolvers   []sampler.ProcessResolver
		idle        = map[string]float64{}
		useDocker   = cfg.DockerEnabled
		simSrc      *sim.Source // plays the real containers' labels
		simulated   bool        // a scenario plays the GPUs
	)
	switch cfg.Source {
	case "demo", "sim":
		simulated = true
		sc := sim.Demo()
		if cfg.Source == "sim" {
			var err error
			if sc, err = sim.Load(cfg.SimFile); err != nil {
				return nil, err
			}
		}
		src := sim.NewSource(sc, true)
		wired := sampler.WithSimulated(sampler.Config{}, src)
		gpus, gpuName, inventories, resolvers = wired.GPUs, wired.GPUName, wired.Inventories, wired.Resolvers
		idle = sc.IdleWatts()
		if node == "" {
			node = sc.Node
		}
		// A scenario plays its own containers; Docker is needed only for
		// the real processes its pid: entries name, for the real
		// containers whose labels it plays, and for the queue's jobs.
		if sc.RealContainers {
			if !useDocker {
				return nil, fmt.Errorf("%s: docker.containers: from_labels plays real Docker containers, but docker.enabled is false", sc.Name)
			}
			simSrc = src
		}
		useDocker = useDocker && (hasPIDs(sc) || sc.RealContainers || cfg.Queue.Enabled)
	default:
		src, closer, err := openNVML(cfg.NVMLLibrary, logger)
		if err != nil {
			return nil, fmt.Errorf("%w (%v): on a host without a GPU, run `gpumeter serve --demo` for the built-in demo or `gpumeter serve --sim FILE` to play a scenario", ErrNoDriver, err)
		}
		a.closers = append(a.closers, closer)
		gpus, gpuName = src, "nvml"
	}
	if node == "" {
		node, _ = os.Hostname()
	}
	// Set before the parts that read it: the stoppers the policy and the
	// API get tell the queue of this node's jobs alone.
	a.node = node
	for k, v := range cfg.IdlePower {
		idle[k] = v
	}
	if useDocker {
		cli, err := docker.NewClient(cfg.DockerHost, logger)
		if err != nil {
			return nil, fmt.Errorf("docker: %w", err)
		}
		a.closers = append(a.closers, cli.Close)
		inv := docker.New(cli, docker.Config{
			UserLabel:    cfg.UserLabel,
			TeamLabel:    cfg.TeamLabel,
			ProjectLabel: cfg.ProjectLabel,
			Procs:        host,
			Logger:       logger,
			Keep:         cfg.DockerKeep,
		})
		a.docker, a.dockerClient = inv, cli
		inventories = append(inventories, sampler.Named{Name: "docker", Inventory: inv})
		if simSrc != nil {
			simSrc.PlayContainers(inv, logger)
		}
	}
	if hostResolver {
		resolvers = append(resolvers, host)
	}
	use, err := a.useDataDir(cfg)
	if err != nil {
		return nil, err
	}
	a.noDataDir = !use
	var onTick func(*sampler.Tick)
	if cfg.LedgerEnabled {
		if ledgerDSN == "" {
			files, err := a.files()
			if err != nil {
				return nil, err
			}
			if err := files.ensureLedger(ledgerPath); err != nil {
				return nil, err
			}
		}
		store, err := backend.Open(ctx, ledgerDSN, ledgerPath, true)
		if err != nil {
			return nil, fmt.Errorf("open the ledger: %w", err)
		}
		a.store = store
		// The lease comes before any write: a second agent for this node
		// stops here, having written nothing.
		takeover := cfg.LeaseTakeover
		if takeover == 0 {
			takeover = record.DefaultLeaseTakeover(cfg.FlushInterval)
		}
		a.takeover = takeover
		if a.lease, err = record.Acquire(ctx, store, node, takeover); err != nil {
			return nil, err
		}
		a.recorder = record.New(record.Config{
			Lease:           a.lease,
			Store:           store,
			Node:            node,
			FlushInterval:   cfg.FlushInterval,
			MaxRows:         cfg.MaxPendingRows,
			MinuteRetention: cfg.MinuteRetention,
			HourRetention:   cfg.HourRetention,
			Logger:          logger,
		})
		onTick = a.recorder.Add
	}
	if err := a.initSecurity(demo); err != nil {
		return nil, err
	}
	if _, err := a.openAudit(node); err != nil {
		return nil, err
	}
	// The ring is on the chain before the queue, which reads the tick's
	// utilisation back from it.
	a.history = gpuhistory.New(cfg.Interval)
	onTick = chain(onTick, a.history.Add)
	if cfg.Queue.Enabled {
		if err := a.newQueue(ctx, cfg, node, simulated); err != nil {
			return nil, err
		}
		onTick = chain(onTick, a.observeQueue)
	}
	if cfg.WasteEnabled {
		a.waste = newLiveWaste(waste.LiveConfig{Rules: cfg.Waste, Cost: cost.Model(cfg.Cost)})
		onTick = chain(onTick, a.waste.Add)
		a.newPolicy(cfg)
	}
	if cfg.AdviseDigest == "weekly" && a.store != nil {
		a.newDigest(cfg)
	}
	// Last, so that the render sees what the tick did to the queue.
	onTick = chain(onTick, a.renderMetrics)
	a.sampler = sampler.New(sampler.Config{
		OnTick:      onTick,
		Node:        node,
		Interval:    cfg.Interval,
		GPUs:        gpus,
		GPUName:     gpuName,
		Inventories: inventories,
		Resolvers:   resolvers,
		Meter:       meter.New(meter.Config{IdleWatts: idle}),
		Logger:      logger,
	})
	return a, nil
}

// renderMetrics asks the /metrics handler to render the new tick.
func (a *Agent) renderMetrics(*sampler.Tick) {
	if m := a.metrics.Load(); m != nil {
		m.Notify()
	}
}

// chain calls first, then next, on every tick; first may be nil.
func chain(first, next func(*sampler.Tick)) func(*sampler.Tick) {
	if first == nil {
		return next
	}
	return func(t *sampler.Tick) {
		first(t)
		next(t)
	}
}

func hasPIDs(sc *sim.Scenario) bool {
	for _, c := range sc.Containers {
		if c.PID != 0 {
			return true
		}
	}
	return false
}

// Sampler gives access to the live ticks.
func (a *Agent) Sampler() *sampler.Sampler { return a.sampler }

// openAudit opens the audit log the policy and the API write to: a JSON
// lines file under the data directory, and the ledger when there is one.
func (a *Agent) openAudit(node string) (*audit.File, error) {
	lc := audit.LogConfig{Node: node, Logger: a.log.With("part", "audit")}
	if !a.noDataDir {
		files, err := a.files()
		if err != nil {
			return nil, err
		}
		f, err := audit.OpenFile(filepath.Join(files.dir, "audit.jsonl"))
		if err != nil {
			return nil, err
		}
		if err := f.Secure(files.secure); err != nil {
			f.Close()
			return nil, fmt.Errorf("audit log: %w", err)
		}
		a.closers = append(a.closers, f.Close)
		lc.File = f
	}
	if a.store != nil {
		lc.Store = a.store
	}
	a.audit, a.auditFile = audit.NewLog(lc), lc.File
	return lc.File, nil
}
