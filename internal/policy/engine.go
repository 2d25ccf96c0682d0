package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

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

// EngineConfig wires an Engine.
type EngineConfig struct {
	Policy Config
	// Findings returns the latest live findings. It is called from the
	// engine's goroutine only, and again right before a stop.
	Findings func() []waste.Finding
	// Stopper and Containers are nil on a node without Docker: a stop
	// then fails, and is audited so.
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
	Now      func() time.Time
}

// Engine applies the policy to the live findings on a goroutine of its
// own (Run): it pulls the latest findings, so the sampler that produces
// them never waits on a webhook or on Docker.
type Engine struct {
	cfg    EngineConfig
	policy atomic.Pointer[Config]
	// state is touched by Run's goroutine only.
	state map[string]*tracked
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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Findings == nil {
		cfg.Findings = func() []waste.Finding { return nil }
	}
	e := &Engine{cfg: cfg, state: map[string]*tracked{}}
	p := cfg.Policy
	e.policy.Store(&p)
	return e
}

// SetPolicy replaces the policy; the next look at the findings uses it.
// Warnings already given keep their time: a stop comes WarningWait (the
// new one) after its warning.
func (e *Engine) SetPolicy(p Config) { e.policy.Store(&p) }

// Policy returns the policy in force.
func (e *Engine) Policy() Config { return *e.policy.Load() }

// Run looks at the findings every Interval until ctx ends.
func (e *Engine) Run(ctx context.Context) error {
	p := e.Policy()
	e.cfg.Logger.Info("policy engine running", "dry_run", p.DryRun, "warning_wait", p.WarningWait.String())
	t := time.NewTicker(e.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			e.step(ctx)
		}
	}
}

// step acts on one look at the findings.
func (e *Engine) step(ctx context.Context) {
	p := e.Policy()
	now := e.cfg.Now()
	active := map[string]bool{}
	for _, f := range e.cfg.Findings() {
		if !f.Active {
			continue
		}
		action := p.Actions.For(f.Rule)
		if action == ActionReport || (action == ActionStop && f.OwnerKind != waste.OwnerContainer) {
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
				e.audit(ctx, Event{Kind: EventStop, DryRun: p.DryRun, Outcome: OutcomeExempt, Error: why}, f)
			}
			st.exempt, st.warnedAt = why, time.Time{}
			continue
		}
		st.exempt = ""
		switch action {
		case ActionNotify:
			if !st.notified {
				st.notified = true
				e.notify(ctx, p, EventNotify, f, time.Time{})
			}
		case ActionStop:
			switch {
			case st.warnedAt.IsZero():
				st.warnedAt = now
				e.notify(ctx, p, EventWarn, f, now.Add(p.WarningWait))
			case !now.Before(st.warnedAt.Add(p.WarningWait)):
				st.done = true
				e.stop(ctx, p, f)
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
			e.audit(ctx, Event{Kind: EventStop, DryRun: p.DryRun, Outcome: OutcomeCancelled, Error: "the finding no longer holds"}, f)
		}
		delete(e.state, id)
	}
}

// exempt says why f's container is exempt, "" when it is not.
func (e *Engine) exempt(p Config, f waste.Finding) string {
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

// notify sends a notification (kind notify) or a warning (kind warn,
// stopAt set) and audits it.
func (e *Engine) notify(ctx context.Context, p Config, kind string, f waste.Finding, stopAt time.Time) {
	m := Message{Kind: kind, DryRun: p.DryRun, Finding: f, Text: text(kind, f, stopAt)}
	if !stopAt.IsZero() {
		m.StopAt = &stopAt
	}
	ev := Event{Kind: kind, DryRun: p.DryRun}
	log := e.cfg.Logger.With("rule", f.Rule, "container", f.Container, "container_id", f.ContainerID, "owner", f.Owner, "finding", f.ID)
	switch {
	case p.DryRun:
		ev.Outcome = OutcomeDryRun
		if kind == EventWarn {
			log.Info("policy dry run: would warn, then stop the container", "webhook", p.Webhook.URL, "stop_at", stopAt.UTC().Format(time.RFC3339), "text", m.Text)
		} else {
			log.Info("policy dry run: would notify", "webhook", p.Webhook.URL, "text", m.Text)
		}
	case p.Webhook.URL == "":
		ev.Outcome = OutcomeLogged
		log.Warn("policy: "+kind, "text", m.Text)
	default:
		n, err := post(ctx, e.cfg.Client, p.Webhook, e.cfg.Backoff, m)
		ev.Attempts = n
		if err != nil {
			ev.Outcome, ev.Error = OutcomeFailed, err.Error()
			log.Warn("policy: webhook failed", "kind", kind, "attempts", n, "err", err)
		} else {
			ev.Outcome = OutcomeSent
			log.Info("policy: "+kind+" sent", "attempts", n)
		}
	}
	e.audit(ctx, ev, f)
}

// stop re-checks f and stops its container.
func (e *Engine) stop(ctx context.Context, p Config, f waste.Finding) {
	log := e.cfg.Logger.With("rule", f.Rule, "container", f.Container, "container_id", f.ContainerID, "owner", f.Owner, "finding", f.ID)
	ev := Event{Kind: EventStop, DryRun: p.DryRun}
	if why := e.recheck(p, f); why != "" {
		ev.Outcome, ev.Error = why, recheckText[why]
		log.Info("policy: stop cancelled", "why", recheckText[why])
		e.audit(ctx, ev, f)
		return
	}
	if p.DryRun {
		ev.Outcome = OutcomeDryRun
		log.Info("policy dry run: would stop the container", "grace", p.Grace.String())
		e.audit(ctx, ev, f)
		return
	}
	var err error
	if e.cfg.Stopper == nil {
		err = errors.New("no container runtime to stop it with")
	} else {
		err = e.cfg.Stopper.Stop(ctx, f.ContainerID, p.Grace)
	}
	switch {
	case err == nil:
		ev.Outcome = OutcomeStopped
		log.Warn("policy: stopped the container", "grace", p.Grace.String())
	case errors.Is(err, container.ErrNotFound):
		ev.Outcome = OutcomeGone
		log.Info("policy: the container disappeared before the stop")
	default:
		ev.Outcome, ev.Error = OutcomeFailed, err.Error()
		log.Warn("policy: stop failed", "err", err)
	}
	e.audit(ctx, ev, f)
}

var recheckText = map[string]string{
	OutcomeCancelled: "the finding no longer holds",
	OutcomeGone:      "the container is gone or no longer running",
	OutcomeExempt:    "the container is exempt",
}

// recheck looks again, right before a stop, at the latest findings and
// the container: it returns the outcome that cancels the stop, or "".
func (e *Engine) recheck(p Config, f waste.Finding) string {
	still := false
	for _, g := range e.cfg.Findings() {
		if g.ID == f.ID {
			still = g.Active
			break
		}
	}
	if !still {
		return OutcomeCancelled
	}
	if e.cfg.Containers != nil {
		c, ok := e.cfg.Containers.Lookup(f.ContainerID)
		if !ok || !c.Running {
			return OutcomeGone
		}
	}
	if e.exempt(p, f) != "" {
		return OutcomeExempt
	}
	return ""
}

func (e *Engine) audit(ctx context.Context, ev Event, f waste.Finding) {
	ev.Time = e.cfg.Now().UTC()
	ev.Rule, ev.FindingID, ev.Node = f.Rule, f.ID, f.Node
	ev.ContainerID, ev.Container, ev.Owner, ev.Evidence = f.ContainerID, f.Container, f.Owner, f.Evidence
	if e.cfg.Audit == nil {
		return
	}
	if err := e.cfg.Audit.Act(ctx, ev); err != nil {
		e.cfg.Logger.Error("policy: audit", "err", err)
	}
}

// text is the human line of a message.
func text(kind string, f waste.Finding, stopAt time.Time) string {
	who := f.Container
	if who == "" {
		who = f.OwnerKind + " " + f.Owner
	}
	if f.Owner != "" && f.Container != "" {
		who += " (" + f.Owner + ")"
	}
	var gpus []string
	for _, g := range f.GPUs {
		gpus = append(gpus, fmt.Sprint(g.Index))
	}
	s := fmt.Sprintf("gpumeter: %s is %s on GPU %s since %s (%.2f GPU-hours wasted)",
		who, strings.ReplaceAll(f.Rule, "_", " "), strings.Join(gpus, ","), f.Since.UTC().Format(time.RFC3339), f.WastedGPUHours)
	if kind == EventWarn {
		s += fmt.Sprintf("; it will be stopped at %s unless it gets busy", stopAt.UTC().Format(time.RFC3339))
	}
	return s
}
