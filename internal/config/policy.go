package config

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"
)

// Actions the policy can take on a waste rule's findings.
const (
	ActionReport = "report"
	ActionNotify = "notify"
	ActionStop   = "stop"
)

// Policy is what the agent does about live waste findings, and to whom.
type Policy struct {
	// DryRun logs and audits what would be done and does nothing.
	DryRun bool
	// Actions by rule name; a rule not named reports.
	Actions PolicyActions
	Webhook Webhook
	// WarningWait is the time between the warning and the stop; Grace
	// the time docker stop gives the container before it kills it.
	WarningWait time.Duration
	Grace       time.Duration
	Exempt      Selectors
}

// PolicyActions holds the action of every waste rule.
type PolicyActions struct {
	Idle, Stalled, OverAllocated, TooOld, LowEfficiency, Outside string
}

// For returns the action of a rule, report when none is set.
func (a PolicyActions) For(rule string) string {
	var s string
	switch rule {
	case RuleIdle:
		s = a.Idle
	case RuleStalled:
		s = a.Stalled
	case RuleOverAllocated:
		s = a.OverAllocated
	case RuleTooOld:
		s = a.TooOld
	case RuleLowEfficiency:
		s = a.LowEfficiency
	case RuleOutside:
		s = a.Outside
	}
	if s == "" {
		return ActionReport
	}
	return s
}

// Webhook is where notifications go.
type Webhook struct {
	URL string
	// Timeout bounds one attempt; Retries is how many more attempts a
	// failed one gets when it may succeed later (a network error, a 5xx
	// or a 429).
	Timeout time.Duration
	Retries int
}

// Selectors pick containers. A container matches when any selector
// matches it.
type Selectors struct {
	// Labels are key=value pairs, or a bare key that matches any value.
	Labels []string
	// Names and Images are shell patterns (path.Match), Owners exact
	// user, team or project names.
	Names, Images, Owners []string
}

// DefaultPolicy is the policy as gpumeter ships it: every rule reports,
// and the engine runs dry.
func DefaultPolicy() Policy {
	return Policy{
		DryRun:      true,
		Webhook:     Webhook{Timeout: 5 * time.Second, Retries: 3},
		WarningWait: 10 * time.Minute,
		Grace:       30 * time.Second,
	}
}

// Validate reports every setting that makes no sense, named as the
// policy.* keys are (without the prefix).
func (c Policy) Validate() error {
	var errs []error
	for _, r := range RuleNames() {
		a := c.Actions.For(r)
		if !slices.Contains([]string{ActionReport, ActionNotify, ActionStop}, a) {
			errs = append(errs, fmt.Errorf("rules.%s.action: %q is not one of report, notify, stop", r, a))
		}
		if a == ActionStop && r == RuleOutside {
			errs = append(errs, fmt.Errorf("rules.%s.action: stop acts on containers; outside use has none", r))
		}
		if a == ActionNotify && c.Webhook.URL == "" {
			errs = append(errs, fmt.Errorf("rules.%s.action: notify needs webhook.url", r))
		}
	}
	if c.Webhook.URL != "" {
		u, err := url.Parse(c.Webhook.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("webhook.url: %q is not an http(s) URL", c.Webhook.URL))
		}
	}
	if c.Webhook.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("webhook.timeout: %s must be more than 0", c.Webhook.Timeout))
	}
	if c.Webhook.Retries < 0 || c.Webhook.Retries > 10 {
		errs = append(errs, fmt.Errorf("webhook.retries: %d is outside 0..10", c.Webhook.Retries))
	}
	if c.WarningWait < 0 {
		errs = append(errs, fmt.Errorf("stop.warning_wait: %s is negative", c.WarningWait))
	}
	if c.Grace < 0 {
		errs = append(errs, fmt.Errorf("stop.grace: %s is negative", c.Grace))
	}
	for _, p := range slices.Concat(c.Exempt.Names, c.Exempt.Images) {
		if _, err := path.Match(p, ""); err != nil {
			errs = append(errs, fmt.Errorf("exempt: bad pattern %q", p))
		}
	}
	for _, l := range c.Exempt.Labels {
		if k, _, _ := strings.Cut(l, "="); strings.TrimSpace(k) == "" {
			errs = append(errs, fmt.Errorf("exempt.labels: %q has no key", l))
		}
	}
	return errors.Join(errs...)
}
