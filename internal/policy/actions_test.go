package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// hungStore is a ledger whose audit writes hang until release is closed
// or their context ends, as a PostgreSQL server behind a dead network
// does.
type hungStore struct {
	release chan struct{}
	began   atomic.Int64 // writes begun
	mu      sync.Mutex
	events  []audit.Event
}

func (s *hungStore) Audit(ctx context.Context, events []audit.Event) error {
	s.began.Add(1)
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

func (s *hungStore) AuditEvents(context.Context, audit.Filter) ([]audit.Event, error) {
	return nil, nil
}

func (s *hungStore) AuditNewest(context.Context, audit.Filter, int) ([]audit.Event, bool, error) {
	return nil, false, nil
}

func (s *hungStore) stored() []audit.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]audit.Event(nil), s.events...)
}

// hungStopper is a Docker whose stops hang until release is closed or
// their context ends.
type hungStopper struct {
	release chan struct{}
	began   atomic.Int64
}

func (s *hungStopper) Stop(ctx context.Context, _ string, _ time.Duration) error {
	s.began.Add(1)
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// arrivals is a finding of each rule named for every look the engine has
// taken, and one for the look it takes: on every step, new idle findings
// arrive.
func arrivals(e *atomic.Pointer[Engine], rules ...string) func() []waste.Finding {
	return func() []waste.Finding {
		n := int(e.Load().steps.Load()) + 1
		var out []waste.Finding
		for i := 1; i <= n; i++ {
			for _, r := range rules {
				f := finding(fmt.Sprintf("%s-%d", r, i), fmt.Sprintf("%s-ctr-%d", r, i), true)
				f.Rule = r
				out = append(out, f)
			}
		}
		return out
	}
}

// waitUntil polls cond until it holds, and fails the test once timeout
// has passed.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEngineKeepsItsStep: a webhook that hangs, a ledger that hangs and a
// Docker whose stops hang, while new idle findings arrive on every look:
// the engine still looks at the findings on every tick. Once they answer
// again, every action is audited, each finding's in the order decided.
func TestEngineKeepsItsStep(t *testing.T) {
	release := make(chan struct{})
	var hungPosts atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m Message
		_ = json.NewDecoder(r.Body).Decode(&m)
		if m.Finding.Rule == config.RuleStalled {
			return // its audit write is what hangs
		}
		hungPosts.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hook.Close()
	store := &hungStore{release: release}
	stopper := &hungStopper{release: release}
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()

	p := DefaultConfig()
	p.DryRun = false
	p.Webhook = config.Webhook{URL: hook.URL, Timeout: time.Hour}
	p.Actions.Idle = config.ActionNotify
	p.Actions.Stalled = config.ActionStop
	p.WarningWait = 0
	var eng atomic.Pointer[Engine]
	e := NewEngine(EngineConfig{
		Policy: p, Findings: arrivals(&eng, config.RuleIdle, config.RuleStalled), Stopper: stopper,
		Audit:    audit.NewLog(audit.LogConfig{Store: store}),
		Interval: 10 * time.Millisecond, Workers: 4, ActionTimeout: time.Minute, AuditTimeout: time.Minute,
	})
	eng.Store(e)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()

	waitUntil(t, 10*time.Second, "workers stuck in the webhook and in the ledger", func() bool {
		return hungPosts.Load() >= 1 && store.began.Load() >= 1
	})
	from := e.steps.Load()
	waitUntil(t, 10*time.Second, "50 more steps", func() bool { return e.steps.Load() >= from+50 })
	if n := len(store.stored()); n != 0 {
		t.Fatalf("the hung ledger has %d events", n)
	}

	unblock()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of its context ending")
	}
	// Every finding the engine saw has its actions audited, once each.
	steps := int(e.steps.Load())
	kinds := map[string][]string{}
	for _, ev := range store.stored() {
		kinds[ev.FindingID] = append(kinds[ev.FindingID], ev.Kind)
	}
	for i := 1; i <= steps; i++ {
		if got := kinds[fmt.Sprintf("idle-%d", i)]; fmt.Sprint(got) != "[notify]" {
			t.Errorf("idle-%d: audit %v, want [notify]", i, got)
		}
		// A stalled finding is warned at the step it arrived and stopped
		// at the next one, if there was one.
		want := "[warn stop]"
		if i == steps {
			want = "[warn]"
		}
		if got := kinds[fmt.Sprintf("stalled-%d", i)]; fmt.Sprint(got) != want {
			t.Errorf("stalled-%d: audit %v, want %s", i, got, want)
		}
	}
	if stopper.began.Load() == 0 {
		t.Error("no stop was tried")
	}
	t.Logf("%d steps, %d audit events, %d hung posts, %d stops", steps, len(store.stored()), hungPosts.Load(), stopper.began.Load())
}

// TestEngineStopsWithTheLedgerHung: when the ledger never answers, Run
// still returns soon after its context ends, and the audit file has an
// event for every action decided.
func TestEngineStopsWithTheLedgerHung(t *testing.T) {
	store := &hungStore{release: make(chan struct{})}
	defer close(store.release)
	f, err := audit.OpenFile(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := stopPolicy("")
	p.DryRun = true
	p.WarningWait = 0
	var eng atomic.Pointer[Engine]
	e := NewEngine(EngineConfig{
		Policy: p, Findings: arrivals(&eng, config.RuleIdle),
		Audit:    audit.NewLog(audit.LogConfig{File: f, Store: store}),
		Interval: 10 * time.Millisecond, Workers: 2, AuditTimeout: time.Hour,
	})
	e.drain = 500 * time.Millisecond
	eng.Store(e)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	waitUntil(t, 10*time.Second, "20 steps with the ledger hung", func() bool {
		return store.began.Load() >= 2 && e.steps.Load() >= 20
	})
	cancel()
	start := time.Now()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of its context ending")
	}
	t.Logf("Run returned %v after its context ended (drain %v)", time.Since(start), e.drain)
	evs, err := audit.ReadFile(f.Path(), time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	warned := map[string]int{}
	for _, ev := range evs {
		if ev.Kind == EventWarn {
			warned[ev.FindingID]++
		}
	}
	steps := int(e.steps.Load())
	for i := 1; i <= steps; i++ {
		if n := warned[fmt.Sprintf("idle-%d", i)]; n != 1 {
			t.Errorf("idle-%d: %d warnings in the audit file, want 1", i, n)
		}
	}
}

// TestQueue: a finding's jobs wait for each other, and only for each
// other; a closed queue gives out what it holds, then nothing.
func TestQueue(t *testing.T) {
	q := newQueue()
	newJob := func(id, kind string) *job { return &job{kind: kind, finding: waste.Finding{ID: id}} }
	a1, a2, b1 := newJob("a", EventWarn), newJob("a", EventStop), newJob("b", EventNotify)
	q.add(a1)
	q.add(a2)
	q.add(b1)
	if j := q.tryTake(); j != a1 {
		t.Fatalf("first take = %+v, want a's warning", j)
	}
	if j := q.tryTake(); j != b1 {
		t.Fatalf("take while a's warning runs = %+v, want b's notification", j)
	}
	if j := q.tryTake(); j != nil {
		t.Fatalf("take while a's warning runs = %+v, want none: a's stop waits", j)
	}
	got := make(chan *job)
	go func() {
		j, _ := q.take()
		got <- j
	}()
	q.done(a1)
	if j := <-got; j != a2 {
		t.Fatalf("take after a's warning = %+v, want a's stop", j)
	}
	q.close()
	q.done(a2)
	q.done(b1)
	if j, ok := q.take(); ok {
		t.Errorf("take from a closed, empty queue = %+v", j)
	}
}
