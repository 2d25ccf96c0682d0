package config

import (
	"strings"
	"testing"
)

// TestQueueShareValidate: every fair-share, budget, sharing and placement
// setting that makes no sense is refused, named by its key and its line.
func TestQueueShareValidate(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"half-life 0", "queue:\n  fair_share:\n    half_life: 0s\n", `cfg.yaml:3: queue.fair_share.half_life: 0s must be more than 0`},
		{"refresh 0", "queue:\n  fair_share:\n    refresh: 0s\n", `cfg.yaml:3: queue.fair_share.refresh: 0s must be more than 0`},
		{"share 0", "queue:\n  shares:\n    nlp: 0\n", `cfg.yaml:3: queue.shares.nlp: 0 must be more than 0`},
		{"share negative", "queue:\n  shares: {alice: -1}\n", `cfg.yaml:2: queue.shares.alice: -1 must be more than 0`},
		{"weight negative", "queue:\n  priority:\n    weights: {age: -0.5}\n", `cfg.yaml:3: queue.priority.weights.age: -0.5 is negative`},
		{"weights all 0", "queue:\n  priority:\n    weights: {fair_share: 0, age: 0, class: 0}\n", `cfg.yaml:3: queue.priority.weights.fair_share, queue.priority.weights.age, queue.priority.weights.class: all are 0`},
		{"age max 0", "queue:\n  priority:\n    age_max: 0s\n", `cfg.yaml:3: queue.priority.age_max: 0s must be more than 0`},
		{"team cap default 0", "queue:\n  max_gpus_per_team: {default: 0}\n", `cfg.yaml:2: queue.max_gpus_per_team.default: 0 would start no job`},
		{"team cap negative", "queue:\n  max_gpus_per_team: {nlp: -1}\n", `cfg.yaml:2: queue.max_gpus_per_team.nlp: -1 is negative`},
		{"budget 0", "queue:\n  budgets: {nlp: 0h}\n", `cfg.yaml:2: queue.budgets.nlp: 0h must be more than 0 GPU-hours`},
		{"budget negative", "queue:\n  budgets:\n    nlp: -5\n", `cfg.yaml:3: queue.budgets.nlp: -5h must be more than 0 GPU-hours`},
		{"shared all and more", "queue:\n  shared_gpus: [all, \"3\"]\n", `cfg.yaml:2: queue.shared_gpus: "all" marks every GPU shared; name no other GPU with it`},
		{"shared word", "queue:\n  shared_gpus: [gpu3]\n", `cfg.yaml:2: queue.shared_gpus: "gpu3" is not a GPU index, a UUID (GPU-…) or all`},
		{"shared negative", "queue:\n  shared_gpus: \"-1\"\n", `cfg.yaml:2: queue.shared_gpus: "-1" is not a GPU index`},
		{"shared twice", "queue:\n  shared_gpus: [\"1\", \"1\"]\n", `cfg.yaml:2: queue.shared_gpus: "1" is named twice`},
		{"fraction 0", "queue:\n  shared_memory_fraction: 0\n", `cfg.yaml:2: queue.shared_memory_fraction: 0 is outside (0, 1]`},
		{"fraction over 1", "queue:\n  shared_memory_fraction: 1.2\n", `cfg.yaml:2: queue.shared_memory_fraction: 1.2 is outside (0, 1]`},
		{"window 0", "queue:\n  placement_window: 0s\n", `cfg.yaml:2: queue.placement_window: 0s is outside (0s, 1h]`},
		{"window 2h", "queue:\n  placement_window: 2h\n", `cfg.yaml:2: queue.placement_window: 2h is outside (0s, 1h]`},
		{"target 0", "queue:\n  target_utilization: 0\n", `cfg.yaml:2: queue.target_utilization: 0 is outside (0, 1]`},
		{"target over 1", "queue:\n  target_utilization: 1.5\n", `cfg.yaml:2: queue.target_utilization: 1.5 is outside (0, 1]`},
		{"target negative", "queue:\n  target_utilization: -0.7\n", `cfg.yaml:2: queue.target_utilization: -0.7 is outside (0, 1]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			if err := c.Parse("cfg.yaml", []byte(tt.yaml)); err != nil {
				t.Fatalf("Parse() = %v; the value should parse and fail Validate", err)
			}
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestQueueShareParseErrors: values the parsers refuse name the file and
// line.
func TestQueueShareParseErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"basis", "queue:\n  fair_share:\n    basis: present\n", `cfg.yaml:3: queue.fair_share.basis: "present" is not one of used, allocated, held`},
		{"overrun action", "queue:\n  memory_overrun_action: kill\n", `cfg.yaml:2: queue.memory_overrun_action: "kill" is not one of stop, warn`},
		{"budget word", "queue:\n  budgets: {nlp: lots}\n", `cfg.yaml:2: queue.budgets.nlp: "lots" is not a number of GPU-hours, such as 2000h`},
		{"budget as a duration", "queue:\n  budgets: {nlp: 3d}\n", `cfg.yaml:2: queue.budgets.nlp: "3d" is not a number of GPU-hours`},
		{"share word", "queue:\n  shares: {nlp: big}\n", `cfg.yaml:2: queue.shares.nlp: "big" is not a number`},
		{"weight word", "queue:\n  priority:\n    weights: {class: high}\n", `cfg.yaml:3: queue.priority.weights.class: "high" is not a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			err := c.Parse("cfg.yaml", []byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse() = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestQueueTeamCapAndShare: a team's own cap, else the default entry,
// else none; a share defaults to 1. From the environment as from a file.
func TestQueueTeamCapAndShare(t *testing.T) {
	c := Default()
	if n, ok := c.Queue.TeamCap("nlp"); ok {
		t.Errorf("TeamCap with no entries = %d, true; want no cap", n)
	}
	if err := c.LoadEnv([]string{"GPUMETER_QUEUE_MAX_GPUS_PER_TEAM=nlp=6", "GPUMETER_QUEUE_SHARES=nlp=2,alice=0.5", "GPUMETER_QUEUE_BUDGETS=nlp=2000h,cv=10"}); err != nil {
		t.Fatal(err)
	}
	if n, ok := c.Queue.TeamCap("nlp"); n != 6 || !ok {
		t.Errorf("TeamCap(nlp) = %d, %v; want 6, true", n, ok)
	}
	if n, ok := c.Queue.TeamCap("cv"); ok {
		t.Errorf("TeamCap(cv) without a default = %d, true; want no cap", n)
	}
	c.Queue.MaxGPUsPerTeam[DefaultTeamCap] = 0
	if n, ok := c.Queue.TeamCap("cv"); n != 0 || !ok {
		t.Errorf("TeamCap(cv) with default 0 = %d, %v; want 0, true", n, ok)
	}
	delete(c.Queue.MaxGPUsPerTeam, DefaultTeamCap) // Validate refuses a default of 0
	if s := c.Queue.Share("nlp"); s != 2 {
		t.Errorf("Share(nlp) = %v, want 2", s)
	}
	if s := c.Queue.Share("bob"); s != 1 {
		t.Errorf("Share(bob) = %v, want 1", s)
	}
	if b := c.Queue.Budgets; b["nlp"] != 2000 || b["cv"] != 10 {
		t.Errorf("budgets = %v, want nlp 2000, cv 10", b)
	}
	if k, _ := lookup("queue.budgets"); k.get(&c) != "cv=10h,nlp=2000h" {
		t.Errorf("queue.budgets rendered %q", k.get(&c))
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
}
