package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
)

func TestExempt(t *testing.T) {
	sel := config.Selectors{
		Labels: []string{"team=infra", "keep"},
		Names:  []string{"notebook-*"},
		Images: []string{"registry.local/serving/*"},
		Owners: []string{"alice"},
	}
	tests := []struct {
		name string
		t    Target
		want string
	}{
		{"nothing matches", Target{Name: "train-1", Image: "pytorch", Owner: "bob", Labels: map[string]string{"team": "ml"}}, ""},
		{"exempt label", Target{Name: "x", Labels: map[string]string{"gpumeter.exempt": "true"}}, "label gpumeter.exempt=true"},
		{"exempt label false", Target{Name: "x", Labels: map[string]string{"gpumeter.exempt": "false"}}, ""},
		{"label value", Target{Labels: map[string]string{"team": "infra"}}, "label team=infra"},
		{"bare label key", Target{Labels: map[string]string{"keep": ""}}, "label keep"},
		{"name pattern", Target{Name: "/notebook-alice"}, "name notebook-*"},
		{"image pattern", Target{Image: "registry.local/serving/llm:1"}, "image registry.local/serving/*"},
		{"image pattern does not cross slashes", Target{Image: "registry.local/serving/a/b"}, ""},
		{"owner", Target{Owner: "alice"}, "owner alice"},
		{"team counts as owner", Target{Team: "alice"}, "owner alice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := exempt(sel, tt.t); got != tt.want {
				t.Errorf("Exempt(%+v) = %q, want %q", tt.t, got, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	c := DefaultConfig()
	c.Actions.Idle = "kill"
	c.Actions.Stalled = config.ActionNotify
	c.Actions.Outside = config.ActionStop
	c.Webhook.Timeout = 0
	c.Webhook.Retries = -1
	c.WarningWait = -time.Second
	c.Exempt.Names = []string{"[bad"}
	c.Exempt.Labels = []string{"=x"}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want errors")
	}
	for _, want := range []string{
		`rules.idle.action: "kill" is not one of`,
		"rules.stalled.action: notify needs webhook.url",
		"rules.outside.action: stop acts on containers",
		"webhook.timeout: 0s must be more than 0",
		"webhook.retries: -1 is outside 0..10",
		"stop.warning_wait: -1s is negative",
		`exempt: bad pattern "[bad"`,
		`exempt.labels: "=x" has no key`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v\nwant it to contain %q", err, want)
		}
	}
	c = DefaultConfig()
	c.Webhook.URL = "ftp://x"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "not an http(s) URL") {
		t.Errorf("Validate() with an ftp webhook = %v", err)
	}
}
