package policy

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// Stopper stops containers. An error for a container that no longer
// exists wraps container.ErrNotFound.
type Stopper interface {
	Stop(ctx context.Context, id string, grace time.Duration) error
}

// Containers looks containers up by ID.
type Containers interface {
	Lookup(id string) (container.Container, bool)
}

// Defaults of an EngineConfig.
const (
	DefaultWorkers       = 4
	DefaultActionTimeout = time.Minute
	DefaultAuditTimeout  = 30 * time.Second
)

// drainTimeout is how long the audit writes of the actions still queued
// or under way may take once Run's context has ended.
const drainTimeout = 5 * time.Second

// EngineConfig wires an Engine.
type EngineConfig struct {
	Policy config.Policy
	// Findings returns the latest live findings. The engine calls it on
	// every step and, from a worker, again right before a stop: it must
	// be safe for concurrent use.
	Findings func() []waste.Finding
	// Stopper and Containers are nil on a node without Docker: a stop
	// then fails, and is audited so. Both must be safe for concurrent
	// use.
	Stopper    Stopper
	Containers Containers
	Audit      Auditor
	Logger     *slog.Logger
	Client     *http.Client
	// Interval is how often the findings are looked at (default 1s);
	// Backoff the first wait before a webhook is tried again (default
	// 500ms; it doubles up to 10s).
	Interval time.Duration
	Backoff  time.Duration
	// Workers is how many actions run at once (default DefaultWorkers).
	Workers int
	// ActionTimeout bounds one action (default DefaultActionTimeout): a
	// notification with all its retries, or a stop beyond its grace
	// period. AuditTimeout bounds the audit write that follows it
	// (default DefaultAuditTimeout).
	ActionTimeout time.Duration
	AuditTimeout  time.Duration
	Now           func() time.Time
}

// Engine applies the policy to the live findings. Its loop (Run) only
// decides: it pulls the latest findings, so that the sampler producing
// them never waits on it, and hands every action (a notification, a
// warning, a stop, and the audit event of each) to a bounded pool of
// workers, so that the loop itself never waits on a webhook, on Docker or
// on the audit log. The actions of one finding run one at a time, in the
// order they were decided.
type Engine struct {
	cfg    EngineConfig
	policy atomic.Pointer[config.Policy]
	// state is touched by Run's goroutine only.
	state map[string]*tracked
	jobs  *queue
	steps atomic.Uint64 // looks at the findings so far
	drain time.Duration // drainTimeout; shorter in tests
}

// tracked is what the engine remembers of an active finding.
type tracked struct {
	finding  waste.Finding
	notified bool
	warnedAt time.Time
	done     bool // stopped, or given up on, while the finding stays active
	exempt   string
}

// NewEngine returns an engine for a validated policy.
func NewEngine(cfg EngineConfig) *Engine {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 500 * time.Millisecond
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.ActionTimeout <= 0 {
		cfg.ActionTimeout = DefaultActionTimeout
	}
	if cfg.AuditTimeout <= 0 {
		cfg.AuditTimeout = DefaultAuditTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Findings == nil {
		cfg.Findings = func() []waste.Finding { return nil }
	}
	e := &Engine{cfg: cfg, state: map[string]*tracked{}, jobs: newQueue(), drain: drainTimeout}
	p := cfg.Policy
	e.policy.Store(&p)
	return e
}

// SetPolicy replaces the policy; the next look at the findings uses it.
// Warnings already given keep their time: a stop comes WarningWait (the
// new one) after its warning.
func (e *Engine) SetPolicy(p config.Policy) { e.policy.Store(&p) }

// Policy returns the policy in force.
func (e *Engine) Policy() config.Policy { return *e.policy.Load() }

// Run looks at the findings every Interval until ctx ends, while its
// workers carry out the actions. Then it lets the workers finish what is
// queued: what they can no longer do fails at once, since ctx has ended,
// and every audit event is still written, the writes taking at most five
// seconds more in all. Run returns nil.
func (e *Engine) Run(ctx context.Context) error {
	p := e.Policy()
	e.cfg.Logger.Info("policy engine running", "dry_run", p.DryRun, "warning_wait", p.WarningWait.String())
	auditCtx, cancelAudit := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelAudit()
	var wg sync.WaitGroup
	for range e.cfg.Workers {
		wg.Go(func() { e.work(ctx, auditCtx) })
	}
	t := time.NewTicker(e.cfg.Interval)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-t.C:
			e.step()
		}
	}
	drain := time.AfterFunc(e.drain, cancelAudit)
	defer drain.Stop()
	e.jobs.close()
	wg.Wait()
	return nil
}

// work carries out queued jobs until the queue is closed and empty.
func (e *Engine) work(ctx, auditCtx context.Context) {
	for {
		j, ok := e.jobs.take()
		if !ok {
			return
		}
		e.do(ctx, auditCtx, j)
		e.jobs.done(j)
	}
}

// step acts on one look at the findings: it decides, and queues what it
// decided for the workers.
func (e *Engine) step() {
	defer e.steps.Add(1)
	p := e.Policy()
	now := e.cfg.Now()
	active := map[string]bool{}
	for _, f := range e.cfg.Findings() {
		if !f.Active {
			continue
		}
		action := p.Actions.For(f.Rule)
		if action == config.ActionReport || (action == config.ActionStop && f.OwnerKind != waste.OwnerContainer) {
			continue
		}
		active[f.ID] = true
		st := e.state[f.ID]
		if st == nil {
			st = &tracked{}
			e.state[f.ID] = st
		}
		st.finding = f
		if st.done {
			continue
		}
		if why := e.exempt(p, f); why != "" {
			if st.exempt != why {
				e.cfg.Logger.Info("policy: exempt", "rule", f.Rule, "container", f.Container, "finding", f.ID, "why", why)
			}
			if !st.warnedAt.IsZero() {
				// Exempted after its warning (a selector added by a
				// reload): the stop is off, and the audit says so.
				e.jobs.add(&job{policy: p, finding: f, event: audit.Event{Kind: EventStop, DryRun: p.DryRun, Outcome: OutcomeExempt, Error: why}})
			}
			st.exempt, st.warnedAt = why, time.Time{}
			continue
		}
		st.exempt = ""
		switch action {
		case config.ActionNotify:
			if !st.notified {
				st.notified = true
				e.jobs.add(&job{kind: EventNotify, policy: p, finding: f})
			}
		case config.ActionStop:
			switch {
			case st.warnedAt.IsZero():
				st.warnedAt = now
				e.jobs.add(&job{kind: EventWarn, policy: p, finding: f, stopAt: now.Add(p.WarningWait)})
			case !now.Before(st.warnedAt.Add(p.WarningWait)):
				st.done = true
				e.jobs.add(&job{kind: EventStop, policy: p, finding: f})
			}
		}
	}
	for id, st := range e.state {
		if active[id] {
			continue
		}
		if !st.warnedAt.IsZero() && !st.done {
			f := st.finding
			e.cfg.Logger.Info("policy: stop cancelled, the finding no longer holds", "rule", f.Rule, "container", f.Container, "finding", f.ID)
			e.jobs.add(&job{policy: p, finding: f, event: audit.Event{Kind: EventStop, DryRun: p.DryRun, Outcome: OutcomeCancelled, Error: "the finding no longer holds"}})
		}
		delete(e.state, id)
	}
}

// exempt says why f's container is exempt, "" when it is not.
func (e *Engine) exempt(p config.Policy, f waste.Finding) string {
	t := Target{Name: f.Container, Image: f.Image, Owner: f.Owner, Team: f.Team, Project: f.Project}
	if f.OwnerKind == waste.OwnerContainer && e.cfg.Containers != nil {
		if c, ok := e.cfg.Containers.Lookup(f.ContainerID); ok {
			t.Labels = c.Labels
			if t.Name == "" {
				t.Name = c.Name
			}
			if t.Image == "" {
				t.Image = c.Image
			}
		}
	}
	return exempt(p.Exempt, t)
}
