package spec

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestCheckLabelsRefuses(t *testing.T) {
	h := newHostTree(t)
	tests := []struct {
		name     string
		labels   []string
		patterns []string // nil: testRules'
		reason   Reason
		text     string
	}{
		{"no patterns", []string{"gpumeter.project=vision"}, []string{}, LabelNotAllowed, "queue.labels is empty"},
		{"key outside the patterns", []string{"com.example.team=x"}, nil, LabelNotAllowed, "matches none of queue.labels (gpumeter.project, gpumeter.sim.*)"},
		{"glob does not match a prefix", []string{"gpumeter.projects=x"}, nil, LabelNotAllowed, "drop --label gpumeter.projects"},
		{"job label under *", []string{"gpumeter.job=j-000001"}, []string{"*"}, LabelNotAllowed, "set by the queue itself"},
		{"node label under gpumeter.*", []string{"gpumeter.node=other"}, []string{"gpumeter.*"}, LabelNotAllowed, "gpumeter.node is set by the queue"},
		{"declared memory", []string{"gpumeter.gpu_memory=1"}, []string{"*"}, LabelNotAllowed, "drop --label gpumeter.gpu_memory"},
		{"user label", []string{"gpumeter.user=bob"}, []string{"*"}, LabelNotAllowed, "gpumeter.user"},
		{"team label", []string{"gpumeter.team=nlp"}, []string{"*"}, LabelNotAllowed, "gpumeter.team"},
		{"exempt", []string{"gpumeter.exempt=true"}, []string{"*"}, LabelNotAllowed, "gpumeter.exempt"},
		{"an exempt label of the policy", []string{"lab.keep=yes"}, []string{"lab.*"}, LabelNotAllowed, "lab.keep is set by the queue itself"},
		{"reserved before the patterns", []string{"gpumeter.exempt=true"}, []string{}, LabelNotAllowed, "set by the queue itself"},
		{"no =", []string{"gpumeter.project"}, nil, BadRequest, "KEY=VALUE"},
		{"empty key", []string{"=vision"}, nil, BadRequest, "not a label key"},
		{"key with a space", []string{"gpumeter project=x"}, []string{"*"}, BadRequest, "not a label key"},
		{"key with a slash", []string{"a/b=x"}, []string{"*"}, BadRequest, "not a label key"},
		{"newline in the value", []string{"gpumeter.project=a\nb"}, nil, BadRequest, "control character"},
		{"NUL in the value", []string{"gpumeter.project=a\x00"}, nil, BadRequest, "control character"},
		{"value too long", []string{"gpumeter.project=" + strings.Repeat("v", maxLabelValue+1)}, nil, BadRequest, "longer than 4096"},
		{"twice", []string{"gpumeter.sim.util=1", "gpumeter.sim.util=2"}, nil, BadRequest, "given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, rules := testRequest(), testRules(h.root)
			req.Labels = tt.labels
			if tt.patterns != nil {
				rules.Labels = tt.patterns
			}
			rules.ExemptLabels = []string{"lab.keep"}
			err := Check(req, rules, alice)
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("Check: %v, want a refusal %s", err, tt.reason)
			}
			if r.Reason != tt.reason || r.Field != "labels" {
				t.Errorf("refusal %s on %s (%s), want %s on labels", r.Reason, r.Field, r.Text, tt.reason)
			}
			if !strings.Contains(r.Text, tt.text) {
				t.Errorf("refusal text %q does not say %q", r.Text, tt.text)
			}
		})
	}
}

func TestCheckLabelsOwnUserLabel(t *testing.T) {
	// The user and team label keys follow the rules, not their defaults.
	h := newHostTree(t)
	rules := testRules(h.root)
	rules.UserLabel, rules.TeamLabel, rules.Labels = "lab.owner", "lab.group", []string{"lab.*"}
	for _, l := range []string{"lab.owner=bob", "lab.group=nlp"} {
		req := testRequest()
		req.Labels = []string{l}
		var r *Refusal
		if err := Check(req, rules, alice); !errors.As(err, &r) || r.Reason != LabelNotAllowed {
			t.Errorf("Check with %s: %v, want %s", l, err, LabelNotAllowed)
		}
	}
	req := testRequest()
	req.Labels = []string{"lab.project=vision", "gpumeter.user=x"} // gpumeter.user is no agent key here
	rules.Labels = append(rules.Labels, "gpumeter.user")
	if err := Check(req, rules, alice); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestBuildCopiesLabels(t *testing.T) {
	h := newHostTree(t)
	rules := testRules(h.root)
	req := testRequest()
	req.GPUs, req.GPUMemory = 0, 20<<30
	req.Labels = []string{"gpumeter.project=vision", "gpumeter.sim.util=85", "gpumeter.sim.memory=24GiB", "gpumeter.sim.empty="}
	spec, err := Build(req, rules, alice, "j-000007", []string{"GPU-a"}, Env)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"gpumeter.project":    "vision",
		"gpumeter.sim.util":   "85",
		"gpumeter.sim.memory": "24GiB",
		"gpumeter.sim.empty":  "",
		JobLabel:              "j-000007",
		GPUMemoryLabel:        "21474836480",
		"gpumeter.user":       "alice",
		"gpumeter.team":       "ml",
	}
	if !maps.Equal(spec.Config.Labels, want) {
		t.Errorf("labels %v, want %v", spec.Config.Labels, want)
	}
	assertIsolated(t, spec, rules)

	req.Labels = nil
	spec, err = Build(req, rules, alice, "j-000008", []string{"GPU-a"}, Env)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Config.Labels) != 4 {
		t.Errorf("labels %v without --label, want the agent's four", spec.Config.Labels)
	}
}
