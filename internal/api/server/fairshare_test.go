package server

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue/fairshare"
)

// fixedShares is a fixed fair-share table: a fake, good for the handler's
// authorisation and shape only; the factors themselves are tested where
// they are computed. Its lifts are real, though: each writes its audit
// event to a SQLite ledger, as the real one does in its transaction.
type fixedShares struct {
	table fairshare.Report
	store *sqlite.Store
	mu    sync.Mutex
	lifts []string
}

func (f *fixedShares) FairShare(context.Context) (fairshare.Report, error) { return f.table, nil }

func (f *fixedShares) LiftBudget(ctx context.Context, team string, ev audit.Event) error {
	var budget bool
	for _, r := range f.table.Teams {
		budget = budget || r.Name == team && r.Budget > 0
	}
	if !budget {
		return &fairshare.NoBudgetError{Team: team}
	}
	if err := f.store.Audit(ctx, []audit.Event{ev}); err != nil {
		return err
	}
	f.mu.Lock()
	f.lifts = append(f.lifts, team)
	f.mu.Unlock()
	return nil
}

func shareTable() fairshare.Report {
	row := func(name, kind, team string, usage float64) fairshare.Row {
		return fairshare.Row{Name: name, Kind: kind, Team: team, Share: 1, NormShare: 0.5, Usage: usage, NormUsage: usage / 30, Factor: 0.5}
	}
	nlp := row("nlp", fairshare.KindTeam, "", 20)
	nlp.Budget, nlp.BudgetUsed = 2000, 1500
	return fairshare.Report{
		Basis: "held", HalfLife: 7 * 24 * time.Hour, At: time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC),
		Users:  []fairshare.Row{row("alice", fairshare.KindUser, "nlp", 20), row("bob", fairshare.KindUser, "cv", 10)},
		Teams:  []fairshare.Row{nlp, row("cv", fairshare.KindTeam, "", 10)},
		Totals: fairshare.Row{Name: "total", Kind: fairshare.KindTotal, Share: 2, NormShare: 1, Usage: 30, NormUsage: 1},
	}
}

func newSharesFixture(t *testing.T) (*fixture, *fixedShares) {
	t.Helper()
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	fs := &fixedShares{table: shareTable(), store: store}
	return newFixture(t, func(c *Config) { c.FairShare = fs }), fs
}

// names lists the rows' names.
func names(rows []apitype.FairShareRow) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.Name)
	}
	return out
}

// TestFairShareSeenBy: everyone reads the fair share; a user sees their
// own row, their team's and the totals, a viewer and an admin every row.
func TestFairShareSeenBy(t *testing.T) {
	f, _ := newSharesFixture(t)
	tests := []struct {
		caller       string
		users, teams []string
	}{
		{asAlice, []string{"alice"}, []string{"nlp"}},
		{asBob, []string{"bob"}, []string{"cv"}},
		{asNobody, []string{}, []string{}}, // no row of their own
		{asViewer, []string{"alice", "bob"}, []string{"nlp", "cv"}},
		{asAdmin, []string{"alice", "bob"}, []string{"nlp", "cv"}},
	}
	for _, tt := range tests {
		var got apitype.FairShare
		f.get(t, tt.caller, "/api/v1/fairshare").decode(t, &got)
		if diff := cmp.Diff(tt.users, names(got.Users)); diff != "" {
			t.Errorf("%s's users (-want +got):\n%s", tt.caller, diff)
		}
		if diff := cmp.Diff(tt.teams, names(got.Teams)); diff != "" {
			t.Errorf("%s's teams (-want +got):\n%s", tt.caller, diff)
		}
		if got.Totals.Kind != apitype.FairShareTotal || got.Totals.UsageGPUHours != 30 || got.Basis != "held" || got.HalfLife != "7d" {
			t.Errorf("%s: totals %+v basis %q half-life %q, want the table's", tt.caller, got.Totals, got.Basis, got.HalfLife)
		}
	}
	f.get(t, asAlice, "/api/v1/fairshare?user=bob").apiError(t, http.StatusBadRequest, apitype.CodeBadRequest)
	f.get(t, asNone, "/api/v1/fairshare").apiError(t, http.StatusUnauthorized, "unauthenticated")
}

// TestBudgetLift: only an admin lifts a budget; the lift is one audit row
// in the ledger; a team without a budget is a 400 naming the field.
func TestBudgetLift(t *testing.T) {
	f, fs := newSharesFixture(t)
	for _, caller := range []string{asAlice, asViewer} {
		f.do(t, caller, http.MethodPost, "/api/v1/fairshare/budgets/nlp/lift", nil, "").apiError(t, http.StatusForbidden, apitype.CodeForbidden)
	}
	var lift apitype.BudgetLift
	a := f.do(t, asAdmin, http.MethodPost, "/api/v1/fairshare/budgets/nlp/lift", strings.NewReader(`{}`), "")
	a.decode(t, &lift)
	if a.status != http.StatusOK || lift != (apitype.BudgetLift{Team: "nlp", Lifted: true}) {
		t.Errorf("lift: %d %s, want nlp lifted", a.status, a.body)
	}
	e := f.do(t, asAdmin, http.MethodPost, "/api/v1/fairshare/budgets/cv/lift", nil, "").apiError(t, http.StatusBadRequest, apitype.CodeBadRequest)
	if e.Field != "team" || e.Message != `team: team "cv" has no budget in queue.budgets` {
		t.Errorf("lift of a team without a budget: %+v, want field team naming queue.budgets", e)
	}
	f.do(t, asAdmin, http.MethodPost, "/api/v1/fairshare/budgets/nlp/lift", strings.NewReader(`{"force":true}`), "").apiError(t, http.StatusBadRequest, apitype.CodeBadRequest)
	if diff := cmp.Diff([]string{"nlp"}, fs.lifts); diff != "" {
		t.Errorf("lifts (-want +got):\n%s", diff)
	}
	events, err := fs.store.AuditEvents(context.Background(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ Kind, Caller, Role, Action, Target string }
	var got []row
	for _, ev := range events {
		got = append(got, row{ev.Kind, ev.Caller, ev.Role, ev.Action, ev.Target})
	}
	want := []row{{"api", "root (token root-laptop)", "admin", "budget.lift", "budget nlp"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit rows (-want +got):\n%s", diff)
	}
}

// TestFairShareOff: an agent without a fair share says so on both
// endpoints.
func TestFairShareOff(t *testing.T) {
	f := newFixture(t, nil)
	f.get(t, asAlice, "/api/v1/fairshare").apiError(t, http.StatusServiceUnavailable, apitype.CodeFairShareOff)
	f.do(t, asAdmin, http.MethodPost, "/api/v1/fairshare/budgets/nlp/lift", nil, "").apiError(t, http.StatusServiceUnavailable, apitype.CodeFairShareOff)
}
