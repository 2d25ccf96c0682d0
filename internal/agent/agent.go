// Package agent wires the sources, the sampler, the meter and the sinks of
// `gpumeter serve`, and owns every goroutine they run on.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/cgroup"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/docker"
	"github.com/gpumeter/gpumeter/internal/exporter"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/backend"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/policy"
	"github.com/gpumeter/gpumeter/internal/record"
	"github.com/gpumeter/gpumeter/internal/report"
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
	_ policy.Stopper    = (*docker.Inventory)(nil)
	_ policy.Containers = (*docker.Inventory)(nil)
	_ policy.Auditor    = (*audit.Log)(nil)
)

// Agent is a running `gpumeter serve`.
type Agent struct {
	cfg     config.Config
	log     *slog.Logger
	version string
	node    string // the node this agent meters

	sampler   *sampler.Sampler
	docker    *docker.Inventory
	store     ledger.Store
	lease     ledger.Lease // this agent's lease of its node in store
	recorder  *record.Recorder
	waste     *liveWaste
	policy    *policy.Engine
	reloadMu  sync.Mutex
	closers   []func() error
	listener  net.Listener
	socket    net.Listener // nil when api.socket is off
	sec       security
	audit     *audit.Log
	auditFile *audit.File
	dataFiles *dataFiles // once checked, see files
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
}

// New builds the agent from cfg: it opens the GPU source and prepares the
// inventories, but starts nothing.
func New(ctx context.Context, cfg config.Config, logger *slog.Logger, version string) (_ *Agent, err error) {
	if cfg.Source == "demo" {
		cfg.Cost = withDemoPrices(cfg.Cost)
	}
	a := &Agent{cfg: cfg, log: logger, version: version}
	defer func() {
		if err != nil {
			a.Close() // the ledger too, giving back its lease
		}
	}()
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
	)
	switch cfg.Source {
	case "demo", "sim":
		sc := sim.Demo()
		if cfg.Source == "sim" {
			var err error
			if sc, err = sim.Load(cfg.SimFile); err != nil {
				return nil, err
			}
		}
		wired := sim.NewSource(sc, true).SamplerConfig(sampler.Config{})
		gpus, gpuName, inventories, resolvers = wired.GPUs, wired.GPUName, wired.Inventories, wired.Resolvers
		idle = sc.IdleWatts()
		if node == "" {
			node = sc.Node
		}
		// A scenario plays its own containers; Docker is needed only for
		// the real processes its pid: entries name.
		useDocker = useDocker && hasPIDs(sc)
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
	for k, v := range cfg.IdlePower {
		idle[k] = v
	}
	if useDocker {
		inv, err := docker.New(docker.Config{
			Host:         cfg.DockerHost,
			UserLabel:    cfg.UserLabel,
			TeamLabel:    cfg.TeamLabel,
			ProjectLabel: cfg.ProjectLabel,
			Procs:        host,
			Logger:       logger,
			Keep:         cfg.DockerKeep,
		})
		if err != nil {
			return nil, fmt.Errorf("docker: %w", err)
		}
		a.docker = inv
		inventories = append(inventories, sampler.Named{Name: "docker", Inventory: inv})
	}
	if cfg.Source != "demo" {
		resolvers = append(resolvers, host)
	}
	if cfg.Source != "demo" {
		use, err := a.useDataDir(cfg)
		if err != nil {
			return nil, err
		}
		a.noDataDir = !use
	}
	var onTick func(*sampler.Tick)
	if cfg.LedgerEnabled {
		path := cfg.LedgerPath()
		dsn := cfg.LedgerDSN
		if cfg.Source == "demo" {
			// The demo's made-up usage must not mix with a real ledger,
			// a shared PostgreSQL one least of all: it gets a SQLite
			// ledger of its own for as long as it runs.
			dsn = ""
			dir, err := os.MkdirTemp("", "gpumeter-demo")
			if err != nil {
				return nil, err
			}
			a.closers = append(a.closers, func() error { return os.RemoveAll(dir) })
			path = filepath.Join(dir, "ledger.db")
		}
		if dsn == "" && cfg.Source != "demo" {
			files, err := a.files()
			if err != nil {
				return nil, err
			}
			if err := files.ensureLedger(path); err != nil {
				return nil, err
			}
		}
		store, err := backend.Open(ctx, dsn, path, true)
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
	if err := a.initSecurity(cfg.Source == "demo"); err != nil {
		return nil, err
	}
	if _, err := a.openAudit(cfg, node); err != nil {
		return nil, err
	}
	if cfg.WasteEnabled {
		a.waste = newLiveWaste(waste.LiveConfig{Rules: cfg.Waste, Cost: cost.Model(cfg.Cost)})
		onTick = chain(onTick, a.waste.Add)
		a.newPolicy(cfg)
	}
	a.node = node
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

// Listen opens the listeners, so that a caller learns a bad address
// before Run and can read the chosen port (":0" in tests).
func (a *Agent) Listen() (net.Addr, error) {
	if err := a.listen(); err != nil {
		return nil, err
	}
	return a.listener.Addr(), nil
}

// Socket is the Unix socket the agent serves on, or "".
func (a *Agent) Socket() string {
	if a.socket == nil {
		return ""
	}
	return a.socket.Addr().String()
}

// openAudit opens the audit log the policy and the API write to: a JSON
// lines file under the data directory, and the ledger when there is one.
func (a *Agent) openAudit(cfg config.Config, node string) (*audit.File, error) {
	dir := cfg.DataDir
	if cfg.Source == "demo" {
		// The demo's made-up findings stay out of a real audit log.
		d, err := os.MkdirTemp("", "gpumeter-demo-audit")
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, func() error { return os.RemoveAll(d) })
		dir = d
	}
	lc := audit.LogConfig{Node: node, Logger: a.log.With("part", "audit")}
	if !a.noDataDir || cfg.Source == "demo" {
		files := dataFiles{dir: dir, mode: 0o600, gid: -1} // the demo's own directory
		if cfg.Source != "demo" {
			var err error
			if files, err = a.files(); err != nil {
				return nil, err
			}
		}
		f, err := audit.OpenFile(filepath.Join(dir, "audit.jsonl"))
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
	if as, ok := a.store.(ledger.AuditStore); ok {
		lc.Store = as
	}
	a.audit, a.auditFile = audit.NewLog(lc), lc.File
	return lc.File, nil
}

// Handler is the agent's HTTP surface: /metrics, the API and the page.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	var extra []prometheus.Collector
	var reports server.Reports
	if a.recorder != nil {
		extra = append(extra, a.recorder)
		reports = a
	}
	var findings server.Waste
	if a.waste != nil {
		extra = append(extra, a.waste)
		findings = a.waste
	}
	ac := server.Config{
		Ticks:   a.sampler,
		Reports: reports,
		Waste:   findings,
		Auth:    a.sec.auth.Load,
		Limiter: a.sec.limiter.Load,
		Limits: server.Limits{
			MaxBodyBytes:    int64(a.cfg.API.MaxBodyBytes),
			MaxReportWindow: a.cfg.API.MaxReportWindow,
			MaxReportRows:   a.cfg.API.MaxReportRows,
		},
		Logger: a.log.With("part", "api"),
		Node:   a.node,
	}
	if a.docker != nil {
		ac.Stopper = a.docker
	}
	if a.audit != nil {
		extra = append(extra, a.audit)
		ac.Audit = a.audit
	}
	apiHandler := server.New(ac)
	mux.Handle("GET /metrics", a.sec.guardOpen(exporter.Handler(a.sampler, a.version, a.log.With("part", "exporter"), extra...)))
	mux.Handle("GET /healthz", a.sec.guardOpen(apiHandler))
	mux.Handle("/", apiHandler)
	return server.LimitHeaders(mux)
}

// Report reads the ledger for the API. Rows still in memory are not in
// it: a report is at most one flush interval behind the live view. A price
// for a GPU model that neither the ledger nor this node's GPUs know gives
// an error wrapping cost.ErrInvalidCost.
func (a *Agent) Report(ctx context.Context, r report.Request) (*report.Report, error) {
	prices := cost.Model(a.cfg.Cost)
	models, err := report.Models(ctx, a.store)
	if err == nil {
		var live []string
		if t := a.sampler.Latest(); t != nil {
			for _, d := range t.Sample.Devices {
				live = append(live, d.Model)
			}
		}
		if verr := prices.Check(models, live); verr != nil {
			err = fmt.Errorf("%w: cost: %w", cost.ErrInvalidCost, verr)
		}
	}
	var rep *report.Report
	if err == nil {
		rep, err = report.Run(ctx, a.store, r, prices)
	}
	if err != nil {
		a.log.Warn("usage report", "err", err)
	}
	return rep, err
}

// Close releases what New opened: the ledger, the GPU source and the
// demo's own ledger. Run does it when it returns; Close is for an agent
// that never gets to Run, one whose Listen failed, say. It waits for a
// reload under way, and refuses those that come after it; closing again
// does nothing.
func (a *Agent) Close() {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	if a.store != nil {
		release, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := record.Release(release, a.store, a.lease); err != nil {
			a.log.Warn("release the node's lease", "err", err)
		}
		cancel()
		if err := a.store.Close(); err != nil {
			a.log.Warn("close the ledger", "err", err)
		}
	}
	a.close()
}

func (a *Agent) close() {
	for _, c := range a.closers {
		if err := c(); err != nil {
			a.log.Warn("close", "err", err)
		}
	}
	a.closers = nil
}

// ReloadOn has Run reload the config on each value from signals (serve
// passes its SIGHUPs): load reads the config anew, as it was read at the
// start, and Run puts it in force as Reload does. A config that cannot be
// read or does not pass is audited and logged, and the old one stays.
// Call it before Run.
func (a *Agent) ReloadOn(signals <-chan os.Signal, load func() (config.Config, error)) {
	a.reloads, a.load = signals, load
}

// Run serves until ctx ends, then shuts every part down and returns. The
// parts run side by side; the first to fail stops them all, and Run
// returns its error.
func (a *Agent) Run(ctx context.Context) error {
	if a.listener == nil {
		if _, err := a.Listen(); err != nil {
			a.Close()
			return err
		}
	}
	srv := &http.Server{
		Handler:           a.Handler(),
		ReadHeaderTimeout: a.cfg.API.ReadHeaderTimeout,
		ReadTimeout:       a.cfg.API.ReadTimeout,
		WriteTimeout:      a.cfg.API.ReadTimeout + time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    server.ServerMaxHeaderBytes, // server.LimitHeaders enforces the limit, in JSON
		ConnContext:       auth.ConnContext,
		ErrorLog:          slog.NewLogLogger(a.log.With("part", "http").Handler(), slog.LevelDebug),
	}
	g, ctx := errgroup.WithContext(ctx)
	if a.docker != nil {
		g.Go(func() error {
			if err := a.docker.Run(ctx); err != nil {
				return fmt.Errorf("docker inventory: %w", err)
			}
			return nil
		})
	}
	// The recorder stops only after the sampler has, so that its final
	// flush holds the last tick too.
	recCtx, stopRecorder := context.WithCancel(context.Background())
	defer stopRecorder()
	if a.recorder != nil {
		g.Go(func() error {
			err := a.recorder.Run(recCtx)
			var fenced *record.FencedError
			switch {
			case errors.As(err, &fenced):
				// Another agent writes this node now: stop, and exit
				// non-zero, rather than meter what nobody will book.
				return fmt.Errorf("ledger: %w", err)
			case err != nil:
				a.log.Error("final ledger write", "err", err)
			}
			return nil
		})
	}
	// The audit log, too, stops after the server has, so that it keeps
	// the last calls.
	auditCtx, stopAudit := context.WithCancel(context.Background())
	defer stopAudit()
	if a.audit != nil {
		g.Go(func() error {
			_ = a.audit.Run(auditCtx)
			return nil
		})
	}
	if a.policy != nil {
		g.Go(func() error {
			if err := a.policy.Run(ctx); err != nil {
				a.log.Error("policy", "err", err)
			}
			return nil
		})
	}
	if a.reloads != nil {
		g.Go(func() error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-a.reloads:
					a.reloadFrom(a.load)
				}
			}
		})
	}
	g.Go(func() error {
		defer stopRecorder()
		if err := a.sampler.Run(ctx); err != nil {
			return fmt.Errorf("sampler: %w", err)
		}
		return nil
	})
	for _, ln := range []net.Listener{a.listener, a.socket} {
		if ln == nil {
			continue
		}
		g.Go(func() error {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http on %s: %w", ln.Addr(), err)
			}
			return nil
		})
	}
	a.log.Info("serving", "listen", a.listener.Addr().String(), "interval", a.cfg.Interval.String())
	<-ctx.Done()
	shutdown, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if err := srv.Shutdown(shutdown); err != nil {
		// Requests still running (a report on a ledger that does not
		// answer, say) are cut off: closing their connections ends their
		// contexts, so that they let go of the ledger before it closes.
		_ = srv.Close()
	}
	stopAudit()
	err := g.Wait()
	a.Close()
	return err
}

// hostProcs adapts the host's /proc and cgroups to what the sampler and
// the Docker inventory need.
type hostProcs struct {
	resolver   *cgroup.Resolver
	users      *cgroup.Users
	procRoot   string
	cgroupRoot string
}

// Resolve attributes a real host process to its container or Unix user.
func (h *hostProcs) Resolve(pid uint32) (container.Owner, bool, error) {
	p, err := h.resolver.Resolve(pid)
	if err != nil {
		return container.Owner{}, false, err
	}
	if p.Ref.ContainerID != "" {
		return container.Owner{Kind: container.OwnerContainer, ID: p.Ref.ContainerID}, true, nil
	}
	return container.Owner{Kind: container.OwnerHost, ID: p.User}, true, nil
}

func (h *hostProcs) Prune(keep func(uint32) bool) { h.resolver.Prune(keep) }

func (h *hostProcs) ProcessUser(pid int) (string, error) {
	p, err := h.resolver.Resolve(uint32(pid))
	if err != nil {
		return "", err
	}
	return p.User, nil
}

func (h *hostProcs) UserName(uid int) string { return h.users.Name(uid) }

func (h *hostProcs) Stats(pid int) (float64, uint64, error) {
	st, err := cgroup.ReadStats(h.procRoot, h.cgroupRoot, pid)
	return st.CPUSeconds, st.MemoryBytes, err
}
