package ledgertest

import (
	"context"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// testAudit: audit events, the policy's and the API's, come back as
// written, oldest first, filtered by exact time and node.
func testAudit(t *testing.T, s ledger.Store) {
	as, ok := s.(ledger.AuditStore)
	if !ok {
		t.Fatalf("%T does not keep audit events", s)
	}
	ctx := context.Background()
	at := time.Date(2026, 11, 2, 10, 0, 0, 123456000, time.UTC)
	events := []ledger.AuditEvent{
		{Time: at.Add(2 * time.Second), Node: "n1", Kind: "stop", Rule: "idle", FindingID: "idle-1", ContainerID: "abc", Container: "nb",
			Owner: "carol", Evidence: map[string]float64{"sm_percent": 0.5, "duration_seconds": 3600}, Outcome: "stopped"},
		{Time: at, Node: "n1", Kind: "warn", Rule: "idle", FindingID: "idle-1", ContainerID: "abc", Container: "nb",
			Owner: "carol", Evidence: map[string]float64{"sm_percent": 0.5}, Outcome: "failed", Attempts: 4, Error: "webhook: 500"},
		{Time: at.Add(time.Second), Node: "n2", Kind: "notify", Rule: "outside", FindingID: "outside-1", Owner: "frank", DryRun: true, Outcome: "dry_run"},
		{Time: at.Add(3 * time.Second), Node: "n1", Kind: "api", ContainerID: "abc", Outcome: "denied",
			Caller: "alice (token alice-laptop)", Role: "viewer", Source: "192.0.2.7:51234", Action: "containers.stop",
			Target: "abc", Status: 403, Error: "role viewer may not stop containers"},
	}
	if err := as.Audit(ctx, events); err != nil {
		t.Fatal(err)
	}
	if err := as.Audit(ctx, nil); err != nil {
		t.Fatalf("Audit(nil) = %v", err)
	}
	got, err := as.AuditEvents(ctx, ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.AuditEvent{events[1], events[2], events[0], events[3]}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("AuditEvents (-want +got):\n%s", diff)
	}
	got, err = as.AuditEvents(ctx, ledger.Filter{From: at.Add(time.Second), To: at.Add(2 * time.Second), Node: "n2"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(want[1:2], got); diff != "" {
		t.Errorf("AuditEvents in a window and node (-want +got):\n%s", diff)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := as.Audit(cctx, events); err == nil {
		t.Error("Audit with a cancelled context succeeded")
	}
}
