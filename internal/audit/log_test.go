package audit_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
)

func openFile(t *testing.T) *audit.File {
	t.Helper()
	f, err := audit.OpenFile(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// start runs l until the returned function is called; that function waits
// for Run to return and fails the test if it returned an error.
func start(t testing.TB, l *audit.Log) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v, want nil", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitEvents polls l until it reads back n events.
func waitEvents(t *testing.T, l *audit.Log, n int) []audit.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _, err := l.Events(context.Background(), time.Time{}, time.Time{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func apiEvent(i int) audit.Event {
	return audit.Event{
		Time: t0.Add(time.Duration(i) * time.Second), Kind: audit.KindAPI, Outcome: audit.OutcomeDenied,
		Caller: "anonymous", Source: "192.0.2.7:51234", Action: "containers.stop", Target: fmt.Sprintf("c%d", i), Status: 401,
	}
}

func metrics(events, dropped, errs int) string {
	return fmt.Sprintf(`
# HELP gpumeter_audit_dropped_total Audit events dropped because the audit queue was full.
# TYPE gpumeter_audit_dropped_total counter
gpumeter_audit_dropped_total %d
# HELP gpumeter_audit_events_total Audit events written to the audit file and the ledger, each that was configured.
# TYPE gpumeter_audit_events_total counter
gpumeter_audit_events_total %d
# HELP gpumeter_audit_write_errors_total Failed writes of audit events: one per event to the file, one per batch to the ledger.
# TYPE gpumeter_audit_write_errors_total counter
gpumeter_audit_write_errors_total %d
`, dropped, events, errs)
}

// TestLogRoundTrip: recorded events reach the file and the ledger, with
// the node and time filled in, while Run runs and when it stops.
func TestLogRoundTrip(t *testing.T) {
	f, s := openFile(t), openStore(t)
	l := audit.NewLog(audit.LogConfig{File: f, Store: s, Node: "n1"})
	stop := start(t, l)

	policy := audit.Event{Time: t0, Node: "n0", Kind: "stop", Rule: "idle", FindingID: "idle-1", ContainerID: "abc", Owner: "carol",
		Evidence: map[string]float64{"sm_percent": 0.5}, Outcome: "stopped", Caller: "policy"}
	l.Record(policy)
	var auditor audit.Auditor = l // as the policy engine holds it
	if err := auditor.Audit(context.Background(), apiEvent(1)); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, l, 2)
	before := time.Now()
	l.Record(audit.Event{Kind: audit.KindAPI, Outcome: audit.OutcomeAllowed, Caller: "bob", Role: "admin",
		Source: "unix uid 0", Action: "containers.stop", Target: "def", Status: 200})
	stop() // if Run has not taken the last event yet, the flush writes it

	want := []audit.Event{policy, apiEvent(1), {Node: "n1", Kind: audit.KindAPI, Outcome: audit.OutcomeAllowed, Caller: "bob",
		Role: "admin", Source: "unix uid 0", Action: "containers.stop", Target: "def", Status: 200}}
	want[1].Node = "n1"
	ignoreTime := cmpopts.IgnoreFields(audit.Event{}, "Time")

	fromFile, err := audit.ReadFile(f.Path(), time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	fromStore, err := s.AuditEvents(context.Background(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var fromLedger []audit.Event
	for _, e := range fromStore {
		fromLedger = append(fromLedger, audit.FromLedger(e))
	}
	for name, got := range map[string][]audit.Event{"file": fromFile, "ledger": fromLedger} {
		if diff := cmp.Diff(want, got, ignoreTime); diff != "" {
			t.Errorf("events in the %s (-want +got):\n%s", name, diff)
			continue
		}
		if !got[0].Time.Equal(t0) || !got[1].Time.Equal(t0.Add(time.Second)) {
			t.Errorf("times in the %s = %v, %v; want the ones recorded", name, got[0].Time, got[1].Time)
		}
		if got[2].Time.Before(before.Truncate(time.Microsecond)) || time.Since(got[2].Time) > time.Minute {
			t.Errorf("time filled in the %s = %v, want about %v", name, got[2].Time, before)
		}
	}
	if err := testutil.CollectAndCompare(l, strings.NewReader(metrics(3, 0, 0))); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(l); err != nil || len(problems) > 0 {
		t.Errorf("CollectAndLint = %v, %v", problems, err)
	}
}

// TestLogOverflow: what does not fit in the queue is counted, and a
// summary saying how many were lost goes out ahead of the rest.
func TestLogOverflow(t *testing.T) {
	f, s := openFile(t), openStore(t)
	l := audit.NewLog(audit.LogConfig{File: f, Store: s, Node: "n1", Size: 4})
	for i := range 10 {
		l.Record(apiEvent(i))
	}
	if got := l.Dropped(); got != 6 {
		t.Errorf("Dropped() = %d, want 6", got)
	}
	start(t, l)
	got := waitEvents(t, l, 5)
	// The summary is stamped when it is written, after the events it
	// goes out with.
	summary := audit.Event{Node: "n1", Kind: audit.KindAPI, Action: audit.ActionDropped, Outcome: audit.OutcomeDropped,
		Error: "6 events were not recorded: the audit queue was full"}
	want := []audit.Event{apiEvent(0), apiEvent(1), apiEvent(2), apiEvent(3), summary}
	for i := range 4 {
		want[i].Node = "n1"
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(audit.Event{}, "Time")); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
	fromFile, err := audit.ReadFile(f.Path(), time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, fromFile, cmpopts.IgnoreFields(audit.Event{}, "Time")); diff != "" {
		t.Errorf("file (-want +got):\n%s", diff)
	}
	if err := testutil.CollectAndCompare(l, strings.NewReader(metrics(5, 6, 0))); err != nil {
		t.Error(err)
	}
}

// stuckStore is a ledger whose writes wait for release (or for their
// context to end) before they succeed.
type stuckStore struct {
	entered chan struct{} // a value each time a write starts waiting
	release chan struct{} // closed to let writes through

	mu     sync.Mutex
	events []ledger.AuditEvent
}

func newStuckStore() *stuckStore {
	return &stuckStore{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (s *stuckStore) Audit(ctx context.Context, events []ledger.AuditEvent) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, events...)
	return nil
}

func (s *stuckStore) AuditEvents(context.Context, ledger.Filter) ([]ledger.AuditEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ledger.AuditEvent(nil), s.events...), nil
}

func (s *stuckStore) stored() []ledger.AuditEvent {
	got, _ := s.AuditEvents(context.Background(), ledger.Filter{})
	return got
}

// TestRecordNeverBlocks: with the ledger stuck, Record returns at once,
// however many events come, and what the queue cannot take is counted.
func TestRecordNeverBlocks(t *testing.T) {
	s := newStuckStore()
	f := openFile(t)
	l := audit.NewLog(audit.LogConfig{File: f, Store: s, Size: 8})
	stop := start(t, l)
	l.Record(apiEvent(0))
	<-s.entered // Run now waits on the ledger

	const flood = 100000
	done := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(done)
		for i := range flood {
			l.Record(apiEvent(i + 1))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Record blocked while the ledger was stuck")
	}
	t.Logf("%d Record calls took %v with the ledger stuck", flood, time.Since(began))
	if got := l.Dropped(); got != flood-8 {
		t.Errorf("Dropped() = %d, want %d", got, flood-8)
	}

	close(s.release)
	stop()
	got := s.stored()
	if len(got) != 10 {
		t.Fatalf("ledger has %d events, want 10: the first, the summary, the 8 queued", len(got))
	}
	if want := fmt.Sprintf("%d events were not recorded: the audit queue was full", flood-8); got[1].Action != audit.ActionDropped || got[1].Error != want {
		t.Errorf("second event = %+v, want the summary saying %q", got[1], want)
	}
	fromFile, err := audit.ReadFile(f.Path(), time.Time{}, time.Time{})
	if err != nil || len(fromFile) != 10 {
		t.Errorf("file has %d events, %v; want 10", len(fromFile), err)
	}
	if err := testutil.CollectAndCompare(l, strings.NewReader(metrics(10, flood-8, 0))); err != nil {
		t.Error(err)
	}
}

// TestStopDuringLedgerWrite: a ledger write cut short by the end of Run's
// context is made again, once, under the flush's own deadline, and the
// file does not get the events twice.
func TestStopDuringLedgerWrite(t *testing.T) {
	s := newStuckStore()
	f := openFile(t)
	l := audit.NewLog(audit.LogConfig{File: f, Store: s})
	stop := start(t, l)
	l.Record(apiEvent(0))
	<-s.entered
	l.Record(apiEvent(1))
	go func() {
		<-s.entered // the flush tries the first event again
		close(s.release)
	}()
	stop()
	got := s.stored()
	if len(got) != 2 || got[0].Target != "c0" || got[1].Target != "c1" {
		t.Errorf("ledger = %+v, want c0 then c1", got)
	}
	fromFile, err := audit.ReadFile(f.Path(), time.Time{}, time.Time{})
	if err != nil || len(fromFile) != 2 {
		t.Errorf("file has %d events, %v; want 2", len(fromFile), err)
	}
	if err := testutil.CollectAndCompare(l, strings.NewReader(metrics(2, 0, 0))); err != nil {
		t.Error(err)
	}
}

// failingStore refuses every write.
type failingStore struct{}

func (failingStore) Audit(context.Context, []ledger.AuditEvent) error {
	return errors.New("disk I/O error")
}

func (failingStore) AuditEvents(context.Context, ledger.Filter) ([]ledger.AuditEvent, error) {
	return nil, errors.New("disk I/O error")
}

// TestWriteErrors: failed writes are counted, not returned, and the events
// still go wherever else they can.
func TestWriteErrors(t *testing.T) {
	t.Run("Ledger", func(t *testing.T) {
		f := openFile(t)
		l := audit.NewLog(audit.LogConfig{File: f, Store: failingStore{}})
		for i := range 3 {
			l.Record(apiEvent(i))
		}
		start(t, l)()
		if got, err := audit.ReadFile(f.Path(), time.Time{}, time.Time{}); err != nil || len(got) != 3 {
			t.Errorf("file has %d events, %v; want 3", len(got), err)
		}
		// One batch: one error, and no event reached everywhere.
		if err := testutil.CollectAndCompare(l, strings.NewReader(metrics(0, 0, 1))); err != nil {
			t.Error(err)
		}
		if _, _, err := l.Events(context.Background(), time.Time{}, time.Time{}, 0); err == nil {
			t.Error("Events with a failing ledger succeeded")
		}
	})
	t.Run("File", func(t *testing.T) {
		f, s := openFile(t), openStore(t)
		f.Close()
		l := audit.NewLog(audit.LogConfig{File: f, Store: s})
		for i := range 3 {
			l.Record(apiEvent(i))
		}
		start(t, l)()
		if got, _ := s.AuditEvents(context.Background(), ledger.Filter{}); len(got) != 3 {
			t.Errorf("ledger has %d events, want 3", len(got))
		}
		if err := testutil.CollectAndCompare(l, strings.NewReader(metrics(0, 0, 3))); err != nil {
			t.Error(err)
		}
	})
}

func TestEvents(t *testing.T) {
	backends := []struct {
		name string
		cfg  func(t *testing.T) audit.LogConfig
	}{
		{"File", func(t *testing.T) audit.LogConfig { return audit.LogConfig{File: openFile(t)} }},
		{"Ledger", func(t *testing.T) audit.LogConfig { return audit.LogConfig{File: openFile(t), Store: openStore(t)} }},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			l := audit.NewLog(b.cfg(t))
			var all []audit.Event
			for i := range 5 {
				e := apiEvent(i)
				e.Node = "n1"
				all = append(all, e)
				l.Record(e)
			}
			start(t, l)()
			for _, tc := range []struct {
				name      string
				from, to  time.Time
				limit     int
				want      []audit.Event
				truncated bool
			}{
				{"All", time.Time{}, time.Time{}, 0, all, false},
				{"AtLimit", time.Time{}, time.Time{}, 5, all, false},
				{"Newest", time.Time{}, time.Time{}, 2, all[3:], true},
				{"Window", t0.Add(time.Second), t0.Add(4 * time.Second), 0, all[1:4], false},
				{"WindowNewest", t0.Add(time.Second), t0.Add(4 * time.Second), 1, all[3:4], true},
				{"None", t0.Add(time.Hour), time.Time{}, 10, nil, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					got, truncated, err := l.Events(context.Background(), tc.from, tc.to, tc.limit)
					if err != nil {
						t.Fatal(err)
					}
					if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
						t.Errorf("Events (-want +got):\n%s", diff)
					}
					if truncated != tc.truncated {
						t.Errorf("truncated = %v, want %v", truncated, tc.truncated)
					}
				})
			}
		})
	}
	t.Run("Nowhere", func(t *testing.T) {
		l := audit.NewLog(audit.LogConfig{})
		l.Record(apiEvent(0))
		start(t, l)()
		if _, _, err := l.Events(context.Background(), time.Time{}, time.Time{}, 0); err == nil {
			t.Error("Events with neither a file nor a ledger succeeded")
		}
		if err := testutil.CollectAndCompare(l, strings.NewReader(metrics(1, 0, 0))); err != nil {
			t.Error(err)
		}
	})
}

// BenchmarkRecord measures what an HTTP handler pays to audit a request.
func BenchmarkRecord(b *testing.B) {
	l := audit.NewLog(audit.LogConfig{Node: "n1"})
	start(b, l)
	e := apiEvent(0)
	b.ReportAllocs()
	for b.Loop() {
		l.Record(e)
	}
}
