package ledgertest

import (
	"context"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// testAudit: audit events, the policy's and the API's, come back as
// written, oldest first, filtered by exact time and node.
func testAudit(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	at := time.Date(2026, 11, 2, 10, 0, 0, 123456000, time.UTC)
	events := []audit.Event{
		{Time: at.Add(2 * time.Second), Node: "n1", Kind: "stop", Rule: "idle", FindingID: "idle-1", ContainerID: "abc", Container: "nb",
			Owner: "carol", Evidence: map[string]float64{"sm_percent": 0.5, "duration_seconds": 3600}, Outcome: "stopped"},
		{Time: at, Node: "n1", Kind: "warn", Rule: "idle", FindingID: "idle-1", ContainerID: "abc", Container: "nb",
			Owner: "carol", Evidence: map[string]float64{"sm_percent": 0.5}, Outcome: "failed", Attempts: 4, Error: "webhook: 500"},
		{Time: at.Add(time.Second), Node: "n2", Kind: "notify", Rule: "outside", FindingID: "outside-1", Owner: "frank", DryRun: true, Outcome: "dry_run"},
		{Time: at.Add(3 * time.Second), Node: "n1", Kind: "api", ContainerID: "abc", Outcome: "denied",
			Caller: "alice (token alice-laptop)", Role: "viewer", Source: "192.0.2.7:51234", Action: "containers.stop",
			Target: "abc", Status: 403, Error: "role viewer may not stop containers"},
		// A sum of refusals, from an address without its port.
		{Time: at.Add(4 * time.Second), Node: "n1", Kind: "api", Outcome: "denied", Caller: "unknown", Source: "192.0.2.8",
			Action: "containers.read", Target: "GET /api/v1/containers", Status: 401, Error: "bad_token", Count: 5_000_000_000},
	}
	if err := s.Audit(ctx, events); err != nil {
		t.Fatal(err)
	}
	if err := s.Audit(ctx, nil); err != nil {
		t.Fatalf("Audit(nil) = %v", err)
	}
	got, err := s.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []audit.Event{events[1], events[2], events[0], events[3], events[4]}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("AuditEvents (-want +got):\n%s", diff)
	}
	got, err = s.AuditEvents(ctx, audit.Filter{From: at.Add(time.Second), To: at.Add(2 * time.Second), Node: "n2"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(want[1:2], got); diff != "" {
		t.Errorf("AuditEvents in a window and node (-want +got):\n%s", diff)
	}
	// The newest of a window, oldest first, and whether there are more.
	for _, tc := range []struct {
		f    audit.Filter
		n    int
		want []audit.Event
		more bool
	}{
		{audit.Filter{}, 2, want[3:], true},
		{audit.Filter{}, 5, want, false},
		{audit.Filter{}, 50, want, false},
		{audit.Filter{From: at.Add(time.Second), To: at.Add(4 * time.Second)}, 1, want[3:4], true},
		{audit.Filter{Node: "n2"}, 3, want[1:2], false},
	} {
		got, more, err := s.AuditNewest(ctx, tc.f, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		if diff := gocmp.Diff(tc.want, got); diff != "" || more != tc.more {
			t.Errorf("AuditNewest(%+v, %d): more %v, want %v (-want +got):\n%s", tc.f, tc.n, more, tc.more, diff)
		}
	}
	if _, _, err := s.AuditNewest(ctx, audit.Filter{}, 0); err == nil {
		t.Error("AuditNewest of 0 events did not fail")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Audit(cctx, events); err == nil {
		t.Error("Audit with a cancelled context succeeded")
	}
}

// testAuditRetain: audit events are kept as long as the hourly rows, so
// that a flood of refused requests cannot fill the disk for ever.
func testAuditRetain(t *testing.T, s ledger.Ledger) {
	ctx := context.Background()
	now := time.Date(2026, 11, 2, 18, 17, 0, 0, time.UTC)
	var events []audit.Event
	for h := 0; h < 10; h++ {
		events = append(events, audit.Event{Time: now.Add(-time.Duration(h)*time.Hour - time.Minute), Node: "n1", Kind: "api", Outcome: "denied", Status: 401})
	}
	if err := s.Audit(ctx, events); err != nil {
		t.Fatal(err)
	}
	// Hour rows before 12:00 go, and the events with them.
	if err := s.Retain(ctx, "", now, 3*time.Hour, 6*time.Hour); err != nil {
		t.Fatal(err)
	}
	got, err := s.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	want := 0
	for _, e := range events {
		if !e.Time.Before(cut) {
			want++
		}
	}
	if len(got) != want {
		t.Fatalf("after Retain, %d audit events, want %d (those from %s on)", len(got), want, cut.Format(time.RFC3339))
	}
	for _, e := range got {
		if e.Time.Before(cut) {
			t.Errorf("event of %s outlived the retention", e.Time.Format(time.RFC3339))
		}
	}
}

// AuditAfterUpgrade checks a ledger just upgraded from schema version 2
// that held one policy stop at at: that event reads back with the API
// fields empty, and an API event can be added beside it. The backends'
// tests build the version 2 ledger, which only they know how to.
func AuditAfterUpgrade(t *testing.T, s ledger.Ledger, at time.Time) {
	t.Helper()
	api := audit.Event{Time: at.Add(time.Second), Node: "n1", Kind: "api", Outcome: "allowed",
		Caller: "bob", Role: "admin", Source: "unix uid 0", Action: "containers.stop", Target: "abc", Status: 200}
	if err := s.Audit(context.Background(), []audit.Event{api}); err != nil {
		t.Fatal(err)
	}
	got, err := s.AuditEvents(context.Background(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []audit.Event{
		{Time: at, Node: "n1", Kind: "stop", Rule: "idle", FindingID: "idle-1", ContainerID: "abc", Container: "nb", Owner: "carol", Outcome: "stopped"},
		api,
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("AuditEvents after the upgrade (-want +got):\n%s", diff)
	}
}
