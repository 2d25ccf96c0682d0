package waste

import "github.com/gpumeter/gpumeter/internal/config"

// stalledSM is the SM utilisation below which a GPU counts as computing
// nothing: NVML reports whole percents, so this is what reads as 0 %.
const stalledSM = 0.5

// stalledStep applies the stalled rule to a container's step: it held
// GPU memory on the GPUs it held, computed nothing on any of them, and
// was not idle (its CPU was busy).
func (t *tracker) stalledStep(s *step, held []int, h *heldSums, idle bool) {
	rule := &t.rules.Stalled
	stalled := rule.Enabled && len(held) > 0 && h.smMax < stalledSM && h.mem > 0 && !idle
	t.stepRun(&t.stalled, config.RuleStalled, stalled, rule.Window, rule.Grace, s, held, h)
}
