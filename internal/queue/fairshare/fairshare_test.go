package fairshare

import (
	"context"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
)

var now = time.Date(2026, 3, 10, 12, 30, 0, 0, time.UTC)

// handLedger is a SQLite ledger of two nodes: alice (nlp) held a GPU of
// node-a for an hour a day ago, half busy; bob (cv) holds two GPUs of
// node-b idle this hour, and held one in February, by hand (a container
// outside the queue counts as a job does); carol's host process used a
// GPU of node-a for an hour two days ago; GPU time nobody held counts to
// nobody.
func handLedger(t *testing.T) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	gpu := func(node string, i int) ledger.GPU {
		return ledger.GPU{Node: node, UUID: node + "-GPU-" + string(rune('0'+i)), Index: i, Model: "NVIDIA H100 80GB HBM3", MemoryTotal: 80 << 30}
	}
	ctr := func(node, id, user, team string) ledger.Container {
		return ledger.Container{Node: node, ID: id, Name: id, Image: "x", User: user, Team: team,
			FirstSeen: now.Add(-30 * 24 * time.Hour), LastSeen: now}
	}
	use := func(node, kind, owner, gpu string, start time.Time, held, used float64) ledger.Usage {
		return ledger.Usage{Node: node, Start: start, OwnerKind: kind, OwnerID: owner, GPU: gpu,
			Sums: ledger.Sums{AllocatedSeconds: held, HeldSeconds: held, PresentSeconds: held, UsedSeconds: used}}
	}
	a0, b0, b1 := gpu("node-a", 0), gpu("node-b", 0), gpu("node-b", 1)
	b := ledger.Batch{
		Nodes:      []ledger.Node{{Name: "node-a", FirstSeen: now.Add(-40 * 24 * time.Hour), LastSeen: now}, {Name: "node-b", FirstSeen: now.Add(-40 * 24 * time.Hour), LastSeen: now}},
		GPUs:       []ledger.GPU{a0, b0, b1},
		Containers: []ledger.Container{ctr("node-a", "c-alice", "alice", "nlp"), ctr("node-b", "c-bob", "bob", "cv"), ctr("node-b", "c-bob-feb", "bob", "cv")},
		Usage: []ledger.Usage{
			use("node-a", ledger.KindContainer, "c-alice", a0.UUID, time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC), 3600, 1800),
			use("node-b", ledger.KindContainer, "c-bob", b0.UUID, time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC), 1800, 0),
			use("node-b", ledger.KindContainer, "c-bob", b1.UUID, time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC), 1800, 0),
			use("node-b", ledger.KindContainer, "c-bob-feb", b0.UUID, time.Date(2026, 2, 28, 23, 0, 0, 0, time.UTC), 3600, 3600),
			use("node-a", ledger.KindHost, "carol", a0.UUID, time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC), 3600, 3600),
			use("node-a", ledger.KindNone, "", a0.UUID, time.Date(2026, 3, 10, 11, 0, 0, 0, time.UTC), 3600, 0),
			// Older than 10 half-lives: left out.
			use("node-a", ledger.KindContainer, "c-alice", a0.UUID, time.Date(2026, 2, 20, 12, 0, 0, 0, time.UTC), 3600, 3600),
		},
	}
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	return s
}

var approx = cmpopts.EquateApprox(0, 1e-9)

// TestComputeByHand: the decayed and monthly GPU-hours worked out by hand
// on each basis, across two nodes, a container started by hand and a
// host process.
func TestComputeByHand(t *testing.T) {
	s := handLedger(t)
	feb := math.Exp2(-229.0 / 24) // bob's February hour: its middle is 229 h old
	tests := []struct {
		basis string
		users map[string]*Owner
		teams map[string]*Owner
	}{
		{"held", map[string]*Owner{
			"alice": {Name: "alice", Team: "nlp", Decayed: 0.5, Month: 1},
			"bob":   {Name: "bob", Team: "cv", Decayed: 1 + feb, Month: 1},
			"carol": {Name: "carol", Decayed: 0.25, Month: 1},
		}, map[string]*Owner{
			"nlp": {Name: "nlp", Decayed: 0.5, Month: 1},
			"cv":  {Name: "cv", Decayed: 1 + feb, Month: 1},
		}},
		{"used", map[string]*Owner{
			"alice": {Name: "alice", Team: "nlp", Decayed: 0.25, Month: 0.5},
			"bob":   {Name: "bob", Team: "cv", Decayed: feb},
			"carol": {Name: "carol", Decayed: 0.25, Month: 1},
		}, map[string]*Owner{
			"nlp": {Name: "nlp", Decayed: 0.25, Month: 0.5},
			"cv":  {Name: "cv", Decayed: feb},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.basis, func(t *testing.T) {
			u, err := Compute(context.Background(), s, Settings{Basis: tt.basis, HalfLife: 24 * time.Hour}, now)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.users, u.Users, approx); diff != "" {
				t.Errorf("users (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.teams, u.Teams, approx); diff != "" {
				t.Errorf("teams (-want +got):\n%s", diff)
			}
			var total, month float64
			for _, o := range tt.users {
				total += o.Decayed
				month += o.Month
			}
			if math.Abs(u.Total-total) > 1e-9 || math.Abs(u.Month-month) > 1e-9 {
				t.Errorf("totals %v, %v; want %v, %v", u.Total, u.Month, total, month)
			}
			if !u.MonthStart.Equal(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)) {
				t.Errorf("month starts %v", u.MonthStart)
			}
		})
	}
}

// TestFactorsByHand: Slurm's 2^(−(u/U)/(s/S)) with alice's share 2.
func TestFactorsByHand(t *testing.T) {
	u, err := Compute(context.Background(), handLedger(t), Settings{Basis: "held", HalfLife: 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	set := Settings{Shares: map[string]float64{"alice": 2, "cv": 3}, Budgets: map[string]float64{"nlp": 1, "cv": 10, "bio": 5}}
	feb := math.Exp2(-229.0 / 24)
	total := 0.5 + 1 + feb + 0.25
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		// Users' shares: alice 2, bob 1, carol 1: S = 4.
		{"alice", u.UserFactor(set, "alice"), math.Exp2(-(0.5 / total) / (2.0 / 4))},
		{"bob", u.UserFactor(set, "bob"), math.Exp2(-((1 + feb) / total) / (1.0 / 4))},
		// A user with no use yet: 1, whatever the others did.
		{"dave", u.UserFactor(set, "dave"), 1},
		// Teams: nlp 1, cv 3: S = 4.
		{"nlp", u.TeamFactor(set, "nlp"), math.Exp2(-(0.5 / (1.5 + feb)) / (1.0 / 4))},
		{"cv", u.TeamFactor(set, "cv"), math.Exp2(-((1 + feb) / (1.5 + feb)) / (3.0 / 4))},
	} {
		if math.Abs(tc.got-tc.want) > 1e-12 {
			t.Errorf("factor of %s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if !u.OverBudget(set, "nlp", false) || u.OverBudget(set, "nlp", true) || u.OverBudget(set, "cv", false) || u.OverBudget(set, "vision", false) {
		t.Errorf("budgets: nlp used 1h of 1h (over unless lifted), cv 1h of 10h, vision has none")
	}

	r := u.Report(set, Lifted([]ledger.BudgetLift{{Team: "nlp", Month: "2026-03", LiftedBy: "root"}}))
	if r.Basis != "held" || r.HalfLife != 24*time.Hour || !r.At.Equal(now) {
		t.Errorf("report header %q %v %v", r.Basis, r.HalfLife, r.At)
	}
	wantUsers := []Row{
		{Name: "alice", Kind: "user", Team: "nlp", Share: 2, NormShare: 0.5, Usage: 0.5, NormUsage: 0.5 / total, Factor: u.UserFactor(set, "alice"), BudgetUsed: 1},
		{Name: "bob", Kind: "user", Team: "cv", Share: 1, NormShare: 0.25, Usage: 1 + feb, NormUsage: (1 + feb) / total, Factor: u.UserFactor(set, "bob"), BudgetUsed: 1},
		{Name: "carol", Kind: "user", Share: 1, NormShare: 0.25, Usage: 0.25, NormUsage: 0.25 / total, Factor: u.UserFactor(set, "carol"), BudgetUsed: 1},
	}
	if diff := cmp.Diff(wantUsers, r.Users, approx); diff != "" {
		t.Errorf("users (-want +got):\n%s", diff)
	}
	wantTeams := []Row{
		// bio has a budget and no use: a row all the same.
		{Name: "bio", Kind: "team", Share: 1, NormShare: 0.2, Factor: 1, Budget: 5},
		{Name: "cv", Kind: "team", Share: 3, NormShare: 0.75, Usage: 1 + feb, NormUsage: (1 + feb) / (1.5 + feb), Factor: u.TeamFactor(set, "cv"), Budget: 10, BudgetUsed: 1},
		{Name: "nlp", Kind: "team", Share: 1, NormShare: 0.25, Usage: 0.5, NormUsage: 0.5 / (1.5 + feb), Factor: u.TeamFactor(set, "nlp"), Budget: 1, BudgetUsed: 1, Lifted: true},
	}
	if diff := cmp.Diff(wantTeams, r.Teams, approx); diff != "" {
		t.Errorf("teams (-want +got):\n%s", diff)
	}
	wantTotals := Row{Kind: "total", Share: 4, NormShare: 1, Usage: total, NormUsage: 1, Budget: 16, BudgetUsed: 3}
	if diff := cmp.Diff(wantTotals, r.Totals, approx); diff != "" {
		t.Errorf("totals (-want +got):\n%s", diff)
	}
}

// TestComputeErrors: settings Compute cannot work with are refused.
func TestComputeErrors(t *testing.T) {
	s := handLedger(t)
	for _, set := range []Settings{{Basis: "held"}, {Basis: "present", HalfLife: time.Hour}} {
		if _, err := Compute(context.Background(), s, set, now); err == nil {
			t.Errorf("Compute(%+v) = nil error", set)
		}
	}
}

// TestCache: nothing before Run's first computation, the usage after it,
// and new settings are computed at once, not a refresh later.
func TestCache(t *testing.T) {
	c := NewCache(handLedger(t), Settings{Basis: "held", HalfLife: 24 * time.Hour, Refresh: time.Hour},
		slog.New(slog.NewTextHandler(io.Discard, nil)), func() time.Time { return now })
	if c.Get() != nil {
		t.Fatal("Get before Run is not nil")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	waitFor(t, func() bool { return c.Get() != nil })
	if got := c.Get().Basis; got != "held" {
		t.Errorf("first basis %q", got)
	}
	c.SetSettings(Settings{Basis: "used", HalfLife: 24 * time.Hour, Refresh: time.Hour})
	waitFor(t, func() bool { return c.Get().Basis == "used" })
	if got := c.Get().Users["bob"].Month; got != 0 {
		t.Errorf("bob's used hours this month = %v, want 0", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEfficiency: used over held GPU-hours, decayed alike, whatever the
// basis; 1 for a user who held nothing.
func TestEfficiency(t *testing.T) {
	u, err := Compute(context.Background(), handLedger(t), Settings{Basis: "used", HalfLife: 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	feb := math.Exp2(-229.0 / 24)
	for user, want := range map[string]float64{"alice": 0.5, "bob": feb / (1 + feb), "carol": 1, "dave": 1} {
		if got := u.Efficiency(user); math.Abs(got-want) > 1e-12 {
			t.Errorf("Efficiency(%s) = %v, want %v", user, got, want)
		}
	}
}

// TestLongHalfLife: a half-life too long to take ten of reads the whole
// ledger, the row older than ten days included, at nearly full weight.
func TestLongHalfLife(t *testing.T) {
	u, err := Compute(context.Background(), handLedger(t), Settings{Basis: "held", HalfLife: 30000 * 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Users["alice"].Decayed; got < 1.999 || got > 2 {
		t.Errorf("alice's decayed hours with a half-life of 30000d = %v, want nearly 2 (both her hours)", got)
	}
}

func TestNoBudgetError(t *testing.T) {
	for _, tt := range []struct {
		err  NoBudgetError
		want string
	}{
		{NoBudgetError{Team: "cv"}, `team "cv" has no budget in queue.budgets`},
		{NoBudgetError{Team: "cv", Teams: []string{"nlp", "vision"}}, `team "cv" has no budget in queue.budgets (teams with one: [nlp vision])`},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.err, got, tt.want)
		}
	}
}
