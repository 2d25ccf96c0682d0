package ledgertest

import (
	"context"
	"math"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

func liftAudit(by string) audit.Event {
	return audit.Event{Time: t0, Node: nodeA, Kind: "api", Outcome: "ok", Caller: by, Role: "admin",
		Source: "unix uid 0", Action: "budgets.lift", Status: 200}
}

// testBudgetLifts checks that a lift reads back in its month only, that
// lifting again records the latest lift, that each lift writes its audit
// row naming the team, and that bad input is refused.
func testBudgetLifts(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	if got, err := s.BudgetLifts(ctx, "2026-03"); err != nil || len(got) != 0 {
		t.Fatalf("BudgetLifts of an empty ledger = %+v, %v", got, err)
	}
	before := time.Now().Add(-time.Second)
	for _, l := range []struct{ team, month, by string }{{"nlp", "2026-03", "admin"}, {"cv", "2026-03", "admin"}, {"nlp", "2026-04", "admin"}, {"nlp", "2026-03", "root"}} {
		if err := s.LiftBudget(ctx, l.team, l.month, l.by, liftAudit(l.by)); err != nil {
			t.Fatalf("LiftBudget(%s, %s, %s): %v", l.team, l.month, l.by, err)
		}
	}
	got, err := s.BudgetLifts(ctx, "2026-03")
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.BudgetLift{{Team: "cv", Month: "2026-03", LiftedBy: "admin"}, {Team: "nlp", Month: "2026-03", LiftedBy: "root"}}
	if diff := gocmp.Diff(want, got, cmpopts.IgnoreFields(ledger.BudgetLift{}, "LiftedAt")); diff != "" {
		t.Errorf("lifts of 2026-03 (-want +got):\n%s", diff)
	}
	for _, l := range got {
		if l.LiftedAt.Before(before) || l.LiftedAt.After(time.Now().Add(time.Second)) || l.LiftedAt.Location() != time.UTC {
			t.Errorf("lift of %s at %v, want now in UTC", l.Team, l.LiftedAt)
		}
	}
	if got, err := s.BudgetLifts(ctx, "2026-05"); err != nil || len(got) != 0 {
		t.Errorf("lifts of a month without any = %+v, %v", got, err)
	}
	ev, err := s.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, e := range ev {
		targets = append(targets, e.Action+" "+e.Target+" "+e.Caller)
	}
	wantTargets := []string{"budgets.lift nlp admin", "budgets.lift cv admin", "budgets.lift nlp admin", "budgets.lift nlp root"}
	if diff := gocmp.Diff(wantTargets, targets); diff != "" {
		t.Errorf("audit rows (-want +got):\n%s", diff)
	}
	for _, bad := range []struct{ team, month, by string }{{"", "2026-03", "admin"}, {"nlp", "2026-3", "admin"}, {"nlp", "2026-13", "admin"}, {"nlp", "March", "admin"}, {"nlp", "2026-03", ""}} {
		if err := s.LiftBudget(ctx, bad.team, bad.month, bad.by, liftAudit("admin")); err == nil {
			t.Errorf("LiftBudget(%q, %q, %q) succeeded", bad.team, bad.month, bad.by)
		}
	}
	if _, err := s.BudgetLifts(ctx, "2026-3"); err == nil {
		t.Error("BudgetLifts(2026-3) succeeded")
	}
}

// testBudgetLiftAtomic checks that a lift whose audit row cannot be
// written is not recorded either.
func testBudgetLiftAtomic(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	bad := liftAudit("admin")
	bad.Evidence = map[string]float64{"x": math.NaN()} // cannot be encoded
	if err := s.LiftBudget(ctx, "nlp", "2026-03", "admin", bad); err == nil {
		t.Fatal("LiftBudget with an audit row that cannot be written succeeded")
	}
	if got, err := s.BudgetLifts(ctx, "2026-03"); err != nil || len(got) != 0 {
		t.Errorf("lifts after a failed lift = %+v, %v; want none", got, err)
	}
	if ev, _ := s.AuditEvents(ctx, audit.Filter{}); len(ev) != 0 {
		t.Errorf("audit rows after a failed lift: %+v", ev)
	}
}

// testJobPlacement checks that a job's placement record is kept as it is
// written, by SubmitJob and by UpdateJob, and that an update that does
// not touch it keeps it.
func testJobPlacement(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	j := submit(t, s, newJob("alice"))
	if j.Placement != nil {
		t.Errorf("placement of a new job = %+v, want none", j.Placement)
	}
	if got, _ := s.Job(ctx, j.ID); got.Placement != nil {
		t.Errorf("placement read back = %+v, want none", got.Placement)
	}
	rec := &queue.PlacementRecord{Policy: queue.Target, Candidates: []queue.Candidate{
		{UUID: "GPU-1", Index: 1, Score: 97.5, Util: 0.725, Chosen: true},
		{UUID: "GPU-2", Index: 0, Score: 40, Util: 1.3},
	}}
	up, err := s.UpdateJob(ctx, j.ID, jobQueued, func(x *queue.Job) { x.State, x.Placement = jobStarting, rec }, audit.Event{})
	if err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff(rec, up.Placement); d != "" {
		t.Errorf("UpdateJob returned placement (-want +got):\n%s", d)
	}
	up, err = s.UpdateJob(ctx, j.ID, jobStarting, func(x *queue.Job) { x.State = jobRunning }, audit.Event{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !gocmp.Equal(got.Placement, rec) || !gocmp.Equal(up.Placement, rec) {
		t.Errorf("placement after an update that kept it: read %+v, returned %+v; want %+v", got.Placement, up.Placement, rec)
	}
	k := newJob("bob")
	k.Placement = rec
	k = submit(t, s, k)
	if got, _ := s.Job(ctx, k.ID); !gocmp.Equal(got.Placement, rec) {
		t.Errorf("placement submitted read back as %+v", got.Placement)
	}
	if _, err := s.UpdateJob(ctx, k.ID, jobQueued, func(x *queue.Job) { x.Placement = nil }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Job(ctx, k.ID); got.Placement != nil {
		t.Errorf("placement cleared read back as %+v", got.Placement)
	}
}

// Schema7Job is the job a backend's upgrade test writes into a ledger at
// schema version 7, before placement and budget lifts existed, with the
// job sequence at 1; the statement takes the backend's boolean literal.
const Schema7Job = `INSERT INTO jobs (seq, id, node, name, user_name, team, state, reason, reason_text, gpus_requested, gpus, image,
	command, env_keys, request, time_limit_us, submitted_us, started_us, ended_us, exit_code, container_id, held, attempts,
	requeues, updated_us, rev) VALUES (1, 'j-000001', 'node-a', 'train', 'alice', 'nlp', 'queued', 'resources',
	'waiting for 1 free GPU', 1, '[]', 'localhost/sleeper:1', '["/sleeper"]', '[]', 'null', 3600000000, 1741593600000000,
	NULL, NULL, NULL, '', %s, 0, 0, 1741593600000000, 0)`

// AfterSchema7 checks a store opened on a ledger at schema version 7
// holding Schema7Job: the job reads back without a placement, can be
// given one, the job sequence goes on from 1, and budgets can be lifted.
func AfterSchema7(t *testing.T, s ledger.Ledger) {
	t.Helper()
	ctx := context.Background()
	j, err := s.Job(ctx, "j-000001")
	if err != nil {
		t.Fatal(err)
	}
	if j.Placement != nil || j.User != "alice" || j.Team != "nlp" || j.State != jobQueued || j.TimeLimit != time.Hour {
		t.Errorf("the version 7 job read back as %+v", j)
	}
	rec := &queue.PlacementRecord{Policy: queue.Binpack, Candidates: []queue.Candidate{{UUID: "GPU-1", Chosen: true}}}
	if _, err := s.UpdateJob(ctx, j.ID, jobQueued, func(x *queue.Job) { x.Placement = rec }, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Job(ctx, j.ID); !gocmp.Equal(got.Placement, rec) {
		t.Errorf("placement of the version 7 job = %+v, want %+v", got.Placement, rec)
	}
	if k := submit(t, s, newJob("bob")); k.ID != "j-000002" {
		t.Errorf("the first job after the upgrade is %s, want j-000002", k.ID)
	}
	if err := s.LiftBudget(ctx, "nlp", "2025-03", "root", liftAudit("root")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.BudgetLifts(ctx, "2025-03"); err != nil || len(got) != 1 || got[0].Team != "nlp" {
		t.Errorf("lifts after the upgrade = %+v, %v", got, err)
	}
}
