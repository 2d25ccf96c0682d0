package fairshare

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
)

// TestService: before the first computation the API hears to come back
// and every user stands equal; after it, a team over its budget is over
// until an admin lifts it, and a team without a budget cannot be lifted.
func TestService(t *testing.T) {
	ctx := context.Background()
	s := handLedger(t)
	set := Settings{Basis: "held", HalfLife: 24 * time.Hour, Refresh: time.Hour, Budgets: map[string]float64{"cv": 0.5}}
	c := NewCache(s, set, nil, func() time.Time { return now })
	f := NewService(c, s)
	f.now = func() time.Time { return now }

	if _, err := f.FairShare(ctx); !errors.Is(err, errNotYet) {
		t.Errorf("FairShare before the first computation: %v, want errNotYet", err)
	}
	factor, _, over := f.Standing(ctx, []string{"alice", "bob"}, []string{"cv"})
	if len(factor) != 0 || len(over) != 0 {
		t.Errorf("Standing before the first computation: factors %v, over %v; want none", factor, over)
	}

	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	fs, err := f.FairShare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fs.Basis != "held" || fs.HalfLife != 24*time.Hour || len(fs.Users) == 0 {
		t.Errorf("FairShare: %+v", fs)
	}
	if _, _, over := f.Standing(ctx, []string{"bob"}, []string{"cv", "nlp"}); !over["cv"] || over["nlp"] {
		t.Errorf("over budget %v, want cv alone", over)
	}

	var nb *NoBudgetError
	if err := f.LiftBudget(ctx, "nlp", audit.Event{Time: now, Caller: "root"}); !errors.As(err, &nb) || nb.Team != "nlp" || !strings.Contains(err.Error(), "[cv]") {
		t.Errorf("lift nlp, which has no budget: %v, want a NoBudgetError naming cv", err)
	}
	if err := f.LiftBudget(ctx, "cv", audit.Event{Time: now, Caller: "root", Kind: "api", Action: "budgets.lift"}); err != nil {
		t.Fatal(err)
	}
	if _, _, over := f.Standing(ctx, []string{"bob"}, []string{"cv"}); over["cv"] {
		t.Error("cv is over budget after its lift")
	}
}
