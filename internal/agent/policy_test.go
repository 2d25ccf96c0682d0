package agent

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/policy"
)

// TestReload: a config that does not validate changes nothing; one that
// does swaps the waste rules and the policy together.
func TestReload(t *testing.T) {
	cfg := config.Default()
	cfg.Source, cfg.DataDir, cfg.LedgerEnabled = "demo", t.TempDir(), false
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	live := a.waste.cur.Load()

	bad := cfg
	bad.Policy.Webhook.Retries = 99
	bad.Waste.Idle.Window = 2 * time.Second
	err = a.Reload(bad)
	if err == nil || !strings.Contains(err.Error(), "policy.webhook.retries: 99 is outside 0..10") {
		t.Errorf("Reload(bad) = %v, want the retries named", err)
	}
	if a.waste.cur.Load() != live || a.policy.Policy().Webhook.Retries != 3 {
		t.Error("a rejected config took effect")
	}

	good := cfg
	good.Waste.Idle.Window = 2 * time.Second
	good.Policy.Actions.Idle = policy.ActionStop
	if err := a.Reload(good); err != nil {
		t.Fatal(err)
	}
	if a.waste.cur.Load() == live || a.policy.Policy().Actions.Idle != policy.ActionStop {
		t.Error("a good config did not take effect")
	}
	// The same rules again keep the evaluator and its findings.
	live = a.waste.cur.Load()
	if err := a.Reload(good); err != nil || a.waste.cur.Load() != live {
		t.Errorf("Reload with the same rules: %v, evaluator replaced %v", err, a.waste.cur.Load() != live)
	}

	// Each reload, and the refused one, is an action in the audit log,
	// there as soon as Reload has returned.
	evs, err := audit.ReadFile(a.auditFile.Path(), time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, e := range evs {
		if e.Kind == audit.KindConfig && e.Action == "config.reload" {
			outcomes = append(outcomes, e.Outcome)
		}
	}
	if want := []string{"rejected", "reloaded", "reloaded"}; !slices.Equal(outcomes, want) {
		t.Errorf("reloads in the audit log: %v, want %v", outcomes, want)
	}
	if !strings.Contains(evs[0].Error, "policy.webhook.retries") {
		t.Errorf("the refused reload's event %+v does not say why", evs[0])
	}
}
