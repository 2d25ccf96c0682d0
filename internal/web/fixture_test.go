package web_test

// The fixture the page tests serve the console from: the API server
// over a node of a few GPUs, containers and users, with the console
// mounted as the agent mounts it, so that the pages are let in as the
// API lets callers in. It is the API server's own test fixture, the part
// the pages need.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
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
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue/run"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sampler/samplertest"
	"github.com/gpumeter/gpumeter/internal/sim"
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

// manualClock is the server's clock, set by the test.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
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
func newFixture(t *testing.T, edit func(*server.Config)) *fixture {
	t.Helper()
	return newFixtureServer(t, edit, nil)
}

// newFixtureServer is newFixture with the HTTP server's settings edited
// by httpServer before it starts.
func newFixtureServer(t *testing.T, edit func(*server.Config), httpServer func(*http.Server)) *fixture {
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
	cfg := server.Config{
		Ticks: f.sampler, Reports: f.reports, Waste: fixedWaste{fixtureWaste()}, Stopper: f.stopper, Audit: f.audit,
		Auth:    func() *auth.Authenticator { return authn },
		Limiter: func() *auth.Limiter { return nil },
		Limits:  server.Limits{MaxBodyBytes: 1 << 10, MaxReportWindow: 30 * 24 * time.Hour, MaxReportRows: 100, MaxAuditEvents: 50},
		Now:     f.clock.Now,
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

// hostUsers are the users the test host's passwd file would list; root,
// the admin's token user, is uid 0.
var hostUsers = map[string]spec.Identity{
	"root":  {UID: 0, GID: 0},
	"alice": {UID: 4242, GID: 4242},
	"bob":   {UID: 4343, GID: 4343},
}

func lookupUser(user string) (spec.Identity, error) {
	id, ok := hostUsers[user]
	if !ok {
		return spec.Identity{}, fmt.Errorf("no user %s in the passwd file", user)
	}
	return id, nil
}

// jobsFixture is the API over a real queue on a real SQLite ledger, with
// no engine: jobs stay queued, which is all the API needs.
type jobsFixture struct {
	*fixture
	store *sqlite.Store
}

func newJobsFixture(t *testing.T, edit func(*run.Config)) *jobsFixture {
	t.Helper()
	return newJobsFixtureServer(t, edit, nil)
}

// newJobsFixtureServer is newJobsFixture with the API's config edited by
// api.
func newJobsFixtureServer(t *testing.T, edit func(*run.Config), api func(*server.Config)) *jobsFixture {
	t.Helper()
	return newJobsFixtureIn(t, t.TempDir(), edit, api)
}

// newJobsFixtureIn is newJobsFixtureServer with the ledger and the jobs'
// environment files in dir, as in an agent's data directory.
func newJobsFixtureIn(t *testing.T, dir string, edit func(*run.Config), api func(*server.Config)) *jobsFixture {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := run.Config{
		Store: store, Node: "n1", Identity: lookupUser, EnvDir: filepath.Join(dir, "job-env"),
		Rules: spec.Rules{Images: []string{"gpumeter/sleeper:*"}, MaxGPUs: 8, MaxTimeLimit: 24 * time.Hour},
	}
	if edit != nil {
		edit(&cfg)
	}
	q, err := run.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *server.Config) {
		c.Jobs = q
		c.Limits.MaxBodyBytes = 16 << 10
		if api != nil {
			api(c)
		}
	})
	return &jobsFixture{fixture: f, store: store}
}

const goodJob = `{"gpus":1,"time_limit":"4h","image":"gpumeter/sleeper:1","name":"train","env":["WANDB_MODE=offline"],"command":["sleep","60"]}`

// submit posts body as caller and returns the job it made.
func (f *jobsFixture) submit(t *testing.T, caller, body string) apitype.Job {
	t.Helper()
	a := f.do(t, caller, http.MethodPost, "/api/v1/jobs", strings.NewReader(body), "")
	if a.status != http.StatusOK {
		t.Fatalf("submit as %s: %d %s", caller, a.status, a.body)
	}
	var j apitype.Job
	a.decode(t, &j)
	return j
}

func (f *jobsFixture) post(t *testing.T, caller, path string) answer {
	t.Helper()
	return f.do(t, caller, http.MethodPost, path, nil, "")
}

// browser sends requests as a browser signed in by a session does: the
// cookie and, when set, the CSRF header; no Authorization.
type browser struct {
	client *http.Client
	url    string
	cookie string
	csrf   string
}

func (b browser) do(t *testing.T, method, path, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if b.cookie != "" {
		req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: b.cookie})
	}
	if b.csrf != "" {
		req.Header.Set(auth.CSRFHeader, b.csrf)
	}
	client := b.client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, data}
}

// sessionCookie is the session cookie a sets, or nil.
func sessionCookie(a answer) *http.Cookie {
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == auth.SessionCookie {
			return c
		}
	}
	return nil
}

// signIn opens a session as caller, with its token in the Authorization
// header, and checks the cookie it gets.
func (f *fixture) signIn(t *testing.T, caller string) (browser, apitype.Session) {
	t.Helper()
	a := f.do(t, caller, http.MethodPost, "/api/v1/session", nil, "")
	if a.status != http.StatusOK {
		t.Fatalf("sign in as %s: %d %s", caller, a.status, a.body)
	}
	var ses apitype.Session
	a.decode(t, &ses)
	c := sessionCookie(a)
	if c == nil {
		t.Fatalf("sign in set no %s cookie: %v", auth.SessionCookie, a.header["Set-Cookie"])
	}
	return browser{url: f.url, cookie: c.Value}, ses
}

type fixedWaste struct{ rep *waste.Report }

func (f fixedWaste) Report() *waste.Report { return f.rep }

// benchSampler plays the load scenario (8 GPUs, 64 containers, 256 GPU
// processes) through the real sampler and meter for a few ticks, so that
// the latest tick has totals, as on a node that has been running.
func benchSampler(b *testing.B) *sampler.Sampler {
	b.Helper()
	sc, err := sim.Load("../../testdata/bench-8gpu-64ctr.yaml")
	if err != nil {
		b.Fatal(err)
	}
	s := samplertest.Scenario(sc, sampler.Config{})
	for i := range 3 {
		s.Step(context.Background(), sc.Start.Add(time.Duration(i)*time.Second))
	}
	return s
}

// countingAudit is the agent's audit log, writing nowhere, that counts
// what it is told: what a read or a refusal costs the request is building
// its event and summing it.
type countingAudit struct {
	*audit.Log
	n int
}

func newCountingAudit() *countingAudit {
	return &countingAudit{Log: audit.NewLog(audit.LogConfig{Node: "bench"})}
}

func (a *countingAudit) Observe(e audit.Event) {
	a.n++
	a.Log.Observe(e)
}

func (a *countingAudit) Events(context.Context, time.Time, time.Time, int) ([]audit.Event, bool, error) {
	return nil, false, nil
}

// discardWriter is a response recorder that keeps the status and the
// size of the body but not the body, and can be reused, so that the
// benchmarks measure the handler rather than a growing buffer.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.h }

func (w *discardWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

func (w *discardWriter) reset() {
	clear(w.h)
	w.status, w.n = 0, 0
}

// serveLoop serves r until the benchmark ends, each answer with status,
// and returns the last answer's size.
func serveLoop(b *testing.B, h http.Handler, r *http.Request, status int) int {
	b.Helper()
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		h.ServeHTTP(w, r)
		if w.status != status {
			b.Fatalf("status %d, want %d", w.status, status)
		}
	}
	return w.n
}

// rankTable is the scheduler's ranks as the runtime would keep them, by
// job id.
type rankTable map[string]struct {
	prio float64
	pos  int
	est  time.Time
}

func (r rankTable) Rank(id string) (float64, int, time.Time, bool) {
	x, ok := r[id]
	return x.prio, x.pos, x.est, ok
}
