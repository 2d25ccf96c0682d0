package audit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpumeter/gpumeter/internal/audit"
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

// apiEvent is the i-th refusal of a flood from one address: one second
// apart, each from a port of its own, each on its own container.
func apiEvent(i int) audit.Event {
	return audit.Event{
		Time: t0.Add(time.Duration(i) * time.Second), Kind: audit.KindAPI, Outcome: audit.OutcomeDenied,
		Caller: "anonymous", Source: fmt.Sprintf("192.0.2.7:%d", 50000+i), Action: "containers.stop", Target: fmt.Sprintf("c%d", i), Status: 401,
	}
}

// stopEvent is the i-th container stopped through the API.
func stopEvent(i int) audit.Event {
	return audit.Event{
		Time: t0.Add(time.Duration(i) * time.Second), Kind: audit.KindAPI, Outcome: audit.OutcomeAllowed, Caller: "bob", Role: "admin",
		Source: "unix uid 0", Action: "containers.stop", Target: fmt.Sprintf("container c%d", i), Status: 200,
	}
}

// kinds is the metrics of one counter by kind.
func kinds(name, help string, refused, rejected, failed, read int) string {
	return fmt.Sprintf(`# HELP %[1]s %[2]s
# TYPE %[1]s counter
%[1]s{kind="failed"} %[5]d
%[1]s{kind="read"} %[6]d
%[1]s{kind="refused"} %[3]d
%[1]s{kind="rejected"} %[4]d
`, name, help, refused, rejected, failed, read)
}

// metrics is what the Log exports after events written, refusals
// observed and dropped, and errs failed writes.
func metrics(events, observed, dropped, errs int) string {
	return kinds("gpumeter_audit_dropped_total", "Refusals and reads not recorded because the audit log was too far behind, by kind; actions are never dropped.", dropped, 0, 0, 0) +
		fmt.Sprintf(`# HELP gpumeter_audit_events_total Audit events written to the audit file and the ledger, each that was configured; a sum of observations is one.
# TYPE gpumeter_audit_events_total counter
gpumeter_audit_events_total %d
`, events) +
		kinds("gpumeter_audit_observed_total", "Refusals and reads the audit log was told of, by kind, before they were summed.", observed, 0, 0, 0) +
		fmt.Sprintf(`# HELP gpumeter_audit_write_errors_total Failed writes of audit events: one per event to the file, one per batch to the ledger.
# TYPE gpumeter_audit_write_errors_total counter
gpumeter_audit_write_errors_total %d
`, errs)
}

func readBack(t *testing.T, f *audit.File, s audit.Store) map[string][]audit.Event {
	t.Helper()
	fromFile, err := audit.ReadFile(f.Path(), time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	fromStore, err := s.AuditEvents(context.Background(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]audit.Event{"file": fromFile, "ledger": fromStore}
}

// calls is how many calls events stand for: each itself, or its count.
func calls(events []audit.Event, match func(audit.Event) bool) int64 {
	var n int64
	for _, e := range events {
		if match(e) {
			n += max(e.Count, 1)
		}
	}
	return n
}

// TestActWritesBeforeReturning: an action is in the file and the ledger
// when Act returns, with no Run at all, and with the node and time filled
// in, whether the policy engine or the API acted.
func TestActWritesBeforeReturning(t *testing.T) {
	f, s := openFile(t), openStore(t)
	l := audit.NewLog(audit.LogConfig{File: f, Store: s, Node: "n1"})
	policy := audit.Event{Time: t0, Node: "n0", Kind: "stop", Rule: "idle", FindingID: "idle-1", ContainerID: "abc", Owner: "carol",
		Evidence: map[string]float64{"sm_percent": 0.5}, Outcome: "stopped", Caller: "policy"}
	if err := l.Act(context.Background(), policy); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	api := stopEvent(1)
	api.Time = time.Time{}
	if err := l.Act(context.Background(), api); err != nil {
		t.Fatal(err)
	}
	want := []audit.Event{policy, stopEvent(1)}
	want[1].Node = "n1"
	for name, got := range readBack(t, f, s) {
		if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(audit.Event{}, "Time")); diff != "" {
			t.Errorf("events in the %s (-want +got):\n%s", name, diff)
			continue
		}
		if !got[0].Time.Equal(t0) || got[1].Time.Before(before.Truncate(time.Microsecond)) || time.Since(got[1].Time) > time.Minute {
			t.Errorf("times in the %s = %v, %v; want t0 and about %v", name, got[0].Time, got[1].Time, before)
		}
	}
	if err := testutil.CollectAndCompare(l, strings.NewReader(metrics(2, 0, 0, 0))); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(l); err != nil || len(problems) > 0 {
		t.Errorf("CollectAndLint = %v, %v", problems, err)
	}
}

// TestObserveSums: 47,000 refusals from one address in a minute are two
// events: the first as it came, then one with the count of the rest,
// stamped with the start of the minute and from the address without its
// port. A second minute starts a new sum.
func TestObserveSums(t *testing.T) {
	f, s := openFile(t), openStore(t)
	l := audit.NewLog(audit.LogConfig{File: f, Store: s, Node: "n1"})
	minute := t0.Truncate(time.Minute)
	const n = 47_000
	for i := range n {
		e := apiEvent(0)
		e.Time = minute.Add(time.Duration(i) * time.Millisecond) // 47 s
		e.Source = fmt.Sprintf("192.0.2.7:%d", 1024+i%60000)
		e.Target = "c0"
		l.Observe(e)
	}
	next := apiEvent(0)
	next.Time = minute.Add(time.Minute)
	l.Observe(next)
	start(t, l)()

	first := apiEvent(0)
	first.Time, first.Source, first.Target, first.Node = minute, "192.0.2.7:1024", "c0", "n1"
	sum := first
	sum.Source, sum.Count = "192.0.2.7", n-1
	second := next
	second.Node = "n1"
	want := []audit.Event{first, sum, second}
	for name, got := range readBack(t, f, s) {
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("events in the %s (-want +got):\n%s", name, diff)
		}
	}
	if err := testutil.CollectAndCompare(l, strings.NewReader(metrics(3, n+1, 0, 0))); err != nil {
		t.Error(err)
	}
}

// TestObserveTargets: a sum keeps the target of its calls when they all
// had one, and none when they differ; reads are only summed, never
// written one by one.
func TestObserveTargets(t *testing.T) {
	f, s := openFile(t), openStore(t)
	l := audit.NewLog(audit.LogConfig{File: f, Store: s})
	read := audit.Event{Time: t0, Kind: audit.KindAPI, Outcome: audit.OutcomeAllowed, Caller: "vera (token vera)", Role: "viewer",
		Source: "192.0.2.9:4000", Action: "containers.read", Target: "GET /api/v1/containers", Status: 200}
	for range 3 {
		l.Observe(read)
	}
	for i := range 3 {
		l.Observe(apiEvent(i))
	}
	start(t, l)()
	got, _, err := l.Events(context.Background(), time.Time{}, time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	sumRead := read
	sumRead.Time, sumRead.Source, sumRead.Count = t0.Truncate(time.Minute), "192.0.2.9", 3
	sumRefused := apiEvent(0)
	sumRefused.Time, sumRefused.Source, sumRefused.Target, sumRefused.Count = t0.Truncate(time.Minute), "192.0.2.7", "", 2
	// The sums are stamped with the start of the minute, before the
	// first refusal.
	want := []audit.Event{sumRead, sumRefused, apiEvent(0)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestObserveCaps: refusals from 100,000 addresses, IPv4 and IPv6, in
// one minute are summed by address up to MaxSources, then by /24 or /64,
// then by status: the events stay within the caps, and every call is
// counted once.
func TestObserveCaps(t *testing.T) {
	f, s := openFile(t), openStore(t)
	l := audit.NewLog(audit.LogConfig{File: f, Store: s, MaxSources: 16, MaxKeys: 64})
	minute := t0.Truncate(time.Minute)
	const n = 100_000
	for i := range n {
		e := apiEvent(0)
		e.Time = minute.Add(time.Duration(i) * 500 * time.Microsecond)
		if i%2 == 0 {
			e.Source = fmt.Sprintf("10.%d.%d.%d:443", i>>16&255, i>>8&255, i&255)
		} else {
			e.Source = fmt.Sprintf("[2001:db8:%x:%x::1]:443", i>>8, i&255)
		}
		l.Observe(e)
	}
	start(t, l)()
	for name, got := range readBack(t, f, s) {
		// 48 sums by address, each with its first; 16 by prefix; one
		// by status.
		if len(got) > 2*48+16+1 {
			t.Errorf("%s: %d events, want at most %d", name, len(got), 2*48+16+1)
		}
		if c := calls(got, func(audit.Event) bool { return true }); c != n {
			t.Errorf("%s: the events stand for %d calls, want %d", name, c, n)
		}
		byKind := map[string]int{}
		for _, e := range got {
			switch {
			case e.Source == "*":
				byKind["rest"]++
				if e.Status != 401 || e.Outcome != audit.OutcomeDenied {
					t.Errorf("%s: the sum of the rest %+v does not keep the status and outcome", name, e)
				}
			case strings.HasSuffix(e.Source, "/24") || strings.HasSuffix(e.Source, "/64"):
				byKind["prefix"]++
			case e.Count == 0:
				byKind["first"]++
			}
		}
		if byKind["first"] != 16 || byKind["prefix"] != 16 || byKind["rest"] != 1 {
			t.Errorf("%s: %d firsts, %d sums by prefix, %d of the rest; want 16, 16 and 1", name, byKind["first"], byKind["prefix"], byKind["rest"])
		}
	}
}

// TestObservedBound: a window of refusals made to be as large as can be,
// every sum of it used twice or more, from a thousand addresses in as many
// /24s, with long, escaped text everywhere, writes at most MaxWindowBytes,
// and the default bound is under 1 MiB.
func TestObservedBound(t *testing.T) {
	f := openFile(t)
	l := audit.NewLog(audit.LogConfig{File: f, Node: strings.Repeat("n", 500)})
	if b := l.MaxWindowBytes(); b > 1<<20 {
		t.Errorf("MaxWindowBytes() = %d, want at most 1 MiB", b)
	}
	long := strings.Repeat("<\x00\xff\"", 250)
	minute := t0.Truncate(time.Minute)
	const n = 64 * 1024
	for round := range 2 {
		for i := range n {
			l.Observe(audit.Event{
				Time: minute.Add(time.Duration(round*n+i) * 400 * time.Microsecond), Kind: long, Rule: long, FindingID: long,
				ContainerID: long, Container: long, Owner: long, Evidence: map[string]float64{long: 1}, Outcome: long + fmt.Sprint(i/1024%2),
				Attempts: 1 << 30, Caller: long, Role: long, Source: fmt.Sprintf("10.%d.%d.1:65535", i/256%4, i%256),
				Action: long, Target: long + fmt.Sprint(round), Status: 100 + i/2048, Error: long + fmt.Sprint(i%8),
			})
		}
	}
	start(t, l)()
	b, err := os.ReadFile(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Count(b, []byte("\n"))
	if len(b) > l.MaxWindowBytes() {
		t.Errorf("one window of observations wrote %d bytes in %d lines, more than MaxWindowBytes %d", len(b), lines, l.MaxWindowBytes())
	}
	// 384 sums by address, each with its first; 128 by prefix; 32 of
	// the rest.
	if lines != 2*384+128+32 {
		t.Errorf("%d lines, want the most there can be, %d: the test does not test the bound", lines, 2*384+128+32)
	}
	t.Logf("%d hostile refusals wrote %d bytes in %d lines; bound %d", 2*n, len(b), lines, l.MaxWindowBytes())
	evs, err := audit.ReadFile(f.Path(), time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if c := calls(evs, func(audit.Event) bool { return true }); c != 2*n {
		t.Errorf("the events stand for %d calls, want %d", c, 2*n)
	}
	for _, e := range evs {
		if len(e.Evidence) > 0 {
			t.Fatalf("an observed event kept its evidence: %+v", e)
		}
	}
}

// stuckStore is a ledger whose writes wait for release (or for their
// context to end) before they succeed.
type stuckStore struct {
	entered chan struct{} // a value each time a write starts waiting
	release chan struct{} // closed to let writes through

	mu     sync.Mutex
	events []audit.Event
}

func newStuckStore() *stuckStore {
	return &stuckStore{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (s *stuckStore) Audit(ctx context.Context, events []audit.Event) error {
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

func (s *stuckStore) AuditEvents(context.Context, audit.Filter) ([]audit.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]audit.Event(nil), s.events...), nil
}

func (s *stuckStore) AuditNewest(ctx context.Context, f audit.Filter, n int) ([]audit.Event, bool, error) {
	all, _ := s.AuditEvents(ctx, f)
	if len(all) > n {
		return all[len(all)-n:], true, nil
	}
	return all, false, nil
}

func (s *stuckStore) stored() []audit.Event {
	got, _ := s.AuditEvents(context.Background(), audit.Filter{})
	return got
}

// TestObserveNeverBlocks: with the ledger stuck, Observe returns at once
// however many refusals come, while Act waits for the ledger, and every
// action is written once it is let through. Only whole windows Run could
// not write are dropped, counted by kind and named in a summary.
func TestObserveNeverBlocks(t *testing.T) {
	s := newStuckStore()
	f := openFile(t)
	var (
		mu  sync.Mutex
		now = t0
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	l := audit.NewLog(audit.LogConfig{File: f, Store: s, Window: time.Minute, Now: clock})
	stop := start(t, l)
	l.Observe(apiEvent(0))
	<-s.entered // Run now waits on the ledger with the first refusal

	acted := make(chan error, 10)
	for i := range 10 {
		go func() { acted <- l.Act(context.Background(), stopEvent(i)) }()
	}
	const flood = 100_000
	done := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(done)
		// Ten minutes of refusals, each minute from other addresses.
		for i := range flood {
			e := apiEvent(0)
			e.Time = t0.Truncate(time.Minute).Add(time.Duration(i) * 6 * time.Millisecond)
			e.Source = fmt.Sprintf("192.0.2.%d:1", i%200)
			if i%10 == 0 {
				e.Outcome, e.Status, e.Error = audit.OutcomeAllowed, 200, ""
			}
			l.Observe(e)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Observe blocked while the ledger was stuck")
	}
	t.Logf("%d Observe calls took %v with the ledger stuck", flood, time.Since(began))
	select {
	case err := <-acted:
		t.Fatalf("Act returned (%v) while the ledger was stuck, want it to wait", err)
	default:
	}
	close(s.release)
	for range 10 {
		if err := <-acted; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	now = t0.Add(time.Hour)
	mu.Unlock()
	stop()

	// Of ten windows, four wait for Run and the first is Run's once it
	// takes it; the others are dropped when a later one begins: 50,000
	// calls but the first ones, or 60,000 when the flood closed the
	// first window before Run took it (a loaded machine, the race
	// detector).
	dropped := l.Dropped()
	if dropped == 0 || dropped > flood*6/10 {
		t.Errorf("Dropped() = %d, want some, at most %d", dropped, flood*6/10)
	}
	evs := s.stored()
	for i := range 10 {
		want := stopEvent(i)
		if calls(evs, func(e audit.Event) bool { return e.Target == want.Target && e.Status == 200 }) != 1 {
			t.Errorf("the stop of %s is not in the ledger once", want.Target)
		}
	}
	var summary *audit.Event
	for i := range evs {
		if evs[i].Action == audit.ActionDropped {
			summary = &evs[i]
		}
	}
	if summary == nil {
		t.Fatal("no summary of the dropped observations")
	}
	for _, kind := range []string{"refused ", "read "} {
		if !strings.Contains(summary.Error, kind) {
			t.Errorf("the summary %q does not name the dropped of kind %s", summary.Error, kind)
		}
	}
	if summary.Count != int64(dropped) || !strings.Contains(summary.Error, "no action is ever dropped") {
		t.Errorf("summary = %+v, want the count %d and that no action was dropped", summary, dropped)
	}
	// Every call is in the ledger, or in the count of the dropped.
	c := calls(evs, func(e audit.Event) bool {
		return e.Kind == audit.KindAPI && e.Action == "containers.stop" && e.Caller == "anonymous"
	})
	if c+int64(dropped) != flood+1 {
		t.Errorf("the ledger stands for %d refusals and reads and %d were dropped, want %d in all", c, dropped, flood+1)
	}
	fromFile, err := audit.ReadFile(f.Path(), time.Time{}, time.Time{})
	if err != nil || len(fromFile) != len(evs) {
		t.Errorf("file has %d events, %v; want %d as the ledger", len(fromFile), err, len(evs))
		byKey := map[string][2]int{}
		for _, e := range fromFile {
			k := fmt.Sprint(e.Outcome, e.Count > 0, e.Action)
			v := byKey[k]
			v[0]++
			byKey[k] = v
		}
		for _, e := range evs {
			k := fmt.Sprint(e.Outcome, e.Count > 0, e.Action)
			v := byKey[k]
			v[1]++
			byKey[k] = v
		}
		t.Log(byKey)
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
	l.Observe(apiEvent(0))
	<-s.entered
	e := apiEvent(1)
	e.Caller = "someone else"
	l.Observe(e)
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
	if err := testutil.CollectAndCompare(l, strings.NewReader(metrics(2, 2, 0, 0))); err != nil {
		t.Error(err)
	}
}

// failingStore refuses every write.
type failingStore struct{}

func (failingStore) Audit(context.Context, []audit.Event) error {
	return errors.New("disk I/O error")
}

func (failingStore) AuditEvents(context.Context, audit.Filter) ([]audit.Event, error) {
	return nil, errors.New("disk I/O error")
}

func (failingStore) AuditNewest(context.Context, audit.Filter, int) ([]audit.Event, bool, error) {
	return nil, false, errors.New("disk I/O error")
}

// TestWriteErrors: an action that could not be written everywhere is an
// error to its caller; failed writes of observations are counted, not
// returned; and events still go wherever else they can.
func TestWriteErrors(t *testing.T) {
	t.Run("Ledger", func(t *testing.T) {
		f := openFile(t)
		l := audit.NewLog(audit.LogConfig{File: f, Store: failingStore{}})
		if err := l.Act(context.Background(), stopEvent(0)); err == nil || !strings.Contains(err.Error(), "disk I/O error") {
			t.Errorf("Act with a failing ledger = %v, want its error", err)
		}
		for i := range 3 {
			e := apiEvent(i)
			e.Caller = fmt.Sprint("c", i)
			l.Observe(e)
		}
		start(t, l)()
		if got, err := audit.ReadFile(f.Path(), time.Time{}, time.Time{}); err != nil || len(got) != 4 {
			t.Errorf("file has %d events, %v; want 4", len(got), err)
		}
		// The action and one batch: two errors, and no event reached
		// everywhere.
		if err := testutil.CollectAndCompare(l, strings.NewReader(metrics(0, 3, 0, 2))); err != nil {
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
		if err := l.Act(context.Background(), stopEvent(0)); err == nil {
			t.Error("Act with a closed file succeeded")
		}
		for i := range 3 {
			e := apiEvent(i)
			e.Caller = fmt.Sprint("c", i)
			l.Observe(e)
		}
		start(t, l)()
		if got, _ := s.AuditEvents(context.Background(), audit.Filter{}); len(got) != 4 {
			t.Errorf("ledger has %d events, want 4", len(got))
		}
		if err := testutil.CollectAndCompare(l, strings.NewReader(metrics(0, 3, 0, 4))); err != nil {
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
				e := stopEvent(i)
				e.Node = "n1"
				all = append(all, e)
				if err := l.Act(context.Background(), e); err != nil {
					t.Fatal(err)
				}
			}
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
		l.Observe(apiEvent(0))
		if err := l.Act(context.Background(), stopEvent(0)); err != nil {
			t.Errorf("Act with nowhere to write = %v, want nil", err)
		}
		start(t, l)()
		if _, _, err := l.Events(context.Background(), time.Time{}, time.Time{}, 0); err == nil {
			t.Error("Events with neither a file nor a ledger succeeded")
		}
		if err := testutil.CollectAndCompare(l, strings.NewReader(metrics(2, 1, 0, 0))); err != nil {
			t.Error(err)
		}
	})
}

// BenchmarkObserve measures what an HTTP handler pays to audit a refusal
// or a read: one address, so that every call finds its sum.
func BenchmarkObserve(b *testing.B) {
	l := audit.NewLog(audit.LogConfig{Node: "n1"})
	start(b, l)
	e := apiEvent(0)
	e.Time = time.Time{}
	b.ReportAllocs()
	for b.Loop() {
		l.Observe(e)
	}
}

// TestRecordedWritesTheFileOnly writes an event the ledger already holds:
// it reaches the file, and the ledger keeps the one row it had.
func TestRecordedWritesTheFileOnly(t *testing.T) {
	f, s := openFile(t), openStore(t)
	l := audit.NewLog(audit.LogConfig{File: f, Store: s, Node: "n1"})
	e := stopEvent(1)
	e.Action, e.Target, e.Node = "jobs.submit", "j-000001", "n1"
	if err := s.Audit(context.Background(), []audit.Event{e}); err != nil {
		t.Fatal(err)
	}
	if err := l.Recorded(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	for name, got := range readBack(t, f, s) {
		if diff := cmp.Diff([]audit.Event{e}, got, cmpopts.IgnoreFields(audit.Event{}, "Time")); diff != "" {
			t.Errorf("events in the %s (-want +got):\n%s", name, diff)
		}
	}
}
