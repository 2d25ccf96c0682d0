package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// env is a queue over a real SQLite ledger in a temp dir.
// event is a job event the queue's OnEvent was called with.
type event struct {
	Event string
	Job   queue.Job
}

type env struct {
	q       *Queue
	store   *sqlite.Store
	cfg     Config
	mu      sync.Mutex
	events  []event
	audited []audit.Event
}

var users = map[string]spec.Identity{
	"alice": {UID: 4242, GID: 4242, Groups: []uint32{2000}},
	"bob":   {UID: 4343, GID: 4343},
}

func lookup(user string) (spec.Identity, error) {
	id, ok := users[user]
	if !ok {
		return spec.Identity{}, fmt.Errorf("no user %s in /etc/passwd", user)
	}
	return id, nil
}

// newEnv opens a ledger and a queue without an engine; edit adjusts the
// config before New.
func newEnv(t testing.TB, edit func(*Config)) *env {
	t.Helper()
	dir := t.TempDir()
	store, err := sqlite.Open(context.Background(), filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e := &env{store: store}
	e.cfg = Config{
		Store:    store,
		Rules:    spec.Rules{Images: []string{"img:*"}, MountRoots: []string{dir}, MaxTimeLimit: 24 * time.Hour, MaxGPUs: 8},
		Passing:  spec.Env,
		Identity: lookup,
		Node:     "node1",
		EnvDir:   filepath.Join(dir, "env"),
		OnEvent: func(name string, j queue.Job) {
			e.mu.Lock()
			e.events = append(e.events, event{name, j})
			e.mu.Unlock()
		},
		Audited: func(_ context.Context, ev audit.Event) {
			e.mu.Lock()
			e.audited = append(e.audited, ev)
			e.mu.Unlock()
		},
		StopGrace: time.Second,
	}
	if edit != nil {
		edit(&e.cfg)
	}
	q, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.q = q
	return e
}

func request() spec.Request {
	return spec.Request{GPUs: 1, TimeLimit: time.Hour, Image: "img:1", Command: []string{"sleep", "1"}}
}

func (e *env) submit(t testing.TB, user string, req spec.Request) queue.Job {
	t.Helper()
	j, err := e.q.Submit(context.Background(), Submission{Request: req, User: user, Team: "ml",
		Audit: audit.Event{Kind: "api", Caller: user}})
	if err != nil {
		t.Fatalf("submit for %s: %v", user, err)
	}
	return j
}

func (e *env) auditActions(t testing.TB) []string {
	t.Helper()
	evs, err := e.store.AuditEvents(context.Background(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Action+" "+ev.Target)
	}
	return out
}

func TestSubmitKeepsTheJobAndItsEnvApart(t *testing.T) {
	e := newEnv(t, nil)
	req := request()
	req.Env = []string{"TOKEN=s3cret", "EPOCHS=3"}
	req.Name = "train"
	j, err := e.q.Submit(context.Background(), Submission{Request: req, User: "alice", Team: "ml",
		Notify: []string{"end"}, Audit: audit.Event{Kind: "api", Caller: "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != "j-000001" || j.State != "queued" || j.Reason != "resources" || j.ReasonText == "" || j.User != "alice" || j.Team != "ml" {
		t.Errorf("job %+v, want j-000001 queued (resources) for alice of ml", j)
	}
	if j.TimeLimit != time.Hour || j.GPUsRequested != 1 || j.Image != "img:1" || !slices.Equal(j.Command, req.Command) || j.Name != "train" {
		t.Errorf("job %+v does not carry the request", j)
	}
	if !slices.Equal(j.EnvKeys, []string{"TOKEN", "EPOCHS"}) {
		t.Errorf("env keys %q, want TOKEN, EPOCHS", j.EnvKeys)
	}
	got, err := e.q.Job(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(got); strings.Contains(string(b), "s3cret") {
		t.Errorf("the ledger's job holds an env value: %s", b)
	}
	if got.Request == nil || !slices.Equal(got.Request.Notify, []string{"end"}) {
		t.Errorf("the ledger's request lacks the notify list: %+v", got.Request)
	}
	envs, err := e.q.Launcher.env.read(got)
	if err != nil || !slices.Equal(envs, req.Env) {
		t.Errorf("env read back %q, %v; want %q", envs, err, req.Env)
	}
	fi, err := os.Stat(e.q.Launcher.env.path(j.ID))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("env file: %v, mode %v; want 0600", err, fi.Mode())
	}
	di, err := os.Stat(e.cfg.EnvDir)
	if err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("env dir: %v, mode %v; want 0700", err, di.Mode())
	}
	if ms, _ := filepath.Glob(filepath.Join(e.cfg.EnvDir, ".submit-*")); len(ms) != 0 {
		t.Errorf("temporary env files left: %q", ms)
	}
	if got := e.auditActions(t); !slices.Equal(got, []string{"jobs.submit j-000001"}) {
		t.Errorf("audit rows %q, want the submit of j-000001", got)
	}
	if len(e.audited) != 1 || e.audited[0].Target != "j-000001" || e.audited[0].Action != "jobs.submit" {
		t.Errorf("Audited got %+v, want the submit of j-000001", e.audited)
	}
	if j2 := e.submit(t, "bob", request()); j2.ID != "j-000002" {
		t.Errorf("second job %s, want j-000002", j2.ID)
	}
}

func TestSubmitRefusesBadInput(t *testing.T) {
	tests := []struct {
		name   string
		user   string
		notify []string
		edit   func(*spec.Request)
		field  string
		reason spec.Reason // "" for a *BadRequest
	}{
		{"no time limit and no default", "alice", nil, func(r *spec.Request) { r.TimeLimit = 0 }, "time_limit", ""},
		{"negative time limit", "alice", nil, func(r *spec.Request) { r.TimeLimit = -time.Hour }, "time_limit", spec.BadRequest},
		{"time limit over max", "alice", nil, func(r *spec.Request) { r.TimeLimit = 25 * time.Hour }, "time_limit", spec.TimeLimitTooLong},
		{"zero GPUs", "alice", nil, func(r *spec.Request) { r.GPUs = 0 }, "gpus", spec.BadRequest},
		{"negative GPUs", "alice", nil, func(r *spec.Request) { r.GPUs = -2 }, "gpus", spec.BadRequest},
		{"too many GPUs", "alice", nil, func(r *spec.Request) { r.GPUs = 9 }, "gpus", spec.TooBig},
		{"empty command", "alice", nil, func(r *spec.Request) { r.Command = nil }, "command", spec.BadRequest},
		{"malformed mount", "alice", nil, func(r *spec.Request) { r.Mounts = []string{"nocolon"} }, "mounts", spec.BadRequest},
		{"mount of /", "alice", nil, func(r *spec.Request) { r.Mounts = []string{"/:/host"} }, "mounts", spec.MountNotAllowed},
		{"NVIDIA_VISIBLE_DEVICES", "alice", nil, func(r *spec.Request) { r.Env = []string{"NVIDIA_VISIBLE_DEVICES=all"} }, "env", spec.EnvNotAllowed},
		{"image outside the patterns", "alice", nil, func(r *spec.Request) { r.Image = "evil:1" }, "image", spec.ImageNotAllowed},
		{"unknown user", "mallory", nil, func(*spec.Request) {}, "user", ""},
		{"no user", "", nil, func(*spec.Request) {}, "user", ""},
		{"unknown notify event", "alice", []string{"start", "middle"}, func(*spec.Request) {}, "notify", ""},
	}
	e := newEnv(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := request()
			tt.edit(&req)
			_, err := e.q.Submit(context.Background(), Submission{Request: req, User: tt.user, Notify: tt.notify})
			var br *BadRequest
			var rf *spec.Refusal
			switch {
			case tt.reason == "" && errors.As(err, &br):
				if br.Field != tt.field || br.Text == "" {
					t.Errorf("bad request %+v, want field %s with a sentence", br, tt.field)
				}
			case tt.reason != "" && errors.As(err, &rf):
				if rf.Field != tt.field || rf.Reason != tt.reason {
					t.Errorf("refusal %+v, want %s on %s", rf, tt.reason, tt.field)
				}
			default:
				t.Errorf("error %v (%T), want field %s reason %q", err, err, tt.field, tt.reason)
			}
		})
	}
	jobs, err := e.q.Jobs(context.Background(), ledger.JobFilter{IncludeEnded: true})
	if err != nil || len(jobs) != 0 {
		t.Errorf("jobs after refusals: %d, %v; want none", len(jobs), err)
	}
	if ms, _ := filepath.Glob(filepath.Join(e.cfg.EnvDir, "*")); len(ms) != 0 {
		t.Errorf("env files after refusals: %q", ms)
	}
}

func TestSubmitAppliesTheDefaultTimeLimit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.DefaultTimeLimit = 2 * time.Hour })
	req := request()
	req.TimeLimit = 0
	if j := e.submit(t, "alice", req); j.TimeLimit != 2*time.Hour {
		t.Errorf("time limit %v, want the default 2h", j.TimeLimit)
	}
	if err := e.q.Reload(e.cfg.Rules, e.cfg.Sched, 0); err != nil {
		t.Fatal(err)
	}
	var br *BadRequest
	if _, err := e.q.Submit(context.Background(), Submission{Request: req, User: "alice"}); !errors.As(err, &br) || br.Field != "time_limit" {
		t.Errorf("after reload without a default: %v, want a bad request on time_limit", err)
	}
}

func TestCancelQueued(t *testing.T) {
	e := newEnv(t, nil)
	req := request()
	req.Env = []string{"K=v"}
	j, err := e.q.Submit(context.Background(), Submission{Request: req, User: "alice", Notify: []string{"end"},
		Audit: audit.Event{Kind: "api"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.q.Cancel(context.Background(), j.ID, audit.Event{Kind: "api", Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "cancelled" || got.Reason != "cancelled" || got.ReasonText != "cancelled by alice" || got.EndedAt.IsZero() || got.ExitCode != nil {
		t.Errorf("cancelled job %+v", got)
	}
	if _, err := os.Stat(e.q.Launcher.env.path(j.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("env file of the cancelled job: %v, want it removed", err)
	}
	if len(e.events) != 1 || e.events[0].Event != "end" || e.events[0].Job.ID != j.ID {
		t.Errorf("events %+v, want the end of %s", e.events, j.ID)
	}
	if got := e.auditActions(t); !slices.Equal(got, []string{"jobs.submit j-000001", "jobs.cancel j-000001"}) {
		t.Errorf("audit rows %q", got)
	}
	_, err = e.q.Cancel(context.Background(), j.ID, audit.Event{Kind: "api"})
	var se *StateError
	if !errors.As(err, &se) || se.State != queue.Cancelled || se.ID != j.ID {
		t.Errorf("second cancel: %v, want a state error naming cancelled", err)
	}
	if _, err := e.q.Cancel(context.Background(), "j-999999", audit.Event{}); !errors.Is(err, ledger.ErrJobNotFound) {
		t.Errorf("cancel of an unknown job: %v, want ErrJobNotFound", err)
	}
}

func TestHoldAndRelease(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, "alice", request())
	ctx := context.Background()
	held, err := e.q.Hold(ctx, j.ID, audit.Event{Kind: "api"})
	if err != nil {
		t.Fatal(err)
	}
	if !held.Held || held.Reason != "held" || held.State != "queued" {
		t.Errorf("held job %+v", held)
	}
	rel, err := e.q.Release(ctx, j.ID, audit.Event{Kind: "api"})
	if err != nil {
		t.Fatal(err)
	}
	if rel.Held || rel.Reason != "resources" || rel.State != "queued" {
		t.Errorf("released job %+v", rel)
	}
	if _, err := e.q.Cancel(ctx, j.ID, audit.Event{Kind: "api"}); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(context.Context, string, audit.Event) (queue.Job, error){"hold": e.q.Hold, "release": e.q.Release} {
		_, err := f(ctx, j.ID, audit.Event{Kind: "api"})
		var se *StateError
		if !errors.As(err, &se) || se.State != queue.Cancelled || se.Action != name {
			t.Errorf("%s of a cancelled job: %v, want a state error", name, err)
		}
	}
	want := []string{"jobs.submit j-000001", "jobs.hold j-000001", "jobs.release j-000001", "jobs.cancel j-000001"}
	if got := e.auditActions(t); !slices.Equal(got, want) {
		t.Errorf("audit rows %q, want %q", got, want)
	}
}

func TestJobsLists(t *testing.T) {
	e := newEnv(t, nil)
	a := e.submit(t, "alice", request())
	b := e.submit(t, "bob", request())
	ctx := context.Background()
	if _, err := e.q.Cancel(ctx, a.ID, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	ids := func(f ledger.JobFilter) []string {
		t.Helper()
		js, err := e.q.Jobs(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	if got := ids(ledger.JobFilter{}); !slices.Equal(got, []string{b.ID}) {
		t.Errorf("live jobs %q, want %s", got, b.ID)
	}
	if got := ids(ledger.JobFilter{IncludeEnded: true}); !slices.Equal(got, []string{a.ID, b.ID}) {
		t.Errorf("all jobs %q", got)
	}
	if got := ids(ledger.JobFilter{User: "alice", IncludeEnded: true}); !slices.Equal(got, []string{a.ID}) {
		t.Errorf("alice's jobs %q", got)
	}
	if got := ids(ledger.JobFilter{States: []queue.State{queue.Cancelled}}); !slices.Equal(got, []string{a.ID}) {
		t.Errorf("cancelled jobs %q", got)
	}
	var br *BadRequest
	if _, err := e.q.Jobs(ctx, ledger.JobFilter{States: []queue.State{"done"}}); !errors.As(err, &br) || br.Field != "state" {
		t.Errorf("unknown state: %v, want a bad request on state", err)
	}
}

func TestUpdateChecksTheTransitionTable(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, "alice", request())
	_, err := e.q.Launcher.update(context.Background(), j.ID, queue.Queued, queue.Running, func(*queue.Job) {}, audit.Event{})
	if err == nil || !strings.Contains(err.Error(), "cannot go to running") {
		t.Errorf("queued to running: %v, want the transition refused", err)
	}
	if got, _ := e.q.Job(context.Background(), j.ID); got.State != "queued" {
		t.Errorf("state after a refused transition %s, want queued", got.State)
	}
}

func TestLogsOfAJobWithoutContainer(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, "alice", request())
	var se *StateError
	if err := e.q.Logs(context.Background(), j.ID, false, nil); !errors.As(err, &se) || se.State != queue.Queued {
		t.Errorf("logs of a queued job: %v, want a state error", err)
	}
}

func TestNewRefusesIncompleteConfig(t *testing.T) {
	for name, edit := range map[string]func(*Config){
		"no store":    func(c *Config) { c.Store = nil },
		"no identity": func(c *Config) { c.Identity = nil },
		"no env dir":  func(c *Config) { c.EnvDir = "" },
		"bad rules":   func(c *Config) { c.Rules.MountRoots = []string{"/"} },
	} {
		e := newEnv(t, nil)
		cfg := e.cfg
		edit(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// TestNotifyNeedsAWebhook: a job that asks for notices where the agent
// sends none is refused, rather than accepted and never notified.
func TestNotifyNeedsAWebhook(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.OnEvent = nil })
	_, err := e.q.Submit(context.Background(), Submission{Request: request(), User: "alice", Notify: []string{"end"}})
	var br *BadRequest
	if !errors.As(err, &br) || br.Field != "notify" || !strings.Contains(br.Text, "policy.webhook.url") {
		t.Fatalf("Submit with notify and no webhook: %v, want a bad request naming notify and policy.webhook.url", err)
	}
	if _, err := e.q.Submit(context.Background(), Submission{Request: request(), User: "alice"}); err != nil {
		t.Errorf("Submit without notify: %v", err)
	}
}
