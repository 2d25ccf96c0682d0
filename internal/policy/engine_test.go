package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// world is a hand-written fake of the findings, the containers and the
// stopper, driven by the test.
type world struct {
	mu       sync.Mutex
	findings []waste.Finding
	ctrs     map[string]container.Container
	stopped  []string
	stopErr  error
	now      time.Time
}

func (w *world) Findings() []waste.Finding {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]waste.Finding(nil), w.findings...)
}

func (w *world) Lookup(id string) (container.Container, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.ctrs[id]
	return c, ok
}

func (w *world) Stop(_ context.Context, id string, _ time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopErr != nil {
		return w.stopErr
	}
	w.stopped = append(w.stopped, id)
	c := w.ctrs[id]
	c.Running = false
	w.ctrs[id] = c
	return nil
}

func (w *world) Now() time.Time { return w.now }

type memAudit struct {
	mu     sync.Mutex
	events []audit.Event
}

func (m *memAudit) Act(_ context.Context, e audit.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, e)
	return nil
}

func (m *memAudit) outcomes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, e := range m.events {
		out = append(out, e.Kind+":"+e.Container+":"+e.Outcome)
	}
	return out
}

func finding(id, name string, active bool) waste.Finding {
	return waste.Finding{ID: id, Rule: config.RuleIdle, OwnerKind: waste.OwnerContainer, ContainerID: "c-" + name,
		Container: name, Owner: "bob", Active: active, GPUs: []waste.GPURef{{Index: 0}},
		Evidence: map[string]float64{waste.EvSMPercent: 0}}
}

func newWorld(names ...string) *world {
	w := &world{ctrs: map[string]container.Container{}, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, n := range names {
		w.ctrs["c-"+n] = container.Container{ID: "c-" + n, Name: n, Running: true, Labels: map[string]string{}}
	}
	return w
}

func newTestEngine(w *world, p config.Policy, a Auditor, log *bytes.Buffer) *Engine {
	var logger *slog.Logger
	if log != nil {
		logger = slog.New(slog.NewTextHandler(log, nil))
	}
	return NewEngine(EngineConfig{Policy: p, Findings: w.Findings, Stopper: w, Containers: w, Audit: a,
		Logger: logger, Now: w.Now, Backoff: time.Millisecond})
}

// look is one step of e and then, on the test's goroutine and in order,
// every action the step decided on.
func look(e *Engine) {
	e.step()
	for j := e.jobs.tryTake(); j != nil; j = e.jobs.tryTake() {
		e.do(context.Background(), context.Background(), j)
		e.jobs.done(j)
	}
}

func stopPolicy(url string) config.Policy {
	p := DefaultConfig()
	p.DryRun = false
	p.Actions.Idle = config.ActionStop
	p.WarningWait = time.Minute
	p.Webhook.URL = url
	return p
}

func TestEngineWarnsThenStops(t *testing.T) {
	var got []Message
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m Message
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			t.Errorf("decode: %v", err)
		}
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	}))
	defer srv.Close()

	w := newWorld("idle", "exempt", "busy-later", "gone")
	c := w.ctrs["c-exempt"]
	c.Labels["gpumeter.exempt"] = "true"
	w.ctrs["c-exempt"] = c
	w.findings = []waste.Finding{finding("f1", "idle", true), finding("f2", "exempt", true),
		finding("f3", "busy-later", true), finding("f4", "gone", true), finding("f5", "busy", false)}
	a := &memAudit{}
	e := newTestEngine(w, stopPolicy(srv.URL), a, nil)

	look(e) // warnings
	w.now = w.now.Add(30 * time.Second)
	w.findings[2].Active = false // busy-later got busy during the warning
	delete(w.ctrs, "c-gone")     // and gone disappeared
	look(e)
	w.now = w.now.Add(30 * time.Second)
	look(e) // the stops
	w.now = w.now.Add(time.Minute)
	look(e) // nothing more: the idle one is done

	want := []string{
		"warn:idle:sent", "warn:busy-later:sent", "warn:gone:sent",
		"stop:busy-later:cancelled",
		"stop:idle:stopped", "stop:gone:gone",
	}
	if fmt.Sprint(a.outcomes()) != fmt.Sprint(want) {
		t.Errorf("audit = %v\nwant %v", a.outcomes(), want)
	}
	if fmt.Sprint(w.stopped) != "[c-idle]" {
		t.Errorf("stopped %v, want [c-idle]", w.stopped)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || got[0].Kind != EventWarn || got[0].StopAt == nil || !strings.Contains(got[0].Text, "will be stopped") {
		t.Errorf("webhook got %+v, want 3 warnings", got)
	}
}

func TestEngineStopOfVanishedContainerIsAudited(t *testing.T) {
	w := newWorld("idle")
	w.findings = []waste.Finding{finding("f1", "idle", true)}
	w.stopErr = fmt.Errorf("stop c-idle: %w", container.ErrNotFound)
	a := &memAudit{}
	p := stopPolicy("")
	e := newTestEngine(w, p, a, nil)
	look(e)
	w.now = w.now.Add(time.Minute)
	look(e)
	want := []string{"warn:idle:logged", "stop:idle:gone"}
	if fmt.Sprint(a.outcomes()) != fmt.Sprint(want) {
		t.Errorf("audit = %v, want %v", a.outcomes(), want)
	}
}

func TestEngineDryRunLogsWhatItWouldDo(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits++ }))
	defer srv.Close()
	w := newWorld("idle")
	w.findings = []waste.Finding{finding("f1", "idle", true)}
	p := stopPolicy(srv.URL)
	p.DryRun = true
	a := &memAudit{}
	var log bytes.Buffer
	e := newTestEngine(w, p, a, &log)
	look(e)
	w.now = w.now.Add(time.Minute)
	look(e)
	if hits != 0 || len(w.stopped) != 0 {
		t.Errorf("dry run posted %d times and stopped %v", hits, w.stopped)
	}
	want := []string{"warn:idle:dry_run", "stop:idle:dry_run"}
	if fmt.Sprint(a.outcomes()) != fmt.Sprint(want) {
		t.Errorf("audit = %v, want %v", a.outcomes(), want)
	}
	for _, line := range []string{
		`msg="policy dry run: would warn, then stop the container" rule=idle container=idle container_id=c-idle owner=bob finding=f1 webhook=` + srv.URL + ` stop_at=2026-01-01T00:01:00Z`,
		`msg="policy dry run: would stop the container" rule=idle container=idle container_id=c-idle owner=bob finding=f1 grace=30s`,
	} {
		if !strings.Contains(log.String(), line) {
			t.Errorf("log:\n%s\nwant a line with\n%s", log.String(), line)
		}
	}
}

func TestEngineActions(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	w := newWorld("a", "b")
	stalled := finding("f2", "b", true)
	stalled.Rule = config.RuleStalled
	outside := waste.Finding{ID: "f3", Rule: config.RuleOutside, OwnerKind: waste.OwnerHost, Owner: "carol", Active: true}
	w.findings = []waste.Finding{finding("f1", "a", true), stalled, outside}
	p := DefaultConfig()
	p.DryRun = false
	p.Webhook.URL = srv.URL
	p.Actions.Stalled = config.ActionNotify
	p.Actions.Outside = config.ActionNotify
	a := &memAudit{}
	e := newTestEngine(w, p, a, nil)
	for range 3 {
		look(e)
		w.now = w.now.Add(time.Hour)
	}
	// idle reports (nothing to do); the others notify once each.
	want := []string{"notify:b:sent", "notify::sent"}
	if fmt.Sprint(a.outcomes()) != fmt.Sprint(want) {
		t.Errorf("audit = %v, want %v", a.outcomes(), want)
	}
	// A reload that turns idle to stop takes effect on the next step.
	p.Actions.Idle = config.ActionStop
	e.SetPolicy(p)
	look(e)
	if n := len(a.events); n != 3 || a.events[2].Kind != EventWarn {
		t.Errorf("after the reload: audit = %v, want a warning", a.outcomes())
	}
	// One that exempts its owner calls the stop off.
	p.Exempt.Owners = []string{"bob"}
	e.SetPolicy(p)
	w.now = w.now.Add(time.Hour)
	look(e)
	if n := len(a.events); n != 4 || a.events[3].Outcome != OutcomeExempt || a.events[3].Error != "owner bob" {
		t.Errorf("after exempting bob: audit = %v, want the stop off", a.outcomes())
	}
}

func TestWebhookRetries(t *testing.T) {
	var calls int
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls++
		if calls < 3 {
			http.Error(w, "boom", http.StatusInternalServerError)
		}
	}))
	defer flaky.Close()
	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(block)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer broken.Close()
	var notFoundCalls int
	notFound := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		notFoundCalls++
		http.NotFound(w, nil)
	}))
	defer notFound.Close()
	var limitedCalls int
	limited := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		limitedCalls++
		if limitedCalls == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer limited.Close()
	later := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer later.Close()
	bare429 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer bare429.Close()
	gone := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	gone.Close()

	tests := []struct {
		name     string
		url      string
		attempts int
		err      string
		// took is how long post must at least take: a Retry-After it
		// waits out. There is no upper figure, which a busy machine
		// would break: within is how long until the test calls it hung,
		// well under the context's minute, which a post that ignored its
		// webhook's 100 ms timeout would run into instead.
		took time.Duration
	}{
		{"500 then 200", flaky.URL, 3, "", 0},
		{"times out", slow.URL, 3, "deadline exceeded", 0},
		{"always 500", broken.URL, 3, "500 Internal Server Error", 0},
		{"unreachable", gone.URL, 3, "connection refused", 0},
		// A 4xx cannot succeed later: it is not tried again.
		{"404", notFound.URL, 1, "404 Not Found", 0},
		// A 429 is, after the Retry-After it names,
		{"429 then 200", limited.URL, 2, "", time.Second},
		// or after the backoff when it names none,
		{"429 without Retry-After", bare429.URL, 3, "429 Too Many Requests", 0},
		// but not when the Retry-After is past the action's deadline.
		{"429 retry after an hour", later.URL, 1, "429 Too Many Requests (Retry-After 1h0m0s)", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			w := config.Webhook{URL: tt.url, Timeout: 100 * time.Millisecond, Retries: 2}
			start := time.Now()
			n, err := post(ctx, http.DefaultClient, w, time.Millisecond, Message{Text: "hi"})
			if n != tt.attempts {
				t.Errorf("attempts = %d, want %d", n, tt.attempts)
			}
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("err = %v, want %q", err, tt.err)
			}
			// A Retry-After is waited out: a lower bound, which load
			// only makes longer. The context's minute guards against a
			// post that never gives up; reaching it fails.
			if d := time.Since(start); d < tt.took {
				t.Errorf("took %s, want at least the %s asked for", d, tt.took)
			}
			if ctx.Err() != nil {
				t.Errorf("post ran until the test's deadline: %v", ctx.Err())
			}
		})
	}
	if notFoundCalls != 1 {
		t.Errorf("the 404 webhook was called %d times, want once", notFoundCalls)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"120", 2 * time.Minute, true},
		{"Thu, 01 Jan 2026 00:00:30 GMT", 30 * time.Second, true},
		{"Wed, 31 Dec 2025 23:00:00 GMT", 0, true}, // passed: at once
		{"-5", 0, false},
		{"soon", 0, false},
	}
	for _, tt := range tests {
		got, ok := retryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestEngineWebhookFailureIsAudited(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	w := newWorld("b")
	f := finding("f1", "b", true)
	w.findings = []waste.Finding{f}
	p := DefaultConfig()
	p.DryRun = false
	p.Webhook = config.Webhook{URL: srv.URL, Timeout: time.Second, Retries: 1}
	p.Actions.Idle = config.ActionNotify
	a := &memAudit{}
	e := newTestEngine(w, p, a, nil)
	look(e)
	if len(a.events) != 1 || a.events[0].Outcome != OutcomeFailed || a.events[0].Attempts != 2 || a.events[0].Error == "" {
		t.Errorf("audit = %+v, want one failed notify after 2 attempts", a.events)
	}
}
