package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// The node of the fixture: alice runs alice-train on GPU 0 and has a
// stopped alice-old; bob runs bob-train on GPU 1; alice and carol have
// processes outside containers on GPU 0; GPU 0 has a process nobody could
// be found for, and GPU 1 one of a container the inventory does not know.
var (
	aliceTrain = "a1" + strings.Repeat("0", 62)
	aliceOld   = "a2" + strings.Repeat("0", 62)
	bobTrain   = "b1" + strings.Repeat("0", 62)
	ghost      = "c1" + strings.Repeat("0", 62)

	fixtureStart = time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
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

func fixtureSampler() *sampler.Sampler {
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
		{ID: aliceTrain, Name: "alice-train", Image: "train:1", User: "alice", Team: "ml", Running: true, StartedAt: fixtureStart.Add(-time.Hour), GPUs: container.GPURequest{IDs: []string{"0"}}},
		{ID: aliceOld, Name: "alice-old", Image: "train:0", User: "alice", Team: "ml", StartedAt: fixtureStart.Add(-3 * time.Hour), FinishedAt: fixtureStart.Add(-2 * time.Hour), GPUs: container.GPURequest{IDs: []string{"0"}}},
		{ID: bobTrain, Name: "bob-train", Image: "train:1", User: "bob", Team: "vision", Running: true, StartedAt: fixtureStart.Add(-time.Hour), GPUs: container.GPURequest{IDs: []string{"1"}}},
	}
	owners := pidOwners{
		100: {Kind: container.OwnerContainer, ID: aliceTrain},
		101: {Kind: container.OwnerContainer, ID: bobTrain},
		200: {Kind: container.OwnerHost, ID: "alice"},
		300: {Kind: container.OwnerHost, ID: "carol"},
		500: {Kind: container.OwnerContainer, ID: ghost},
	}
	s := sampler.New(sampler.Config{
		Node: "n1", GPUs: fixedGPUs{sample},
		Inventories: []sampler.Named{{Name: "docker", Inventory: fixedInventory{ctrs}}},
		Resolvers:   []sampler.ProcessResolver{owners},
	})
	s.Step(context.Background(), fixtureStart)
	s.Step(context.Background(), fixtureStart.Add(time.Minute))
	return s
}

// fixtureWaste holds one finding for alice, bob, carol and nobody.
func fixtureWaste() *waste.Report {
	finding := func(id, rule, owner string, hours, cost float64) waste.Finding {
		return waste.Finding{ID: id, Rule: rule, Node: "n1", OwnerKind: waste.OwnerContainer, Owner: owner,
			GPUs: []waste.GPURef{{Index: 0, UUID: "GPU-0"}}, Since: fixtureStart, FirstSeen: fixtureStart, Until: fixtureStart.Add(time.Hour),
			Active: true, Evidence: map[string]float64{}, WastedGPUHours: hours, Cost: cost}
	}
	raw := &waste.Report{From: fixtureStart.Add(-time.Hour), To: fixtureStart.Add(time.Hour), Currency: "EUR", Findings: []waste.Finding{
		finding("idle-alice", config.RuleIdle, "alice", 1, 2),
		finding("idle-bob", config.RuleIdle, "bob", 2, 4),
		finding("outside-carol", config.RuleOutside, "carol", 0.5, 1),
		finding("outside-nobody", config.RuleOutside, "", 0.25, 0.5),
	}}
	return raw.Only(func(*waste.Finding) bool { return true })
}

// recordingAuditor keeps what it is given, and whether it was an
// action.
type recordingAuditor struct {
	mu     sync.Mutex
	events []audit.Event
	acted  []bool
	// actErr is what Act returns.
	actErr error
}

func (a *recordingAuditor) Act(_ context.Context, e audit.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events, a.acted = append(a.events, e), append(a.acted, true)
	return a.actErr
}

func (a *recordingAuditor) Observe(e audit.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events, a.acted = append(a.events, e), append(a.acted, false)
}

func (a *recordingAuditor) Events(_ context.Context, from, to time.Time, limit int) ([]audit.Event, bool, error) {
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

// take returns the events recorded since the last take.
func (a *recordingAuditor) take() []audit.Event {
	out, _ := a.takeActed()
	return out
}

// takeActed returns the events recorded since the last take, and which
// of them were actions.
func (a *recordingAuditor) takeActed() ([]audit.Event, []bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out, acted := a.events, a.acted
	a.events, a.acted = nil, nil
	return out, acted
}

type stopCall struct {
	ID    string
	Grace time.Duration
}

// recordingStopper notes its calls and fails with err, after delay or
// when its context ends, whichever comes first.
type recordingStopper struct {
	mu    sync.Mutex
	calls []stopCall
	err   error
	delay time.Duration
	// after runs after each stop: the fixture takes a new sample then, as
	// the agent would before the next stop of the same container, which
	// it refuses until then.
	after func()
}

func (s *recordingStopper) Stop(ctx context.Context, id string, grace time.Duration) error {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, stopCall{id, grace})
	if s.after != nil {
		s.after()
	}
	return s.err
}

func (s *recordingStopper) take() []stopCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.calls
	s.calls = nil
	return out
}

// fakeReports answers every request with a report of rows rows, or err.
type fakeReports struct {
	mu   sync.Mutex
	rows int
	err  error
	got  []report.Request
}

func (f *fakeReports) Report(_ context.Context, r report.Request) (*report.Report, error) {
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

// answer sets what the next reports are.
func (f *fakeReports) answer(rows int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rows, f.err = rows, err
}

func (f *fakeReports) take() []report.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.got
	f.got = nil
	return out
}

// manualClock is the server's clock, moved by the test.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// The callers of the fixture.
const (
	asAdmin   = "admin"
	asAlice   = "alice"
	asBob     = "bob"
	asViewer  = "viewer"
	asNobody  = "nobody" // a user called "unresolved"
	asNone    = "no token"
	asBad     = "bad token"
	asExpired = "expired token"
)

// fixture is the API over the node above, served over real HTTP.
type fixture struct {
	url     string
	audit   *recordingAuditor
	stopper *recordingStopper
	reports *fakeReports
	clock   *manualClock
	sampler *sampler.Sampler
	headers map[string]string // Authorization by caller
}

// resample takes a sample a second after the clock's now.
func (f *fixture) resample() {
	f.sampler.Step(context.Background(), f.clock.Now().Add(time.Second))
}

// newFixture serves the API; edit may change its config before it
// starts.
func newFixture(t *testing.T, edit func(*Config)) *fixture {
	t.Helper()
	return newFixtureServer(t, edit, nil)
}

// newFixtureServer is newFixture with the HTTP server's settings edited
// by server before it starts.
func newFixtureServer(t *testing.T, edit func(*Config), server func(*http.Server)) *fixture {
	t.Helper()
	f := &fixture{
		audit: &recordingAuditor{}, stopper: &recordingStopper{}, reports: &fakeReports{rows: 2},
		clock: &manualClock{t: fixtureStart.Add(time.Hour)}, headers: map[string]string{asNone: "", asBad: "Bearer gpm_" + strings.Repeat("x", 43)},
		sampler: fixtureSampler(),
	}
	f.stopper.after = f.resample
	var tokens []config.Token
	for _, c := range []struct {
		caller, id, user string
		role             config.Role
		expires          time.Time
	}{
		{asAdmin, "root-laptop", "root", config.RoleAdmin, time.Time{}},
		{asAlice, "alice-laptop", "alice", config.RoleUser, time.Time{}},
		{asBob, "bob-laptop", "bob", config.RoleUser, time.Time{}},
		{asViewer, "grafana", "grafana", config.RoleViewer, time.Time{}},
		{asNobody, "nobody", "unresolved", config.RoleUser, time.Time{}},
		// The authenticator reads the real clock.
		{asExpired, "alice-old", "alice", config.RoleUser, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		secret, tok, err := auth.NewToken(c.id, c.user, c.role, c.expires)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
		f.headers[c.caller] = "Bearer " + secret
	}
	authn, err := auth.New(auth.Config{Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Ticks: f.sampler, Reports: f.reports, Waste: fixedWaste{fixtureWaste()}, Stopper: f.stopper, Audit: f.audit,
		Auth:    func() *auth.Authenticator { return authn },
		Limiter: func() *auth.Limiter { return nil },
		Limits:  Limits{MaxBodyBytes: 1 << 10, MaxReportWindow: 30 * 24 * time.Hour, MaxReportRows: 100, MaxAuditEvents: 50},
		Now:     f.clock.Now,
	}
	if edit != nil {
		edit(&cfg)
	}
	srv := httptest.NewUnstartedServer(New(cfg))
	if server != nil {
		server(srv.Config)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

// answer is one response.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request as caller; a non-nil body goes with Content-Type
// application/json unless ctype says otherwise ("-" for none).
func (f *fixture) do(t *testing.T, caller, method, path string, body io.Reader, ctype string) answer {
	t.Helper()
	req, err := http.NewRequest(method, f.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := f.headers[caller]
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
	return answer{resp.StatusCode, resp.Header, b}
}

func (f *fixture) get(t *testing.T, caller, path string) answer {
	t.Helper()
	return f.do(t, caller, http.MethodGet, path, nil, "")
}

// decode reads a JSON body into v.
func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json; body %s", ct, a.body)
	}
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("body %s: %v", a.body, err)
	}
}

// apiError checks that a is the API's JSON error with status and code, and
// that its message speaks to the caller rather than of Go internals.
func (a answer) apiError(t *testing.T, status int, code string) apitype.Error {
	t.Helper()
	var e apitype.Error
	a.decode(t, &e)
	if a.status != status || e.Code != code {
		t.Errorf("%d %s, want %d with code %s", a.status, a.body, status, code)
	}
	checkMessage(t, e.Message)
	return e
}

// checkMessage fails when an error message is empty or shows the
// server's insides: Go's error prefixes, types, files or stacks.
func checkMessage(t *testing.T, msg string) {
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

// quoted matches a Go-quoted string, in which a message repeats what the
// caller sent.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// checkOwnWords is checkMessage for messages that may quote the caller's
// input, which may hold anything: only the message's own words are
// checked.
func checkOwnWords(t *testing.T, msg string) {
	t.Helper()
	checkMessage(t, quoted.ReplaceAllString(msg, `""`))
}

// eventsWithoutSource checks that every event's source is the test's
// address and drops it, so that events can be compared whole.
func eventsWithoutSource(t *testing.T, events []audit.Event) []audit.Event {
	t.Helper()
	var out []audit.Event
	for i, e := range events {
		if !strings.HasPrefix(e.Source, "127.0.0.1:") {
			t.Errorf("event %d: source %q, want the test's address", i, e.Source)
		}
		e.Source = ""
		out = append(out, e)
	}
	return out
}

// roleOf and callerOf are the role and the audit log's name of the
// fixture's callers.
var (
	roleOf   = map[string]string{asAdmin: "admin", asAlice: "user", asBob: "user", asViewer: "viewer"}
	callerOf = map[string]string{asAdmin: "root (token root-laptop)", asAlice: "alice (token alice-laptop)", asBob: "bob (token bob-laptop)", asViewer: "grafana (token grafana)"}
)

// TestEndpointsByRole calls every endpoint as every kind of caller: who
// gets in, the error the rest get, and the one audit event each refusal
// leaves.
func TestEndpointsByRole(t *testing.T) {
	f := newFixture(t, nil)
	now := f.clock.Now()
	stopPath := "/api/v1/containers/alice-train/stop"
	endpoints := []struct {
		method, path, body string
		act                auth.Action
		// denied lists the authenticated callers refused with 403.
		denied map[string]bool
	}{
		{"GET", "/api/v1/whoami", "", auth.ActWhoami, nil},
		{"GET", "/api/v1/gpus", "", auth.ActGPUsRead, nil},
		{"GET", "/api/v1/containers", "", auth.ActContainersRead, nil},
		{"GET", "/api/v1/usage", "", auth.ActUsageRead, nil},
		{"GET", "/api/v1/usage.csv", "", auth.ActUsageRead, nil},
		{"GET", "/api/v1/waste", "", auth.ActWasteRead, nil},
		{"GET", "/api/v1/snapshot", "", auth.ActGPUsRead, nil},
		{"GET", "/api/v1/audit", "", auth.ActAuditRead, map[string]bool{asAlice: true, asBob: true, asViewer: true}},
		{"POST", stopPath, `{"reason":"done"}`, auth.ActContainerStop, map[string]bool{asBob: true, asViewer: true}},
	}
	unauthenticated := map[string]struct {
		code, caller string
	}{
		asNone:    {auth.CodeNoCredentials, "unknown"},
		asBad:     {auth.CodeBadToken, "unknown"},
		asExpired: {auth.CodeExpired, "alice (token alice-old)"},
	}
	roles, callers := roleOf, callerOf

	for _, ep := range endpoints {
		for _, caller := range []string{asAdmin, asAlice, asBob, asViewer, asNone, asBad, asExpired} {
			t.Run(ep.method+" "+ep.path+" as "+caller, func(t *testing.T) {
				var body io.Reader
				if ep.body != "" {
					body = strings.NewReader(ep.body)
				}
				a := f.do(t, caller, ep.method, ep.path, body, "")
				got, acted := f.audit.takeActed()
				events := eventsWithoutSource(t, got)
				base := audit.Event{Time: now, Kind: audit.KindAPI, Action: string(ep.act), Target: ep.method + " " + ep.path}
				var want []audit.Event
				switch u, unauth := unauthenticated[caller]; {
				case unauth:
					a.apiError(t, http.StatusUnauthorized, u.code)
					if got := a.header.Get("WWW-Authenticate"); got != `Bearer realm="gpumeter"` {
						t.Errorf("WWW-Authenticate %q", got)
					}
					e := base
					e.Caller, e.Status, e.Outcome, e.Error = u.caller, http.StatusUnauthorized, audit.OutcomeDenied, u.code
					want = []audit.Event{e}
				case ep.denied[caller]:
					e := base
					if ep.act == auth.ActContainerStop && caller == asBob {
						// Refused by the handler, which knows the
						// container, and answered as a name nobody has.
						a.apiError(t, http.StatusNotFound, apitype.CodeNotFound)
						e.Target, e.Error = "container "+aliceTrain, "bob may containers.stop only for their own containers and usage"
					} else {
						e.Error = a.apiError(t, http.StatusForbidden, apitype.CodeForbidden).Message
					}
					e.Caller, e.Role, e.Status, e.Outcome = callers[caller], roles[caller], http.StatusForbidden, audit.OutcomeDenied
					want = []audit.Event{e}
				default:
					if a.status != http.StatusOK {
						t.Fatalf("status %d %s, want 200", a.status, a.body)
					}
					e := base
					e.Caller, e.Role, e.Status, e.Outcome = callers[caller], roles[caller], http.StatusOK, audit.OutcomeAllowed
					if ep.act == auth.ActContainerStop {
						e.Error, e.Target = "reason: done", "container "+aliceTrain+" (alice-train)"
					}
					want = []audit.Event{e}
				}
				if diff := cmp.Diff(want, events); diff != "" {
					t.Errorf("audit events (-want +got):\n%s", diff)
				}
				// Only what was done is an action; refusals and reads are
				// observations.
				stopped := ep.act == auth.ActContainerStop && a.status == http.StatusOK
				if len(acted) == 1 && acted[0] != stopped {
					t.Errorf("the event was an action: %v, want %v", acted[0], stopped)
				}
				if ep.act == auth.ActContainerStop {
					wantCalls := []stopCall(nil)
					if a.status == http.StatusOK {
						wantCalls = []stopCall{{aliceTrain, 10 * time.Second}}
					}
					if diff := cmp.Diff(wantCalls, f.stopper.take()); diff != "" {
						t.Errorf("stops (-want +got):\n%s", diff)
					}
				}
			})
		}
	}

	// whoami says who the token is.
	for caller, want := range map[string]apitype.Whoami{
		asAdmin:  {User: "root", Role: "admin", Method: "token", Name: "root-laptop"},
		asAlice:  {User: "alice", Role: "user", Method: "token", Name: "alice-laptop"},
		asViewer: {User: "grafana", Role: "viewer", Method: "token", Name: "grafana"},
	} {
		var got apitype.Whoami
		f.get(t, caller, "/api/v1/whoami").decode(t, &got)
		if got != want {
			t.Errorf("whoami as %s = %+v, want %+v", caller, got, want)
		}
	}
}

// TestRateLimit: a caller past its burst gets 429 with Retry-After and
// the API's JSON error; every refusal is observed, for the audit log to
// sum.
func TestRateLimit(t *testing.T) {
	limiter := auth.NewLimiter(1, 2, 0)
	f := newFixture(t, func(c *Config) { c.Limiter = func() *auth.Limiter { return limiter } })
	f.audit.take()

	for i := range 2 {
		if a := f.get(t, asAlice, "/api/v1/whoami"); a.status != http.StatusOK {
			t.Fatalf("call %d: %d %s", i+1, a.status, a.body)
		}
	}
	limited := func(who string) {
		t.Helper()
		a := f.get(t, asAlice, "/api/v1/gpus")
		e := a.apiError(t, http.StatusTooManyRequests, apitype.CodeRateLimited)
		if got := a.header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After %q, want 1", got)
		}
		if want := "too many requests from " + who + "; try again in 1 s"; e.Message != want {
			t.Errorf("message %q, want %q", e.Message, want)
		}
	}
	f.audit.take()
	limited("alice (token alice-laptop)")
	want := []audit.Event{{Time: f.clock.Now(), Kind: audit.KindAPI, Caller: "alice (token alice-laptop)", Role: "user", Action: "gpus.read",
		Target: "GET /api/v1/gpus", Status: http.StatusTooManyRequests, Outcome: audit.OutcomeDenied, Error: "rate limited"}}
	if diff := cmp.Diff(want, eventsWithoutSource(t, f.audit.take())); diff != "" {
		t.Errorf("first refusal's audit events (-want +got):\n%s", diff)
	}
	limited("alice (token alice-laptop)")
	limited("alice (token alice-laptop)")
	if got := f.audit.take(); len(got) != 2 || got[0].Status != http.StatusTooManyRequests || got[1].Status != http.StatusTooManyRequests {
		t.Errorf("later refusals of the run: %+v, want each observed", got)
	}

	// Others have their own budget.
	if a := f.get(t, asBob, "/api/v1/whoami"); a.status != http.StatusOK {
		t.Errorf("bob: %d %s", a.status, a.body)
	}

	// A second later alice has one call again; the refusal after it
	// starts a new run and is audited again.
	f.clock.advance(time.Second)
	if a := f.get(t, asAlice, "/api/v1/whoami"); a.status != http.StatusOK {
		t.Errorf("alice after a second: %d %s", a.status, a.body)
	}
	f.audit.take()
	limited("alice (token alice-laptop)")
	if got := f.audit.take(); len(got) != 1 || got[0].Status != http.StatusTooManyRequests {
		t.Errorf("audit events of the second run: %+v, want one 429", got)
	}

	// Callers without credentials are limited by address, before their
	// credentials are looked at.
	f.audit.take()
	for range 2 {
		f.get(t, asNone, "/api/v1/whoami").apiError(t, http.StatusUnauthorized, auth.CodeNoCredentials)
	}
	a := f.get(t, asBad, "/api/v1/whoami")
	e := a.apiError(t, http.StatusTooManyRequests, apitype.CodeRateLimited)
	if e.Message != "too many requests from 127.0.0.1; try again in 1 s" {
		t.Errorf("message %q", e.Message)
	}
	events := f.audit.take()
	if len(events) != 3 || events[2].Status != http.StatusTooManyRequests || events[2].Caller != "unknown" {
		t.Errorf("audit events %+v, want two 401s and one 429", events)
	}
}

// TestStopBody: the body of a stop is one small JSON object; everything
// else is refused with a status and a message that say what is wrong, and
// audited as rejected.
func TestStopBody(t *testing.T) {
	f := newFixture(t, nil)
	path := "/api/v1/containers/alice-train/stop"
	tests := []struct {
		name, body, ctype string
		chunked           bool
		status            int
		code, msg         string
		grace             time.Duration // of the stop, when it is done
	}{
		{name: "no body", status: 200, grace: 10 * time.Second},
		{name: "empty object", body: `{}`, status: 200, grace: 10 * time.Second},
		{name: "timeout", body: `{"timeout":"30s","reason":"done"}`, status: 200, grace: 30 * time.Second},
		{name: "timeout zero", body: `{"timeout":"0s"}`, status: 200},
		{name: "timeout of ten minutes", body: `{"timeout":"10m"}`, status: 200, grace: 10 * time.Minute},
		{name: "content type with charset", body: `{}`, ctype: "application/json; charset=utf-8", status: 200, grace: 10 * time.Second},
		{name: "content type in capitals", body: `{}`, ctype: "Application/JSON", status: 200, grace: 10 * time.Second},
		{name: "no content type", body: `{}`, ctype: "-", status: 200, grace: 10 * time.Second},
		{name: "chunked", body: `{"timeout":"5s"}`, chunked: true, status: 200, grace: 5 * time.Second},

		{name: "too large", body: `{"reason":"` + strings.Repeat("x", 2000) + `"}`, status: 413, code: apitype.CodeBodyTooLarge, msg: "the body is larger than 1024 bytes (api.max_body)"},
		{name: "too large chunked", body: `{"reason":"` + strings.Repeat("x", 2000) + `"}`, chunked: true, status: 413, code: apitype.CodeBodyTooLarge, msg: "larger than 1024 bytes"},
		{name: "too large in trailing space", body: `{}` + strings.Repeat(" ", 2000), status: 413, code: apitype.CodeBodyTooLarge, msg: "larger than 1024 bytes"},
		{name: "unknown field", body: `{"force":true}`, status: 400, code: apitype.CodeBadRequest, msg: `the body has an unknown field "force"`},
		{name: "trailing object", body: `{}{}`, status: 400, code: apitype.CodeBadRequest, msg: "the body has more after its JSON object"},
		{name: "trailing garbage", body: `{"timeout":"1s"} x`, status: 400, code: apitype.CodeBadRequest, msg: "the body has more after its JSON object"},
		{name: "wrong type", body: `{"timeout":30}`, status: 400, code: apitype.CodeBadRequest, msg: `the body's field "timeout" must be a string, not a JSON number`},
		{name: "wrong type bool", body: `{"reason":true}`, status: 400, code: apitype.CodeBadRequest, msg: `the body's field "reason" must be a string, not a JSON bool`},
		{name: "an array", body: `["30s"]`, status: 400, code: apitype.CodeBadRequest, msg: "the body must be a JSON object, not a JSON array"},
		{name: "a string", body: `"30s"`, status: 400, code: apitype.CodeBadRequest, msg: "the body must be a JSON object, not a JSON string"},
		{name: "bad JSON", body: `{timeout:"30s"}`, status: 400, code: apitype.CodeBadRequest, msg: "the body is not valid JSON at byte 2"},
		{name: "cut short", body: `{"timeout":"30s"`, status: 400, code: apitype.CodeBadRequest, msg: "the body ends in the middle of its JSON"},
		{name: "bad timeout", body: `{"timeout":"soon"}`, status: 400, code: apitype.CodeBadRequest, msg: `timeout: "soon" is not a duration`},
		{name: "negative timeout", body: `{"timeout":"-5s"}`, status: 400, code: apitype.CodeBadRequest, msg: `timeout: "-5s" is negative`},
		{name: "long timeout", body: `{"timeout":"11m"}`, status: 400, code: apitype.CodeBadRequest, msg: "timeout: 11m is longer than 10m"},
		{name: "long reason", body: `{"reason":"` + strings.Repeat("x", 501) + `"}`, status: 400, code: apitype.CodeBadRequest, msg: "reason: 501 characters, more than 500"},
		// 500 characters of two bytes each are 500 characters.
		{name: "reason of 500 characters in 1000 bytes", body: `{"reason":"` + strings.Repeat("é", 500) + `"}`, status: 200, grace: 10 * time.Second},
		{name: "reason not UTF-8", body: "{\"reason\":\"stop \xff\"}", status: 400, code: apitype.CodeBadRequest, msg: "the body is not valid UTF-8"},
		{name: "a field twice", body: `{"timeout":"1s","reason":"x","timeout":"10m"}`, status: 400, code: apitype.CodeBadRequest, msg: `the body has the field "timeout" twice`},
		{name: "a field twice in another case", body: `{"timeout":"1s","TIMEOUT":"10m"}`, status: 400, code: apitype.CodeBadRequest, msg: `the body has the field "timeout" twice, as "timeout" and "TIMEOUT"`},
		{name: "a field twice in mixed case", body: `{"Reason":"a","timeout":"1s","rEASON":"b"}`, status: 400, code: apitype.CodeBadRequest, msg: `as "Reason" and "rEASON"`},
		{name: "a field twice by Unicode folding", body: "{\"reason\":\"a\",\"rea\u017fon\":\"b\"}", status: 400, code: apitype.CodeBadRequest, msg: `the body has the field "reason" twice`},
		{name: "a field in capitals alone", body: `{"TIMEOUT":"30s"}`, status: 200, grace: 30 * time.Second},
		{name: "text", body: `{}`, ctype: "text/plain", status: 415, code: apitype.CodeUnsupportedType, msg: "the body must be application/json, not text/plain"},
		{name: "form", body: `timeout=30s`, ctype: "application/x-www-form-urlencoded", status: 415, code: apitype.CodeUnsupportedType, msg: "not application/x-www-form-urlencoded"},
		{name: "a type that only starts like JSON", body: `{}`, ctype: "application/jsonl", status: 415, code: apitype.CodeUnsupportedType, msg: "not application/jsonl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
				if tt.chunked {
					body = struct{ io.Reader }{body} // of unknown length: sent chunked
				}
			}
			a := f.do(t, asAlice, http.MethodPost, path, body, tt.ctype)
			events := f.audit.take()
			calls := f.stopper.take()
			if tt.status == http.StatusOK {
				if a.status != http.StatusOK {
					t.Fatalf("%d %s, want 200", a.status, a.body)
				}
				var got apitype.StopResponse
				a.decode(t, &got)
				// How long it took is a benchmark's figure, not a test's:
				// only that the answer says a time.
				if got.Seconds < 0 {
					t.Errorf("answer %+v: the stop took %g s, want a time of 0 s or more", got, got.Seconds)
				}
				got.Seconds = 0
				if want := (apitype.StopResponse{ID: aliceTrain, Name: "alice-train", Stopped: true, Grace: tt.grace.String()}); got != want {
					t.Errorf("answer %+v, want %+v", got, want)
				}
				if diff := cmp.Diff([]stopCall{{aliceTrain, tt.grace}}, calls); diff != "" {
					t.Errorf("stops (-want +got):\n%s", diff)
				}
				if len(events) != 1 || events[0].Outcome != audit.OutcomeAllowed {
					t.Errorf("audit events %+v, want one allowed", events)
				}
				return
			}
			e := a.apiError(t, tt.status, tt.code)
			if !strings.Contains(e.Message, tt.msg) {
				t.Errorf("message %q, want it to contain %q", e.Message, tt.msg)
			}
			if len(calls) != 0 {
				t.Errorf("the container was stopped: %+v", calls)
			}
			want := []audit.Event{{Time: f.clock.Now(), Kind: audit.KindAPI, Caller: "alice (token alice-laptop)", Role: "user", Action: "containers.stop",
				Target: "container alice-train", Status: tt.status, Outcome: apitype.OutcomeRejected, Error: e.Message}}
			if diff := cmp.Diff(want, eventsWithoutSource(t, events)); diff != "" {
				t.Errorf("audit events (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("parameters", func(t *testing.T) {
		a := f.do(t, asAlice, http.MethodPost, path+"?timeout=30s", nil, "")
		e := a.apiError(t, http.StatusBadRequest, apitype.CodeBadRequest)
		if !strings.Contains(e.Message, "takes its options in a JSON body, not as parameters") {
			t.Errorf("message %q", e.Message)
		}
		if calls := f.stopper.take(); len(calls) != 0 {
			t.Errorf("the container was stopped: %+v", calls)
		}
		if events := f.audit.take(); len(events) != 1 || events[0].Outcome != apitype.OutcomeRejected {
			t.Errorf("audit events %+v, want one rejected", events)
		}
	})
}

// TestReadsTakeNoBody: a GET with a body is refused, whether its length is
// given or it is sent chunked, so that nobody believes the body did
// something.
func TestReadsTakeNoBody(t *testing.T) {
	f := newFixture(t, nil)
	for name, body := range map[string]func() io.Reader{
		"with a length": func() io.Reader { return strings.NewReader(`{"user":"bob"}`) },
		"chunked":       func() io.Reader { return struct{ io.Reader }{strings.NewReader(`{"user":"bob"}`)} },
	} {
		t.Run(name, func(t *testing.T) {
			for _, path := range []string{"/api/v1/whoami", "/api/v1/usage", "/api/v1/containers"} {
				a := f.do(t, asAlice, http.MethodGet, path, body(), "")
				if e := a.apiError(t, http.StatusBadRequest, apitype.CodeBadRequest); e.Message != "GET "+path+" takes no body" {
					t.Errorf("%s: message %q", path, e.Message)
				}
			}
		})
	}
	if a := f.do(t, asAlice, http.MethodGet, "/api/v1/whoami", http.NoBody, ""); a.status != http.StatusOK {
		t.Errorf("a GET with an empty body: %d %s", a.status, a.body)
	}
}

func TestDecodeStrict(t *testing.T) {
	type nested struct {
		N     int               `json:"n"`
		B     bool              `json:"b"`
		L     []string          `json:"l"`
		M     map[string]string `json:"m"`
		Bytes []byte            `json:"bytes"`
		P     *float64          `json:"p"`
	}
	for _, tt := range []struct {
		body, want string
	}{
		{`{"n":"1"}`, `the body's field "n" must be a number, not a JSON string`},
		{`{"b":1}`, `the body's field "b" must be a boolean, not a JSON number`},
		{`{"l":{}}`, `the body's field "l" must be a array, not a JSON object`},
		{`{"m":[]}`, `the body's field "m" must be a object, not a JSON array`},
		{`{"bytes":1}`, `the body's field "bytes" must be a string, not a JSON number`},
		{`{"p":"x"}`, `the body's field "p" must be a number, not a JSON string`},
		{`{"n":1e400}`, `the body's field "n" must be a number, not a JSON number 1e400`},
		{`[1]`, "the body must be a JSON object, not a JSON array"},
		{`true`, "the body must be a JSON object, not a JSON bool"},
		{`{"bytes":"!!"}`, "the body is not what was expected: illegal base64 data at input byte 0"},
	} {
		var v nested
		err := DecodeStrict(strings.NewReader(tt.body), &v)
		if err == nil || err.Error() != tt.want {
			t.Errorf("DecodeStrict(%s) = %v, want %q", tt.body, err, tt.want)
		}
		if err != nil {
			checkMessage(t, err.Error())
		}
	}
	for _, body := range []string{"", " \n", "null", `{}`, `{"n":1,"l":["a"],"p":null}`} {
		var v nested
		if err := DecodeStrict(strings.NewReader(body), &v); err != nil {
			t.Errorf("DecodeStrict(%q) = %v", body, err)
		}
	}
}

func FuzzDecodeStop(f *testing.F) {
	for _, s := range []string{``, `{}`, `null`, `{"timeout":"30s","reason":"idle"}`, `{"timeout":"10m"}`, `{"timeout":"7d"}`,
		`{"timeout":"-1s"}`, `{"timeout":30}`, `[]`, `{"x":1}`, `{}{}`, `{"reason":"\ud800"}`, `{"timeout":"1d-1h"}`,
		`{"timeout":"1s","TIMEOUT":"2s"}`, "{\"reason\":\"a\",\"REA\u017fON\":\"b\"}", `{"Timeout":"1s"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req apitype.StopRequest
		if err := DecodeStrict(bytes.NewReader(body), &req); err != nil {
			if !strings.HasPrefix(err.Error(), "the body") {
				t.Errorf("DecodeStrict error %q does not speak of the body", err)
			}
			checkOwnWords(t, err.Error())
			return
		}
		grace, err := apitype.ParseStop(req)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "timeout: ") && !strings.HasPrefix(err.Error(), "reason: ") {
				t.Errorf("ParseStop error %q names no field", err)
			}
			return
		}
		if grace < 0 || grace > 10*time.Minute {
			t.Errorf("ParseStop(%+v) = %s, outside 0..10m", req, grace)
		}
		if req.Timeout == "" && grace != 10*time.Second {
			t.Errorf("no timeout gave a grace of %s, want 10s", grace)
		}
		if len(req.Reason) > 500 {
			t.Errorf("a reason of %d bytes was accepted", len(req.Reason))
		}
	})
}

// TestNewDefaultsLimits: a Config without limits still serves reports.
func TestNewDefaultsLimits(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Limits = Limits{} })
	a := f.get(t, asAdmin, "/api/v1/usage?since=30d")
	if a.status != http.StatusOK {
		t.Errorf("a 30-day report with default limits: %d %s", a.status, a.body)
	}
	big := fmt.Sprintf(`{"reason":"%s"}`, strings.Repeat("x", 400))
	if a := f.do(t, asAdmin, http.MethodPost, "/api/v1/containers/bob-train/stop", strings.NewReader(big), ""); a.status != http.StatusOK {
		t.Errorf("a small stop with default limits: %d %s", a.status, a.body)
	}
}

// TestRateLimitAnonymousByAddress: anonymous viewers share no identity,
// so one of them using up its requests must not hold up the others.
func TestRateLimitAnonymousByAddress(t *testing.T) {
	authn, err := auth.New(auth.Config{Anonymous: config.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	limiter := auth.NewLimiter(1, 1, 0)
	h := New(Config{Ticks: nilTicks{}, Auth: func() *auth.Authenticator { return authn }, Limiter: func() *auth.Limiter { return limiter }})
	status := func(addr string) int {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/whoami", nil)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, tt := range []struct {
		addr string
		want int
	}{{"192.0.2.1:1000", 200}, {"192.0.2.1:1001", 429}, {"192.0.2.2:1000", 200}} {
		if got := status(tt.addr); got != tt.want {
			t.Errorf("anonymous from %s: %d, want %d", tt.addr, got, tt.want)
		}
	}
}

// nilTicks has taken no sample yet.
type nilTicks struct{}

func (nilTicks) Latest() *sampler.Tick { return nil }
