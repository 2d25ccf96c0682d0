package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/queue/fairshare"
)

// tableShares is a fixed fair-share table, a fake good for the commands'
// output only: the factors are tested where they are computed. It keeps
// the teams it was asked to lift.
type tableShares struct {
	table  fairshare.Report
	lifted []string
}

func (s *tableShares) FairShare(context.Context) (fairshare.Report, error) { return s.table, nil }

func (s *tableShares) LiftBudget(_ context.Context, team string, ev audit.Event) error {
	if ev.Action != "budget.lift" {
		return fmt.Errorf("audit event for %s", ev.Action)
	}
	s.lifted = append(s.lifted, team)
	return nil
}

// startSharesAgent serves the API with shares, and points the commands at
// it with a token of role.
func startSharesAgent(t *testing.T, shares *tableShares, role config.Role) {
	t.Helper()
	startAPIAgent(t, server.Config{FairShare: shares, Node: "n1"}, role)
}

// startAPIAgent serves the API over cfg, letting in a token of alice's
// with role, and points the commands at it with that token.
func startAPIAgent(t *testing.T, cfg server.Config, role config.Role) {
	t.Helper()
	secret, tok, err := auth.NewToken("laptop", "alice", role, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	authn, err := auth.New(auth.Config{Tokens: []config.Token{tok}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Auth = func() *auth.Authenticator { return authn }
	cfg.Limiter = func() *auth.Limiter { return nil }
	srv := httptest.NewServer(server.New(cfg))
	t.Cleanup(srv.Close)
	clientEnvironment(t, srv.URL)
	t.Setenv("GPUMETER_TOKEN", secret)
}

func sharesTable() fairshare.Report {
	return fairshare.Report{Basis: "held", HalfLife: 7 * 24 * time.Hour, At: time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC),
		Users: []fairshare.Row{
			{Name: "alice", Kind: "user", Team: "nlp", Share: 1, NormShare: 0.5, Usage: 120, NormUsage: 0.75, Factor: 0.354},
			{Name: "bob", Kind: "user", Team: "cv", Share: 1, NormShare: 0.5, Usage: 40, NormUsage: 0.25, Factor: 0.707},
		},
		Teams: []fairshare.Row{
			{Name: "nlp", Kind: "team", Share: 2, NormShare: 0.667, Usage: 120, NormUsage: 0.75, Factor: 0.459,
				Budget: 2000, BudgetUsed: 2012.5, Lifted: true},
		},
		Totals: fairshare.Row{Name: "total", Kind: "total", Share: 2, NormShare: 1, Usage: 160, NormUsage: 1, Factor: 0.5},
	}
}

func TestFairShareCommand(t *testing.T) {
	startSharesAgent(t, &tableShares{table: sharesTable()}, config.RoleViewer)
	out, _, err := runCmd(t, "fairshare")
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^NAME +KIND +SHARE +NORM-SHARE +USAGE +NORM-USAGE +FACTOR +BUDGET +USED
alice \(nlp\) +user +1 +0\.500 +120\.0h +0\.750 +0\.354 +- +-
bob \(cv\) +user +1 +0\.500 +40\.0h +0\.250 +0\.707 +- +-
nlp +team +2 +0\.667 +120\.0h +0\.750 +0\.459 +2000\.0h \(lifted\) +2012\.5h
total +total +2 +1\.000 +160\.0h +1\.000 +0\.500 +- +-
$`)
	if !want.MatchString(out) {
		t.Errorf("fairshare:\n%s", out)
	}
	out, _, err = runCmd(t, "fairshare", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got apitype.FairShare
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Basis != "held" || len(got.Users) != 2 || got.Teams[0].BudgetGPUHours == nil {
		t.Errorf("fairshare --format json: %v\n%s", err, out)
	}
	if _, _, err := runCmd(t, "fairshare", "--format", "csv"); err == nil || !strings.Contains(err.Error(), "--format") {
		t.Errorf("--format csv: %v, want an error naming --format", err)
	}
}

func TestBudgetLiftCommand(t *testing.T) {
	shares := &tableShares{table: sharesTable()}
	startSharesAgent(t, shares, config.RoleAdmin)
	out, _, err := runCmd(t, "budget", "lift", "nlp")
	if err != nil || out != "lifted the budget of nlp for the rest of the month\n" || len(shares.lifted) != 1 || shares.lifted[0] != "nlp" {
		t.Errorf("budget lift: %q %v, lifted %v", out, err, shares.lifted)
	}
	if _, _, err := runCmd(t, "budget", "lift"); err == nil || !strings.Contains(err.Error(), "needs a team") {
		t.Errorf("budget lift without a team: %v", err)
	}

	startSharesAgent(t, &tableShares{table: sharesTable()}, config.RoleUser)
	if _, _, err := runCmd(t, "budget", "lift", "nlp"); err == nil || !strings.Contains(err.Error(), "budget.lift") {
		t.Errorf("budget lift as a user: %v, want a refusal naming budget.lift", err)
	}
}
