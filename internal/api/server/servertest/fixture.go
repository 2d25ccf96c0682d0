// Package servertest is the API server's test fixture: the server over a
// node of a few GPUs, containers and users, served over real HTTP, with
// recording fakes for what it acts through, and the callers it lets in.
// The server's tests and the console's run against it, so that both see
// the same node and the same callers.
package servertest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/waste"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

// The node of the fixture: alice runs alice-train on GPU 0 and has a
// stopped alice-old; bob runs bob-train on GPU 1; alice and carol have
// processes outside containers on GPU 0; GPU 0 has a process nobody could
// be found for, and GPU 1 one of a container the inventory does not know.
var (
	AliceTrain = "a1" + strings.Repeat("0", 62)
	AliceOld   = "a2" + strings.Repeat("0", 62)
	BobTrain   = "b1" + strings.Repeat("0", 62)
	Ghost      = "c1" + strings.Repeat("0", 62)

	Start = time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
)

// fixedGPUs reads the same sample every time.
type fixedGPUs struct{ sample gpu.Sample }

func (f fixedGPUs) Read(_ context.Context, now time.Time) (gpu.Sample, error) {
	s := f.sample
	s.Time = now
	return s, nil
}

// fixedInventory lists the same containers every time.
type fixedInventory struct{ list []container.Container }

func (f fixedInventory) Containers(context.Context, time.Time) ([]container.Container, error) {
	return f.list, nil
}

// pidOwners resolves the PIDs in its map.
type pidOwners map[uint32]container.Owner

func (p pidOwners) Resolve(pid uint32) (container.Owner, bool, error) {
	o, ok := p[pid]
	return o, ok, nil
}

// FixtureSampler is the sampler over the fixture's node, two ticks in.
func FixtureSampler() *sampler.Sampler {
	proc := func(pid uint32, sm float64) gpu.Process {
		return gpu.Process{PID: pid, MemoryUsed: 4 << 30, SMUtil: sm, GPUInstanceID: -1, ComputeInstanceID: -1}
	}
	sample := gpu.Sample{DriverVersion: "570.1", Devices: []gpu.Device{
		{Index: 0, UUID: "GPU-0", Model: "H100", MemoryTotal: 80 << 30, MemoryUsed: 16 << 30, Util: 60, PowerWatts: 300, TempC: 50,
			Processes: []gpu.Process{proc(100, 30), proc(200, 10), proc(300, 10), proc(400, 10)}},
		{Index: 1, UUID: "GPU-1", Model: "H100", MemoryTotal: 80 << 30, MemoryUsed: 8 << 30, Util: 40, PowerWatts: 200, TempC: 45,
			Processes: []gpu.Process{proc(101, 30), proc(500, 10)}},
	}}
	ctrs := []container.Container{
		{ID: AliceTrain, Name: "alice-train", Image: "train:1", User: "alice", Team: "ml", Running: true, StartedAt: Start.Add(-time.Hour), GPUs: container.GPURequest{IDs: []string{"0"}}},
		{ID: AliceOld, Name: "alice-old", Image: "train:0", User: "alice", Team: "ml", StartedAt: Start.Add(-3 * time.Hour), FinishedAt: Start.Add(-2 * time.Hour), GPUs: container.GPURequest{IDs: []string{"0"}}},
		{ID: BobTrain, Name: "bob-train", Image: "train:1", User: "bob", Team: "vision", Running: true, StartedAt: Start.Add(-time.Hour), GPUs: container.GPURequest{IDs: []string{"1"}}},
	}
	owners := pidOwners{
		100: {Kind: container.OwnerContainer, ID: AliceTrain},
		101: {Kind: container.OwnerContainer, ID: BobTrain},
		200: {Kind: container.OwnerHost, ID: "alice"},
		300: {Kind: container.OwnerHost, ID: "carol"},
		500: {Kind: container.OwnerContainer, ID: Ghost},
	}
	s := sampler.New(sampler.Config{
		Node: "n1", GPUs: fixedGPUs{sample},
		Inventories: []sampler.Named{{Name: "docker", Inventory: fixedInventory{ctrs}}},
		Resolvers:   []sampler.ProcessResolver{owners},
	})
	s.Step(context.Background(), Start)
	s.Step(context.Background(), Start.Add(time.Minute))
	return s
}

// fixtureWaste holds one finding for alice, bob, carol and nobody.
func fixtureWaste() *waste.Report {
	finding := func(id, rule, owner string, hours, cost float64) waste.Finding {
		return waste.Finding{ID: id, Rule: rule, Node: "n1", OwnerKind: waste.OwnerContainer, Owner: owner,
			GPUs: []waste.GPURef{{Index: 0, UUID: "GPU-0"}}, Since: Start, FirstSeen: Start, Until: Start.Add(time.Hour),
			Active: true, Evidence: map[string]float64{}, WastedGPUHours: hours, Cost: cost}
	}
	raw := &waste.Report{From: Start.Add(-time.Hour), To: Start.Add(time.Hour), Currency: "EUR", Findings: []waste.Finding{
		finding("idle-alice", config.RuleIdle, "alice", 1, 2),
		finding("idle-bob", config.RuleIdle, "bob", 2, 4),
		finding("outside-carol", config.RuleOutside, "carol", 0.5, 1),
		finding("outside-nobody", config.RuleOutside, "", 0.25, 0.5),
	}}
	return raw.Only(func(*waste.Finding) bool { return true })
}

// RecordingAuditor keeps what it is given, and whether it was an
// action.
type RecordingAuditor struct {
	mu     sync.Mutex
	events []audit.Event
	acted  []bool
	// actErr is what Act returns.
	actErr error
}

func (a *RecordingAuditor) Act(_ context.Context, e audit.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events, a.acted = append(a.events, e), append(a.acted, true)
	return a.actErr
}

func (a *RecordingAuditor) Observe(e audit.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events, a.acted = append(a.events, e), append(a.acted, false)
}

func (a *RecordingAuditor) Events(_ context.Context, from, to time.Time, limit int) ([]audit.Event, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []audit.Event
	for _, e := range a.events {
		if !e.Time.Before(from) && e.Time.Before(to) {
			out = append(out, e)
		}
	}
	if len(out) > limit {
		return out[len(out)-limit:], true, nil
	}
	return out, false, nil
}

// Take returns the events recorded since the last take.
func (a *RecordingAuditor) Take() []audit.Event {
	out, _ := a.TakeActed()
	return out
}

// TakeActed returns the events recorded since the last take, and which
// of them were actions.
func (a *RecordingAuditor) TakeActed() ([]audit.Event, []bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out, acted := a.events, a.acted
	a.events, a.acted = nil, nil
	return out, acted
}

// StopCall is one call to a RecordingStopper.
type StopCall struct {
	ID    string
	Grace time.Duration
}

// RecordingStopper notes its calls and fails with Err, after Delay or
// when its context ends, whichever comes first.
type RecordingStopper struct {
	mu    sync.Mutex
	calls []StopCall
	Err   error
	Delay time.Duration
	// after runs after each stop: the fixture takes a new sample then, as
	// the agent would before the next stop of the same container, which
	// it refuses until then.
	after func()
}

func (s *RecordingStopper) Stop(ctx context.Context, id string, grace time.Duration) error {
	select {
	case <-time.After(s.Delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, StopCall{id, grace})
	if s.after != nil {
		s.after()
	}
	return s.Err
}

// Take returns the calls made since the last Take.
func (s *RecordingStopper) Take() []StopCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.calls
	s.calls = nil
	return out
}

// FakeReports answers every request with a report of rows rows, or err.
type FakeReports struct {
	mu   sync.Mutex
	rows int
	err  error
	got  []report.Request
}

func (f *FakeReports) Report(_ context.Context, r report.Request) (*report.Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, r)
	if f.err != nil {
		return nil, f.err
	}
	rep := &report.Report{From: *r.From, To: *r.To, By: r.By, Currency: "USD", Rows: []report.Row{}}
	for i := range f.rows {
		rep.Rows = append(rep.Rows, report.Row{Key: "key" + strconv.Itoa(i), GPUHoursAllocated: 1})
	}
	return rep, nil
}

// Answer sets what the next reports are.
func (f *FakeReports) Answer(rows int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rows, f.err = rows, err
}

// Take returns the requests made since the last Take.
func (f *FakeReports) Take() []report.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.got
	f.got = nil
	return out
}

// ManualClock is the server's clock, moved by the test.
type ManualClock struct {
	mu sync.Mutex
	t  time.Time
}

// Now is the time the test set.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Advance moves the clock on by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// The callers of the fixture.
const (
	AsAdmin   = "admin"
	AsAlice   = "alice"
	AsBob     = "bob"
	AsViewer  = "viewer"
	AsNobody  = "nobody" // a user called "unresolved"
	AsNone    = "no token"
	AsBad     = "bad token"
	AsExpired = "expired token"
)

// Fixture is the API over the node above, served over real HTTP.
type Fixture struct {
	URL     string
	Audit   *RecordingAuditor
	Stopper *RecordingStopper
	Reports *FakeReports
	Clock   *ManualClock
	sampler *sampler.Sampler
	Headers map[string]string // Authorization by caller
}

// Resample takes a sample a second after the clock's now.
func (f *Fixture) Resample() {
	f.sampler.Step(context.Background(), f.Clock.Now().Add(time.Second))
}

// NewFixture serves the API; edit may change its config before it
// starts.
func NewFixture(t *testing.T, edit func(*server.Config)) *Fixture {
	t.Helper()
	return NewFixtureServer(t, edit, nil)
}

// NewFixtureServer is NewFixture with the HTTP server's settings edited
// by httpServer before it starts.
func NewFixtureServer(t *testing.T, edit func(*server.Config), httpServer func(*http.Server)) *Fixture {
	t.Helper()
	f := &Fixture{
		Audit: &RecordingAuditor{}, Stopper: &RecordingStopper{}, Reports: &FakeReports{rows: 2},
		Clock: &ManualClock{t: Start.Add(time.Hour)}, Headers: map[string]string{AsNone: "", AsBad: "Bearer gpm_" + strings.Repeat("x", 43)},
		sampler: FixtureSampler(),
	}
	f.Stopper.after = f.Resample
	var tokens []config.Token
	for _, c := range []struct {
		caller, id, user string
		role             config.Role
		expires          time.Time
	}{
		{AsAdmin, "root-laptop", "root", config.RoleAdmin, time.Time{}},
		{AsAlice, "alice-laptop", "alice", config.RoleUser, time.Time{}},
		{AsBob, "bob-laptop", "bob", config.RoleUser, time.Time{}},
		{AsViewer, "grafana", "grafana", config.RoleViewer, time.Time{}},
		{AsNobody, "nobody", "unresolved", config.RoleUser, time.Time{}},
		// The authenticator reads the real clock.
		{AsExpired, "alice-old", "alice", config.RoleUser, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		secret, tok, err := auth.NewToken(c.id, c.user, c.role, c.expires)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
		f.Headers[c.caller] = "Bearer " + secret
	}
	authn, err := auth.New(auth.Config{Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{
		Ticks: f.sampler, Reports: f.Reports, Waste: FixedWaste{Findings: fixtureWaste()}, Stopper: f.Stopper, Audit: f.Audit,
		Auth:    func() *auth.Authenticator { return authn },
		Limiter: func() *auth.Limiter { return nil },
		Limits:  server.Limits{MaxBodyBytes: 1 << 10, MaxReportWindow: 30 * 24 * time.Hour, MaxReportRows: 100, MaxAuditEvents: 50},
		Now:     f.Clock.Now,
		WhatIf:  &whatif.Service{Ledger: EmptyHistory{}, Now: f.Clock.Now},
	}
	if edit != nil {
		edit(&cfg)
	}
	srv := httptest.NewUnstartedServer(server.New(cfg))
	if httpServer != nil {
		httpServer(srv.Config)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// Answer is one response.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends one request as caller; a non-nil body goes with Content-Type
// application/json unless ctype says otherwise ("-" for none).
func (f *Fixture) Do(t *testing.T, caller, method, path string, body io.Reader, ctype string) Answer {
	t.Helper()
	req, err := http.NewRequest(method, f.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := f.Headers[caller]
	if !ok {
		t.Fatalf("no caller %q", caller)
	}
	if h != "" {
		req.Header.Set("Authorization", h)
	}
	switch {
	case ctype == "-":
	case ctype != "":
		req.Header.Set("Content-Type", ctype)
	case body != nil:
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Answer{resp.StatusCode, resp.Header, b}
}

// Get sends a GET as caller.
func (f *Fixture) Get(t *testing.T, caller, path string) Answer {
	t.Helper()
	return f.Do(t, caller, http.MethodGet, path, nil, "")
}

// Decode reads a JSON body into v.
func (a Answer) Decode(t *testing.T, v any) {
	t.Helper()
	if ct := a.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json; body %s", ct, a.Body)
	}
	if err := json.Unmarshal(a.Body, v); err != nil {
		t.Fatalf("body %s: %v", a.Body, err)
	}
}

// APIError checks that a is the API's JSON error with status and code, and
// that its message speaks to the caller rather than of Go internals.
func (a Answer) APIError(t *testing.T, status int, code string) apitype.Error {
	t.Helper()
	var e apitype.Error
	a.Decode(t, &e)
	if a.Status != status || e.Code != code {
		t.Errorf("%d %s, want %d with code %s", a.Status, a.Body, status, code)
	}
	CheckMessage(t, e.Message)
	return e
}

// CheckMessage fails when an error message is empty or shows the
// server's insides: Go's error prefixes, types, files or stacks.
func CheckMessage(t *testing.T, msg string) {
	t.Helper()
	if msg == "" {
		t.Errorf("an error without a message")
	}
	for _, bad := range []string{"json:", "reflect", ".go:", "goroutine", "runtime", "panic", "%!", "0x", "*"} {
		if strings.Contains(msg, bad) {
			t.Errorf("error message %q shows %q", msg, bad)
		}
	}
	if m := goType.FindString(msg); m != "" {
		t.Errorf("error message %q shows the Go type %s", msg, m)
	}
}

// goType matches a package-qualified Go type such as apitype.StopRequest;
// config keys such as api.max_body are not types.
var goType = regexp.MustCompile(`\b[a-z][a-z0-9]*\.[A-Z][A-Za-z0-9]*`)

// EmptyHistory is a ledger without history for the what-if replay and
// advice: they answer with nothing to replay.
type EmptyHistory struct{}

func (EmptyHistory) Series(context.Context, ledger.Filter, time.Duration) ([]ledger.UsagePoint, error) {
	return nil, nil
}
func (EmptyHistory) KnownGPUs(context.Context) ([]ledger.GPU, error) { return nil, nil }
func (EmptyHistory) Jobs(context.Context, ledger.JobFilter) ([]queue.Job, error) {
	return nil, nil
}

// FixedWaste serves one report.
type FixedWaste struct{ Findings *waste.Report }

func (f FixedWaste) Report() *waste.Report { return f.Findings }
