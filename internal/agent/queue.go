// The GPU job queue: built from queue.* when it is on, fed the GPUs and
// the outside use of every tick, its job events handed to the webhook,
// and its figures to /metrics.

package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/cgroup"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/docker"
	"github.com/gpumeter/gpumeter/internal/exporter"
	"github.com/gpumeter/gpumeter/internal/hostid"
	"github.com/gpumeter/gpumeter/internal/policy"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/fairshare"
	"github.com/gpumeter/gpumeter/internal/queue/run"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/queue/stage"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// newQueue builds the queue; New calls it once the ledger, the audit log
// and the Docker inventory are there.
func (a *Agent) newQueue(ctx context.Context, cfg config.Config, node string, simulated bool) error {
	if a.store == nil {
		return errors.New("queue.enabled: the queue keeps its jobs in the ledger; set ledger.enabled")
	}
	jobs := a.store
	if a.docker == nil {
		return errors.New("queue.enabled: the queue runs jobs in Docker; set docker.enabled")
	}
	rules, sched, err := queueRules(cfg.Queue, node, cfg.UserLabel, cfg.TeamLabel)
	if err != nil {
		return err
	}
	rules.ExemptLabels = exemptKeys(cfg.Policy.Exempt.Labels)
	if rules.MaxCPUs < cfg.Queue.MaxCPUs {
		a.log.Info("queue.max_cpus is more than this host has; jobs get at most its CPUs", "max_cpus", cfg.Queue.MaxCPUs, "cpus", rules.MaxCPUs)
	}
	if rules.MaxOpenFiles < cfg.Queue.MaxOpenFiles {
		a.log.Info("queue.max_open_files is more than this host allows the agent; jobs get at most its hard limit", "max_open_files", cfg.Queue.MaxOpenFiles, "limit", rules.MaxOpenFiles)
	}
	engine := docker.NewJobs(a.dockerClient, node, a.log.With("part", "queue-docker"))
	var jobEngine run.Engine = engine
	if cfg.Queue.Network == config.NetworkIsolated {
		if err := a.jobsNetwork(ctx, engine, rules.Network); err != nil {
			return err
		}
		jobEngine = docker.IsolatedJobs{Jobs: engine}
	}
	where := cfg.LedgerPath()
	if cfg.LedgerDSN != "" {
		where = "PostgreSQL"
	}
	// The demo's ledger, in its own directory, is new at every start.
	if a.tempDir == "" {
		if err := checkJobContainers(ctx, jobs, engine, node, where, a.log); err != nil {
			return err
		}
	}
	passing, err := resolvePassing(ctx, cfg.Queue.GPUPassing, simulated, engine.GPUSupport)
	if err != nil {
		return err
	}
	if passing == spec.Env && !simulated {
		a.log.Warn("queue.gpu_passing env: jobs get their GPUs only from NVIDIA_VISIBLE_DEVICES, which works only where nvidia is Docker's default runtime")
	}
	envDir, err := a.jobEnvDir()
	if err != nil {
		return err
	}
	// Mounts are staged beside the env values, under data_dir; whether
	// the binds reach dockerd is probed once, here.
	stageDir := filepath.Join(filepath.Dir(envDir), "stage")
	stageRefusal := stage.Probe(filepath.Dir(envDir), dockerSocket(cfg.DockerHost))
	if stageRefusal != "" && len(cfg.Queue.MountRoots) > 0 {
		a.log.Warn("queue: jobs with mounts are refused", "why", stageRefusal)
	}
	if cfg.Policy.Webhook.URL != "" {
		var auditor policy.Auditor
		if a.audit != nil {
			auditor = a.audit
		}
		a.jobNotices = policy.NewJobNotifier(policy.JobNotifierConfig{
			Webhook: cfg.Policy.Webhook, Audit: auditor, Logger: a.log.With("part", "queue-notify"),
		})
	}
	a.fair = fairshare.NewService(fairshare.NewCache(a.store, fairshare.SettingsOf(cfg.Queue), a.log.With("part", "fairshare"), nil), a.store)
	passwd, group := cfg.PasswdFile, cfg.GroupFile
	users := cgroup.NewUsers(passwd)
	rc := run.Config{
		Store:   jobs,
		Engine:  jobEngine,
		Rules:   rules,
		Sched:   sched,
		Passing: passing,
		Identity: func(user string) (spec.Identity, error) {
			name := user
			if n, ok := strings.CutPrefix(user, "uid:"); ok {
				// An admin on the socket is known by uid: the job runs
				// as the passwd entry of that uid.
				uid, err := strconv.Atoi(n)
				if err != nil {
					return spec.Identity{}, fmt.Errorf("caller %q: not a uid", user)
				}
				name = users.Name(uid)
			}
			id, err := hostid.Lookup(passwd, group, name)
			if err != nil {
				return spec.Identity{}, err
			}
			return spec.Identity{UID: id.UID, GID: id.GID, Groups: id.Groups, User: user}, nil
		},
		Node:                node,
		DefaultTimeLimit:    cfg.Queue.DefaultTimeLimit,
		StopGrace:           cfg.Queue.StopGrace,
		PreemptGrace:        cfg.Queue.PreemptGrace,
		MaxRequeue:          cfg.Queue.MaxRequeue,
		RequeueOn:           append([]string{}, cfg.Queue.RequeueOn...), // empty: none, not nil's every cause
		MaxStartAttempts:    cfg.Queue.MaxStartAttempts,
		LogRetention:        cfg.Queue.LogRetention,
		Notify:              cfg.Queue.Notify,
		EnvDir:              envDir,
		StageDir:            stageDir,
		StageRefusal:        stageRefusal,
		MemoryOverrunGrace:  cfg.Queue.MemoryOverrunGrace,
		MemoryOverrunAction: cfg.Queue.MemoryOverrunAction,
		Standing:            a.fair.Standing,
		HighUsers:           cfg.Queue.Priority.HighUsers,
		Logger:              a.log.With("part", "queue"),
	}
	if cfg.Queue.Fleet && cfg.Queue.FleetCAFile != "" {
		pem, err := os.ReadFile(cfg.Queue.FleetCAFile)
		if err != nil {
			return fmt.Errorf("queue.fleet_ca_file: %w", err)
		}
		a.fleetRoots = x509.NewCertPool()
		if !a.fleetRoots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("queue.fleet_ca_file %s: no PEM certificate in it", cfg.Queue.FleetCAFile)
		}
	}
	if cfg.Queue.Fleet {
		rc.Fleet = &run.FleetConfig{Store: a.store, Instance: a.lease.Instance, Takeover: a.takeover,
			AgentVersion: a.version, API: cfg.Queue.FleetAPI, Images: cfg.Queue.Images}
	}
	if a.jobNotices != nil {
		notices := a.jobNotices
		rc.OnEvent = notices.Notify
	}
	if a.audit != nil {
		log := a.audit
		rc.Audited = func(ctx context.Context, e audit.Event) {
			// The ledger holds the event; a failed file write is logged
			// by the audit log itself.
			_ = log.Recorded(ctx, e)
		}
	}
	q, err := run.New(rc)
	if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	a.queue = q
	a.placementWindow = cfg.Queue.PlacementWindow
	return nil
}

// jobsNetwork finds or makes the node's isolated jobs network, name,
// before the queue starts anything, and has Close remove it when no
// container is on it any more. A network of the name that is not the
// agent's refuses the start; an engine that does not answer does not,
// since every job's create makes sure of the network first
// (docker.IsolatedJobs).
func (a *Agent) jobsNetwork(ctx context.Context, engine *docker.Jobs, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nw, err := engine.EnsureIsolatedNetwork(ctx)
	switch {
	case err != nil && docker.CannotReach(err):
		a.log.Warn("Docker does not answer; the jobs network is made before the first job is created", "network", name, "err", err)
	case err != nil:
		return fmt.Errorf("queue.network isolated: %w", err)
	case nw.Name != name:
		return fmt.Errorf("queue.network isolated: the engine gave network %s, want %s", nw.Name, name)
	default:
		a.log.Info("jobs join their own network", "network", nw.Name, "created", nw.Created, "gateway", nw.Gateway)
	}
	a.closers = append(a.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := engine.RemoveIsolatedNetwork(ctx); err != nil && !docker.CannotReach(err) {
			return err
		}
		return nil
	})
	return nil
}

// jobEnvDir is where the queue keeps the environment values of jobs, which
// the ledger never holds: a directory only the agent reads.
func (a *Agent) jobEnvDir() (string, error) {
	files, err := a.files()
	if err != nil {
		return "", fmt.Errorf("queue.enabled: %w", err)
	}
	dir := filepath.Join(files.dir, "job-env")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("queue: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", fmt.Errorf("queue: %w", err)
	}
	return dir, nil
}

// dockerSocket is the Unix socket path of docker.host, or "" when the
// engine is reached some other way.
func dockerSocket(host string) string {
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	if host == "" {
		return "/var/run/docker.sock"
	}
	p, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return ""
	}
	return p
}

// resolvePassing turns queue.gpu_passing, which config checked, into how
// jobs get their GPUs. auto (or unset) picks DeviceRequests where Docker
// has the nvidia runtime, and NVIDIA_VISIBLE_DEVICES with a simulated GPU
// source (how the tests run on an engine without either); on a real host
// without the runtime it refuses, since jobs would run without their GPUs.
func resolvePassing(ctx context.Context, setting config.GPUPassing, simulated bool, support func(context.Context) (bool, error)) (spec.GPUPassing, error) {
	switch setting {
	case config.PassingDeviceRequests:
		return spec.DeviceRequests, nil
	case config.PassingCDI:
		return spec.CDI, nil
	case config.PassingEnv:
		return spec.Env, nil
	}
	if simulated {
		return spec.Env, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nvidia, err := support(ctx)
	if err != nil {
		return "", fmt.Errorf("queue.gpu_passing auto: cannot ask Docker for its runtimes: %w", err)
	}
	if nvidia {
		return spec.DeviceRequests, nil
	}
	return "", errors.New("queue.gpu_passing auto: Docker has no nvidia runtime, so jobs would run without their GPUs; " +
		"install the NVIDIA Container Toolkit and run `nvidia-ctk runtime configure --runtime=docker` and restart Docker, " +
		"or set queue.gpu_passing to cdi (with the toolkit's CDI spec generated) or env (with nvidia as Docker's default runtime)")
}

// observeQueue hands the queue what the tick saw of the GPUs.
func (a *Agent) observeQueue(t *sampler.Tick) {
	o := run.ObservationOf(t)
	if t != nil && t.Tick != nil {
		o.Util = a.history.Means(t.Time, a.placementWindow)
	}
	a.queue.Observe(o)
}

// queueStats are the queue's figures for /metrics.
func (a *Agent) queueStats() (exporter.QueueStats, bool) {
	s := a.queue.Snapshot()
	st := exporter.QueueStats{
		Jobs:     map[string]int{},
		GPUsHeld: s.GPUsHeld, GPUsFree: s.GPUsFree, GPUsOutside: s.GPUsOutside,
		WaitBounds: s.WaitBounds, WaitSum: s.WaitSum, WaitCount: s.WaitCount,
	}
	for _, state := range queue.States() {
		st.Jobs[string(state)] = s.Jobs[state]
	}
	// The queue counts +Inf too; the exporter takes it from WaitCount.
	st.WaitCounts = s.WaitCounts[:min(len(s.WaitCounts), len(s.WaitBounds))]
	for _, h := range s.StartSteps {
		st.StartSteps = append(st.StartSteps, exporter.StepHistogram{Step: h.Step, Bounds: h.Bounds,
			Counts: h.Counts[:min(len(h.Counts), len(h.Bounds))], Sum: h.Sum, Count: h.Count})
	}
	if f := s.Fleet; f != nil {
		st.Fleet = &exporter.FleetStats{Leader: f.Leader, Nodes: f.Nodes, PassSum: f.PassSum, PassCount: f.PassCount}
	}
	return st, true
}

// stopper is the one stop path of the node's containers for a caller
// that stops for reason: the queue, when there is one, hears first of a
// stop of a job's container, so that the job ends with that reason and
// not as an exit.
func (a *Agent) stopper(reason queue.Reason) docker.Stopper {
	var jobs docker.JobStops
	if a.queue != nil {
		jobs = a.queue
	}
	return docker.NewStopper(a.docker, jobs, a.node, reason)
}
