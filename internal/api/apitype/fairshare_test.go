package apitype

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// jsonKeys are the field names v encodes to, sorted.
func jsonKeys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestFairShareContract: the fair-share JSON has the fields the issue
// promises, under these names, with null for a budget not set.
func TestFairShareContract(t *testing.T) {
	budget := 2000.0
	fs := FairShare{Basis: "held", HalfLife: "7d", At: time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC),
		Users:  []FairShareRow{{Name: "alice", Kind: FairShareUser, Team: "nlp"}},
		Teams:  []FairShareRow{{Name: "nlp", Kind: FairShareTeam, BudgetGPUHours: &budget}},
		Totals: FairShareRow{Name: "total", Kind: FairShareTotal}}
	if diff := cmp.Diff([]string{"at", "basis", "half_life", "teams", "totals", "users"}, jsonKeys(t, fs)); diff != "" {
		t.Errorf("fairshare fields (-want +got):\n%s", diff)
	}
	wantRow := []string{"budget_gpu_hours", "budget_lifted", "budget_used_gpu_hours", "factor", "kind", "name", "norm_share",
		"norm_usage", "share", "team", "usage_gpu_hours"}
	if diff := cmp.Diff(wantRow, jsonKeys(t, fs.Users[0])); diff != "" {
		t.Errorf("row fields (-want +got):\n%s", diff)
	}
	b, _ := json.Marshal(fs.Users[0])
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(b, &raw)
	if got := string(raw["budget_gpu_hours"]); got != "null" {
		t.Errorf("budget_gpu_hours of a row without a budget: %s, want null", got)
	}
	b, _ = json.Marshal(fs.Teams[0])
	_ = json.Unmarshal(b, &raw)
	if got := string(raw["budget_gpu_hours"]); got != "2000" {
		t.Errorf("budget_gpu_hours of nlp: %s, want 2000", got)
	}
	if diff := cmp.Diff([]string{"lifted", "team"}, jsonKeys(t, BudgetLift{})); diff != "" {
		t.Errorf("budget lift fields (-want +got):\n%s", diff)
	}
}

// TestPlacementContract: the placement a job's JSON carries.
func TestPlacementContract(t *testing.T) {
	p := Placement{Policy: "target", Candidates: []PlacementCandidate{{UUID: "GPU-1", Index: 0, Score: 90, Util: 0.6, Chosen: true}}}
	if diff := cmp.Diff([]string{"candidates", "policy"}, jsonKeys(t, p)); diff != "" {
		t.Errorf("placement fields (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"chosen", "index", "score", "util", "uuid"}, jsonKeys(t, p.Candidates[0])); diff != "" {
		t.Errorf("candidate fields (-want +got):\n%s", diff)
	}
}
