package waste

import "github.com/gpumeter/gpumeter/internal/config"

// idleStep applies the idle rule to a container's step and says whether
// the container was idle in it: it held a GPU, and its SM utilisation on
// every GPU it held and its CPU use were below the rule's thresholds.
func (t *tracker) idleStep(s *step, held []int, h *heldSums) bool {
	rule := &t.rules.Idle
	idle := rule.Enabled && len(held) > 0 && h.smMax < rule.SMPercent && h.cpu < rule.CPUCores
	t.stepRun(&t.idle, config.RuleIdle, idle, rule.Window, rule.Grace, s, held, h)
	if t.idle.fired {
		t.idle.f.evidence[EvThreshold] = rule.SMPercent
		t.idle.f.evidence[EvThresholdCPU] = rule.CPUCores
	}
	return idle
}
