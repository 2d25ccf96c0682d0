// Package policy acts on live waste findings: per rule it reports them
// (nothing more), notifies a webhook, or warns and then stops the
// container. Dry run is the default: the engine then logs and audits what
// it would do and does nothing. Every notification and every stop is
// written to an audit log.
package policy

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/waste"
)

// Actions a rule can take.
const (
	ActionReport = "report"
	ActionNotify = "notify"
	ActionStop   = "stop"
)

// ExemptLabel on a container with the value "true" keeps every action
// away from it.
const ExemptLabel = "gpumeter.exempt"

// Config is what the engine does, and to whom.
type Config struct {
	// DryRun logs and audits what would be done and does nothing.
	DryRun bool
	// Actions by rule name; a rule not named reports.
	Actions Actions
	Webhook Webhook
	// WarningWait is the time between the warning and the stop; Grace
	// the time docker stop gives the container before it kills it.
	WarningWait time.Duration
	Grace       time.Duration
	Exempt      Selectors
}

// Actions holds the action of every waste rule.
type Actions struct {
	Idle, Stalled, OverAllocated, TooOld, LowEfficiency, Outside string
}

// For returns the action of a rule, report when none is set.
func (a Actions) For(rule string) string {
	var s string
	switch rule {
	case waste.RuleIdle:
		s = a.Idle
	case waste.RuleStalled:
		s = a.Stalled
	case waste.RuleOverAllocated:
		s = a.OverAllocated
	case waste.RuleTooOld:
		s = a.TooOld
	case waste.RuleLowEfficiency:
		s = a.LowEfficiency
	case waste.RuleOutside:
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
	// failed one gets.
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

// DefaultConfig is the policy as gpumeter ships it: every rule reports,
// and the engine runs dry.
func DefaultConfig() Config {
	return Config{
		DryRun:      true,
		Webhook:     Webhook{Timeout: 5 * time.Second, Retries: 3},
		WarningWait: 10 * time.Minute,
		Grace:       30 * time.Second,
	}
}

// Validate reports every setting that makes no sense, named as the
// config's policy.* keys are (without the prefix).
func (c Config) Validate() error {
	var errs []error
	for _, r := range waste.RuleNames() {
		a := c.Actions.For(r)
		if !slices.Contains([]string{ActionReport, ActionNotify, ActionStop}, a) {
			errs = append(errs, fmt.Errorf("rules.%s.action: %q is not one of report, notify, stop", r, a))
		}
		if a == ActionStop && r == waste.RuleOutside {
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

// Target is what the selectors see of a container.
type Target struct {
	Name, Image          string
	Labels               map[string]string
	Owner, Team, Project string
}

// Exempt says why t is exempt, or "" when it is not.
func (s Selectors) Exempt(t Target) string {
	if strings.EqualFold(t.Labels[ExemptLabel], "true") {
		return "label " + ExemptLabel + "=true"
	}
	for _, l := range s.Labels {
		k, v, hasValue := strings.Cut(l, "=")
		got, ok := t.Labels[k]
		if ok && (!hasValue || got == v) {
			return "label " + l
		}
	}
	name := strings.TrimPrefix(t.Name, "/")
	for _, p := range s.Names {
		if ok, _ := path.Match(p, name); ok && name != "" {
			return "name " + p
		}
	}
	for _, p := range s.Images {
		if ok, _ := path.Match(p, t.Image); ok && t.Image != "" {
			return "image " + p
		}
	}
	for _, o := range s.Owners {
		if o != "" && (o == t.Owner || o == t.Team || o == t.Project) {
			return "owner " + o
		}
	}
	return ""
}
