package policy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

// EventDigest is the audit kind of an advice digest.
const EventDigest = "advice_digest"

// DigestMessage is the JSON body of the weekly advice digest: the
// advice of the week before To, as `gpumeter advise --format json` has
// it, and a sentence for a chat.
type DigestMessage struct {
	Text   string          `json:"text"`
	Kind   string          `json:"kind"` // advice_digest
	From   time.Time       `json:"from"`
	To     time.Time       `json:"to"`
	Advice []whatif.Advice `json:"advice"`
}

// DigestConfig configures an AdviceDigest.
type DigestConfig struct {
	Webhook config.Webhook
	Client  *http.Client // nil: a client of its own
	// Advice reads the advice over [from, to).
	Advice func(ctx context.Context, from, to time.Time) (*whatif.AdviceReport, error)
	Audit  Auditor // nil: not audited
	Logger *slog.Logger
	Now    func() time.Time
	// Wait returns at t, or with ctx's error when ctx ends first; nil:
	// a timer.
	Wait func(ctx context.Context, t time.Time) error
}

// AdviceDigest sends the past week's advice to the webhook every Monday
// at 00:00 UTC (advise.digest: weekly).
type AdviceDigest struct{ cfg DigestConfig }

// NewAdviceDigest returns the digest; Run sends it.
func NewAdviceDigest(cfg DigestConfig) *AdviceDigest {
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Wait == nil {
		cfg.Wait = func(ctx context.Context, t time.Time) error {
			timer := time.NewTimer(time.Until(t))
			defer timer.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
				return nil
			}
		}
	}
	return &AdviceDigest{cfg: cfg}
}

// NextDigest is the first Monday 00:00 UTC after now.
func NextDigest(now time.Time) time.Time {
	d := now.UTC().Truncate(24 * time.Hour)
	for {
		d = d.AddDate(0, 0, 1)
		if d.Weekday() == time.Monday && d.After(now) {
			return d
		}
	}
}

// Run sends a digest each Monday until ctx ends.
func (d *AdviceDigest) Run(ctx context.Context) error {
	for {
		next := NextDigest(d.cfg.Now())
		if err := d.cfg.Wait(ctx, next); err != nil {
			return nil
		}
		d.Send(ctx, next.AddDate(0, 0, -7), next)
	}
}

// Send sends the advice over [from, to), logged and audited; a failure
// waits for next week's.
func (d *AdviceDigest) Send(ctx context.Context, from, to time.Time) {
	rep, err := d.cfg.Advice(ctx, from, to)
	if err != nil {
		d.cfg.Logger.Warn("advice digest", "err", err)
		d.audit(ctx, from, to, OutcomeFailed, 0, err)
		return
	}
	w := d.cfg.Webhook
	if w.Timeout <= 0 {
		w.Timeout = 10 * time.Second
	}
	m := DigestMessage{Text: digestText(rep, from, to), Kind: EventDigest, From: from, To: to, Advice: rep.Advice}
	attempts, err := post(ctx, d.cfg.Client, w, time.Second, m)
	outcome := OutcomeSent
	if err != nil {
		outcome = OutcomeFailed
		d.cfg.Logger.Warn("advice digest", "err", err)
	}
	d.audit(ctx, from, to, outcome, attempts, err)
}

func (d *AdviceDigest) audit(ctx context.Context, from, to time.Time, outcome string, attempts int, err error) {
	if d.cfg.Audit == nil {
		return
	}
	e := audit.Event{Time: d.cfg.Now(), Kind: EventDigest, Action: "advice.digest", Target: from.Format(time.DateOnly) + ".." + to.Format(time.DateOnly),
		Outcome: outcome, Attempts: attempts, Caller: "advise"}
	if err != nil {
		e.Error = err.Error()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultAuditTimeout)
	defer cancel()
	_ = d.cfg.Audit.Act(ctx, e)
}

// digestText is the digest in a few lines: the total saving and each
// advice's user, flag and saving.
func digestText(rep *whatif.AdviceReport, from, to time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "gpumeter advice for %s – %s (from measured use): ", from.Format(time.DateOnly), to.Format(time.DateOnly))
	if len(rep.Advice) == 0 {
		b.WriteString("none; the measured use matches what was asked for.")
		return b.String()
	}
	var saved float64
	for _, a := range rep.Advice {
		saved += a.SavedGPUHours
	}
	fmt.Fprintf(&b, "%d pieces, %.1f GPU-hours that could have been saved.", len(rep.Advice), saved)
	for _, a := range rep.Advice {
		flag := a.Flag
		if flag == "" {
			flag = "see the evidence"
		}
		fmt.Fprintf(&b, "\n• %s, %s: %s (%s, %.1f GPU-hours)", a.User, a.Group, flag, a.Kind, a.SavedGPUHours)
	}
	return b.String()
}
