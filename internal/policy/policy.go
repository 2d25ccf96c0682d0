// Package policy acts on live waste findings: per rule it reports them
// (nothing more), notifies a webhook, or warns and then stops the
// container. Dry run is the default: the engine then logs and audits what
// it would do and does nothing. Every notification and every stop is
// written to an audit log.
package policy

import (
	"path"
	"strings"

	"github.com/gpumeter/gpumeter/internal/config"
)

// ExemptLabel on a container with the value "true" keeps every action
// away from it.
const ExemptLabel = "gpumeter.exempt"

// DefaultConfig is the policy as gpumeter ships it: every rule reports,
// and the engine runs dry.
func DefaultConfig() config.Policy { return config.DefaultPolicy() }

// Target is what the selectors see of a container.
type Target struct {
	Name, Image          string
	Labels               map[string]string
	Owner, Team, Project string
}

// exempt says why s exempt t, or "" when they do not.
func exempt(s config.Selectors, t Target) string {
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
