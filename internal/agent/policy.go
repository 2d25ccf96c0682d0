package agent

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/policy"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/fairshare"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/waste"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

// liveWaste is the live waste evaluator, replaceable when a reload
// changes the rules: the sampler, the API, the metrics and the policy
// all go through it.
type liveWaste struct {
	cur   atomic.Pointer[waste.Live]
	rules config.WasteRules // guarded by mu; the rules cur runs
	mu    sync.Mutex
}

func newLiveWaste(cfg waste.LiveConfig) *liveWaste {
	w := &liveWaste{rules: cfg.Rules}
	w.cur.Store(waste.NewLive(cfg))
	return w
}

func (w *liveWaste) Add(t *sampler.Tick)       { w.cur.Load().Add(t) }
func (w *liveWaste) Report() *waste.Report     { return w.cur.Load().Report() }
func (w *liveWaste) Findings() []waste.Finding { return w.cur.Load().Report().Findings }

// Describe implements prometheus.Collector.
func (w *liveWaste) Describe(ch chan<- *prometheus.Desc) { w.cur.Load().Describe(ch) }

// Collect implements prometheus.Collector.
func (w *liveWaste) Collect(ch chan<- prometheus.Metric) { w.cur.Load().Collect(ch) }

// setRules starts a new evaluator when the rules changed, and says
// whether it did. Its findings start over: runs seen under the old
// thresholds mean nothing under the new ones.
func (w *liveWaste) setRules(cfg waste.LiveConfig) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if reflect.DeepEqual(w.rules, cfg.Rules) {
		return false
	}
	w.rules = cfg.Rules
	w.cur.Store(waste.NewLive(cfg))
	return true
}

// newPolicy builds the policy engine over the live findings. Its events
// are actions: the audit log writes each to the file and the ledger before
// the worker that carried out the action goes on.
func (a *Agent) newPolicy(cfg config.Config) {
	ec := policy.EngineConfig{
		Policy:   cfg.Policy,
		Findings: a.waste.Findings,
		Audit:    a.audit,
		Logger:   a.log.With("part", "policy"),
	}
	if a.docker != nil {
		ec.Stopper, ec.Containers = a.stopper(queue.ReasonStoppedByPolicy), a.docker
	}
	a.policy = policy.NewEngine(ec)
}

// newDigest builds the weekly advice digest over the ledger, with the
// prices, queue settings and idle rule the agent starts with.
func (a *Agent) newDigest(cfg config.Config) {
	var auditor policy.Auditor
	if a.audit != nil {
		auditor = a.audit
	}
	svc := a.whatifService()
	a.digest = policy.NewAdviceDigest(policy.DigestConfig{
		Webhook: cfg.Policy.Webhook, Audit: auditor, Logger: a.log.With("part", "advice-digest"),
		Advice: func(ctx context.Context, from, to time.Time) (*whatif.AdviceReport, error) {
			return svc.Advice(ctx, whatif.Query{From: &from, To: &to})
		},
	})
}

// errClosed is Reload's error once the agent is closed.
var errClosed = errors.New("the agent has shut down")

// Reload applies the tokens, certificates, rate limit, web config, waste
// thresholds and policy of a new config, and reopens the audit log, together, once the whole config has passed
// validation; other settings need a restart and are left as they are. A
// config that does not pass, or whose certificate does not load, leaves
// everything as it was. Once the agent is closed, Reload does nothing and
// returns an error.
func (a *Agent) Reload(cfg config.Config) error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	if a.closed {
		return errClosed
	}
	err := a.reload(cfg)
	a.auditReload(err)
	return err
}

// reloadFrom reloads the config load reads, as a SIGHUP asks; what keeps
// it from being read or put in force is audited and logged.
func (a *Agent) reloadFrom(load func() (config.Config, error)) {
	cfg, err := load()
	if err == nil {
		err = a.Reload(cfg)
	} else {
		a.reloadMu.Lock()
		if !a.closed {
			a.auditReload(err)
		}
		a.reloadMu.Unlock()
	}
	if err != nil {
		a.log.Error("config reload rejected, the old config stays in force", "err", err)
	}
}

// auditReload records a reload of the config, or its refusal (err), in
// the audit log as an action: what is in force changed, or was meant to.
// The caller holds reloadMu.
func (a *Agent) auditReload(err error) {
	if a.audit == nil {
		return
	}
	e := audit.Event{Kind: audit.KindConfig, Action: "config.reload", Caller: "SIGHUP", Outcome: "reloaded"}
	if err != nil {
		e.Outcome, e.Error = "rejected", err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Act logs a failed write itself.
	_ = a.audit.Act(ctx, e)
}

// reload puts cfg in force; the caller holds reloadMu.
func (a *Agent) reload(cfg config.Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid config:\n%w", err)
	}
	if a.waste == nil && cfg.WasteEnabled {
		return errors.New("waste.enabled: turning the waste rules on needs a restart")
	}
	if a.queue == nil && cfg.Queue.Enabled {
		return errors.New("queue.enabled: turning the queue on needs a restart")
	}
	var queueReload func() error
	if a.queue != nil {
		q := cfg.Queue
		// The network needs a restart: the isolated one is made at start.
		q.Network = a.cfg.Queue.Network
		rules, sched, err := queueRules(q, a.node, a.cfg.UserLabel, a.cfg.TeamLabel)
		if err != nil {
			return err
		}
		rules.ExemptLabels = exemptKeys(cfg.Policy.Exempt.Labels)
		queueReload = func() error {
			a.fair.Cache().SetSettings(fairshare.SettingsOf(cfg.Queue))
			return a.queue.Reload(rules, sched, cfg.Queue.DefaultTimeLimit)
		}
	}
	if err := a.sec.reload(&cfg); err != nil {
		return err
	}
	if queueReload != nil {
		if err := queueReload(); err != nil {
			a.log.Error("queue settings not reloaded", "err", err)
		}
	}
	changed := false
	if a.waste != nil {
		changed = a.waste.setRules(waste.LiveConfig{Rules: cfg.Waste, Cost: cost.Model(a.cfg.Cost)})
	}
	if a.policy != nil {
		a.policy.SetPolicy(cfg.Policy)
	}
	if a.auditFile != nil {
		// A log rotated by renaming is followed from here on.
		if err := a.auditFile.Reopen(); err != nil {
			a.log.Error("audit log", "err", err)
		}
	}
	a.log.Info("config reloaded", "tokens", len(cfg.Auth.Tokens), "waste_rules_changed", changed, "policy_dry_run", cfg.Policy.DryRun)
	for _, name := range config.Changed(&a.cfg, &cfg) {
		if !reloadable(name) {
			a.log.Warn(name + " changed; it takes effect after a restart")
		}
	}
	return nil
}

// reloadable says whether Reload puts a new value of the setting name in
// force: the security settings, the waste rules and the policy. Turning
// HTTPS or the waste rules on or off is refused by Reload instead.
func reloadable(name string) bool {
	switch name {
	case "waste.enabled":
		return false
	case "api.rate_limit", "api.rate_burst", "web.config_file":
		return true
	case "queue.images", "queue.labels", "queue.mount_roots", "queue.run_as_root_images", "queue.cap_add",
		"queue.publish_ports", "queue.publish_address", "queue.max_gpus", "queue.max_cpus",
		"queue.max_memory", "queue.max_shm_size", "queue.max_pids", "queue.max_open_files", "queue.max_time_limit", "queue.min_time_limit", "queue.default_time_limit",
		"queue.placement", "queue.max_gpus_per_user", "queue.outside_memory_threshold",
		"queue.fair_share.basis", "queue.fair_share.half_life", "queue.fair_share.refresh", "queue.shares",
		"queue.priority.weights.fair_share", "queue.priority.weights.age", "queue.priority.weights.class",
		"queue.priority.age_max", "queue.max_gpus_per_team", "queue.budgets",
		"queue.shared_memory_fraction", "queue.target_utilization":
		// The queue's limits, patterns, caps, order, budgets and
		// placement; the rest of queue.* needs a restart: among it
		// queue.shared_gpus (a GPU taken out of sharing under its memory
		// jobs, or put into it under an exclusive job, would break what
		// they were started on), and the high users, the memory overrun's
		// grace and action and the placement window, which the queue
		// reads once.
		return true
	}
	for _, prefix := range []string{"auth.", "tls.", "waste.", "policy."} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}
