package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/ledger/postgres"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/run"
)

// fixedNodes is a fixed fleet: a fake, good for the handlers'
// authorisation and shape only; the view itself is tested in run against
// the store. Its drains are real, though: each writes its audit event to
// a SQLite ledger, as the store does in its transaction.
type fixedNodes struct {
	views []queue.NodeView
	store *sqlite.Store
	// err, when set, is what every call fails with.
	err   error
	mu    sync.Mutex
	calls []string
}

func (f *fixedNodes) Nodes(context.Context) ([]queue.NodeView, error) { return f.views, f.err }

func (f *fixedNodes) Consolidate(context.Context) ([]queue.ConsolidateAdvice, error) {
	return []queue.ConsolidateAdvice{{Node: "n1", Drain: true, Jobs: []string{"j-000001"}, Moves: []queue.Move{{JobID: "j-000001", Node: "n2"}}, Why: "fits on n2"}}, f.err
}

func (f *fixedNodes) SetDrained(ctx context.Context, node string, drained bool, ev audit.Event) error {
	if f.err != nil {
		return f.err
	}
	known := false
	for _, v := range f.views {
		known = known || v.Node == node
	}
	if !known {
		return fmt.Errorf("drain %s: %w", node, ledger.ErrNodeNotFound)
	}
	if err := f.store.Audit(ctx, []audit.Event{ev}); err != nil {
		return err
	}
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf("%s %v", node, drained))
	f.mu.Unlock()
	return nil
}

func fleetViews() []queue.NodeView {
	gpu := func(i int, state queue.GPUState) queue.NodeGPUView {
		return queue.NodeGPUView{UUID: fmt.Sprintf("GPU-%d", i), Index: i, Model: "H100", MemoryBytes: 80 << 30, State: state}
	}
	return []queue.NodeView{
		{Node: "gpu-a", State: queue.NodeUp, LeaseAge: 2500 * time.Millisecond, AgentVersion: "1.4.0", SMUtil: 0.5, Score: 80,
			GPUs: []queue.NodeGPUView{gpu(0, queue.GPUHeld), gpu(1, queue.GPUFree)}},
		{Node: "gpu-b", State: queue.NodeDraining, LeaseAge: time.Second, AgentVersion: "1.4.0", Score: 30, GPUs: []queue.NodeGPUView{gpu(0, queue.GPUOutside)}},
		{Node: "gpu-c", State: queue.NodeLost, LeaseAge: time.Hour, AgentVersion: "1.3.2", Score: 30, GPUs: []queue.NodeGPUView{}},
	}
}

func newNodesFixture(t *testing.T) (*servertest.Fixture, *fixedNodes) {
	t.Helper()
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	fn := &fixedNodes{views: fleetViews(), store: store}
	return servertest.NewFixture(t, func(c *server.Config) { c.Nodes = fn }), fn
}

// TestNodesSeenBy: every role reads every node, as the contract's JSON;
// parameters are refused, and a caller without a token is not let in.
func TestNodesSeenBy(t *testing.T) {
	f, _ := newNodesFixture(t)
	want := `{"nodes":[` +
		`{"node":"gpu-a","state":"up","lease_age_s":2.5,"agent_version":"1.4.0","score":80,"sm_util":0.5,"gpus":[` +
		`{"uuid":"GPU-0","index":0,"model":"H100","memory_bytes":85899345920,"state":"held"},` +
		`{"uuid":"GPU-1","index":1,"model":"H100","memory_bytes":85899345920,"state":"free"}]},` +
		`{"node":"gpu-b","state":"draining","lease_age_s":1,"agent_version":"1.4.0","score":30,"sm_util":0,"gpus":[` +
		`{"uuid":"GPU-0","index":0,"model":"H100","memory_bytes":85899345920,"state":"outside"}]},` +
		`{"node":"gpu-c","state":"lost","lease_age_s":3600,"agent_version":"1.3.2","score":30,"sm_util":0,"gpus":[]}]}` + "\n"
	for _, caller := range []string{servertest.AsAdmin, servertest.AsViewer, servertest.AsAlice, servertest.AsNobody} {
		a := f.Get(t, caller, "/api/v1/nodes")
		if a.Status != http.StatusOK || string(a.Body) != want {
			t.Errorf("as %s: %d\n%s\nwant\n%s", caller, a.Status, a.Body, want)
		}
	}
	f.Audit.Take()
	f.Get(t, servertest.AsAlice, "/api/v1/nodes?node=gpu-a").APIError(t, http.StatusBadRequest, apitype.CodeBadRequest)
	f.Get(t, servertest.AsNone, "/api/v1/nodes").APIError(t, http.StatusUnauthorized, "unauthenticated")
	// A read is observed, never acted on.
	events, acted := f.Audit.TakeActed()
	if len(events) != 2 || acted[0] || acted[1] || events[0].Action != "nodes.read" || events[0].Status != http.StatusBadRequest {
		t.Errorf("audit events %+v (acted %v), want two observations", events, acted)
	}
}

// TestNodeDrain: only an admin drains or undrains a node; each is one
// audit row in the ledger, written with it; an unknown node is a 404
// naming it; a drain takes no parameters and no fields.
func TestNodeDrain(t *testing.T) {
	f, fn := newNodesFixture(t)
	for _, caller := range []string{servertest.AsAlice, servertest.AsViewer} {
		for _, verb := range []string{"drain", "undrain"} {
			f.Do(t, caller, http.MethodPost, "/api/v1/nodes/gpu-a/"+verb, nil, "").APIError(t, http.StatusForbidden, apitype.CodeForbidden)
		}
	}
	for _, tt := range []struct {
		verb string
		want apitype.NodeDrain
	}{
		{"drain", apitype.NodeDrain{Node: "gpu-a", Drained: true}},
		{"undrain", apitype.NodeDrain{Node: "gpu-b", Drained: false}},
	} {
		var got apitype.NodeDrain
		a := f.Do(t, servertest.AsAdmin, http.MethodPost, "/api/v1/nodes/"+tt.want.Node+"/"+tt.verb, strings.NewReader(`{}`), "")
		a.Decode(t, &got)
		if a.Status != http.StatusOK || got != tt.want {
			t.Errorf("%s: %d %s, want %+v", tt.verb, a.Status, a.Body, tt.want)
		}
	}
	e := f.Do(t, servertest.AsAdmin, http.MethodPost, "/api/v1/nodes/gpu-z/drain", nil, "").APIError(t, http.StatusNotFound, apitype.CodeNodeNotFound)
	if e.Message != queue.NodeNotFound("gpu-z") || !strings.Contains(e.Message, `"gpu-z"`) {
		t.Errorf("drain of an unknown node: %q, want queue.NodeNotFound's sentence naming it", e.Message)
	}
	checkOwnWords(t, e.Message)
	f.Do(t, servertest.AsAdmin, http.MethodPost, "/api/v1/nodes/gpu-a/drain", strings.NewReader(`{"force":true}`), "").APIError(t, http.StatusBadRequest, apitype.CodeBadRequest)
	f.Do(t, servertest.AsAdmin, http.MethodPost, "/api/v1/nodes/gpu-a/drain?now=1", nil, "").APIError(t, http.StatusBadRequest, apitype.CodeBadRequest)
	f.Get(t, servertest.AsAdmin, "/api/v1/nodes/gpu-a/drain").APIError(t, http.StatusMethodNotAllowed, apitype.CodeMethodNotAllowed)
	if diff := cmp.Diff([]string{"gpu-a true", "gpu-b false"}, fn.calls); diff != "" {
		t.Errorf("drains (-want +got):\n%s", diff)
	}

	events, err := fn.store.AuditEvents(context.Background(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ Kind, Caller, Role, Action, Target, Outcome string }
	var got []row
	for _, ev := range events {
		got = append(got, row{ev.Kind, ev.Caller, ev.Role, ev.Action, ev.Target, ev.Outcome})
	}
	want := []row{
		{"api", "root (token root-laptop)", "admin", "nodes.drain", "drain node gpu-a", audit.OutcomeAllowed},
		{"api", "root (token root-laptop)", "admin", "nodes.drain", "undrain node gpu-b", audit.OutcomeAllowed},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit rows (-want +got):\n%s", diff)
	}
	// Refusals are observed (not written with a drain), the unknown node
	// among them, with the sentence it was answered with.
	var notFound []audit.Event
	for _, ev := range f.Audit.Take() {
		if ev.Status == http.StatusNotFound {
			notFound = append(notFound, ev)
		}
	}
	if len(notFound) != 1 || notFound[0].Target != "drain node gpu-z" || notFound[0].Error != queue.NodeNotFound("gpu-z") || notFound[0].Outcome != audit.OutcomeFailed {
		t.Errorf("observed 404s %+v, want the drain of gpu-z", notFound)
	}
}

// TestNodesLedgerDown: a fleet's database that cannot be reached is a
// 503 to ask again after, on a read and on a drain, which is observed
// as failed; any other failure a 500 that says nothing of it.
func TestNodesLedgerDown(t *testing.T) {
	f, fn := newNodesFixture(t)
	fn.err = fmt.Errorf("nodes: %w: connection refused", ledger.ErrUnavailable)
	for _, a := range []servertest.Answer{
		f.Get(t, servertest.AsViewer, "/api/v1/nodes"),
		f.Do(t, servertest.AsAdmin, http.MethodPost, "/api/v1/nodes/gpu-a/drain", nil, ""),
	} {
		a.APIError(t, http.StatusServiceUnavailable, apitype.CodeLedgerUnavailable)
		if a.Header.Get("Retry-After") == "" {
			t.Errorf("no Retry-After on a 503 ledger_unavailable")
		}
	}
	events := f.Audit.Take()
	if n := len(events); n != 2 || events[1].Target != "drain node gpu-a" || events[1].Outcome != audit.OutcomeFailed || events[1].Status != http.StatusServiceUnavailable {
		t.Errorf("audit events %+v, want the read and the failed drain", events)
	}
	fn.err = errors.New("disk on fire")
	e := f.Get(t, servertest.AsViewer, "/api/v1/nodes").APIError(t, http.StatusInternalServerError, apitype.CodeInternal)
	if strings.Contains(e.Message, "fire") {
		t.Errorf("a 500 tells the caller the cause: %q", e.Message)
	}
}

// TestNodesOff: an agent that is not in a fleet says so, and how to put
// it in one, on every endpoint.
func TestNodesOff(t *testing.T) {
	f := servertest.NewFixture(t, nil)
	for _, a := range []servertest.Answer{
		f.Get(t, servertest.AsAlice, "/api/v1/nodes"),
		f.Do(t, servertest.AsAdmin, http.MethodPost, "/api/v1/nodes/gpu-a/drain", nil, ""),
		f.Do(t, servertest.AsAdmin, http.MethodPost, "/api/v1/nodes/gpu-a/undrain", nil, ""),
	} {
		e := a.APIError(t, http.StatusServiceUnavailable, apitype.CodeFleetOff)
		if !strings.Contains(e.Message, "queue.fleet: true") || !strings.Contains(e.Message, "ledger.dsn") {
			t.Errorf("fleet off: %q, want how to turn it on", e.Message)
		}
	}
	// A user may not drain even where there is nothing to drain.
	f.Do(t, servertest.AsAlice, http.MethodPost, "/api/v1/nodes/gpu-a/drain", nil, "").APIError(t, http.StatusForbidden, apitype.CodeForbidden)
}

// TestNodesOnTheWire: the nodes' wire shape writes no nodes and no GPUs
// as [], and carries every field of the view but a GPU's job: a field
// added to queue.NodeView or NodeGPUView fails here until the wire has it
// (or this test says why not).
func TestNodesOnTheWire(t *testing.T) {
	if b := compact(t, server.NodesFromView(nil)); string(b) != `{"nodes":[]}` {
		t.Errorf("no nodes: %s", b)
	}
	got := server.NodesFromView([]queue.NodeView{{Node: "n1", State: queue.NodeUp, LeaseAge: 1500 * time.Millisecond, AgentVersion: "v1", SMUtil: 0.7, Score: 100,
		GPUs: []queue.NodeGPUView{{UUID: "GPU-a", Index: 3, Model: "A100", MemoryBytes: 40 << 30, State: queue.GPUHeld, Job: "j-000001"}}}, {Node: "n2"}})
	want := apitype.Nodes{Nodes: []apitype.Node{
		{Node: "n1", State: apitype.NodeUp, LeaseAgeSeconds: 1.5, AgentVersion: "v1", SMUtil: 0.7, Score: 100,
			GPUs: []apitype.NodeGPU{{UUID: "GPU-a", Index: 3, Model: "A100", MemoryBytes: 40 << 30, State: apitype.GPUHeld}}},
		{Node: "n2", GPUs: []apitype.NodeGPU{}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("on the wire (-want +got):\n%s", diff)
	}
	// The job that holds a GPU is the jobs' to show, where the caller's
	// role narrows them; the nodes show only that it is held. A node's
	// API is what agents forward to, not the wire's.
	for typ, copied := range map[reflect.Type][]string{
		reflect.TypeFor[queue.NodeView]():    {"Node", "State", "LeaseAge", "AgentVersion", "API", "SMUtil", "Score", "GPUs"},
		reflect.TypeFor[queue.NodeGPUView](): {"UUID", "Index", "Model", "MemoryBytes", "State", "Job"},
	} {
		var fields []string
		for f := range typ.Fields() {
			if f.IsExported() {
				fields = append(fields, f.Name)
			}
		}
		if diff := cmp.Diff(copied, fields); diff != "" {
			t.Errorf("%s's fields are not those NodesFromView copies (-copied +fields):\n%s", typ, diff)
		}
	}
	// The states' words are the wire's.
	for _, tt := range [][2]string{
		{string(queue.NodeUp), apitype.NodeUp}, {string(queue.NodeDraining), apitype.NodeDraining}, {string(queue.NodeLost), apitype.NodeLost},
		{string(queue.GPUFree), apitype.GPUFree}, {string(queue.GPUHeld), apitype.GPUHeld}, {string(queue.GPUOutside), apitype.GPUOutside},
	} {
		if tt[0] != tt[1] {
			t.Errorf("run writes %q, the wire says %q", tt[0], tt[1])
		}
	}
}

// TestNodesOverPostgres: the routes over the real view and the fleet's
// PostgreSQL: a drain is the store's one audit row and shows in the
// list; while the database cannot be reached both answer 503
// ledger_unavailable, and once it is back they work again.
func TestNodesOverPostgres(t *testing.T) {
	ctx := context.Background()
	proxy, dsn := pgtest.NewProxy(t, pgtest.DSN(t))
	store, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.RegisterNode(ctx, ledger.NodeInfo{Node: "gpu-a", AgentVersion: "1.4.0",
		GPUs: []ledger.NodeGPU{{UUID: "GPU-0", Model: "H100", MemoryBytes: 80 << 30}}}); err != nil {
		t.Fatal(err)
	}
	f := servertest.NewFixture(t, func(c *server.Config) { c.Nodes = &run.Nodes{Fleet: store, Jobs: store, Takeover: time.Hour} })
	f.Do(t, servertest.AsAdmin, http.MethodPost, "/api/v1/nodes/gpu-a/drain", nil, "").Decode(t, new(apitype.NodeDrain))
	var ns apitype.Nodes
	f.Get(t, servertest.AsViewer, "/api/v1/nodes").Decode(t, &ns)
	// It never took its ledger lease: lost, though drained.
	if len(ns.Nodes) != 1 || ns.Nodes[0].State != apitype.NodeLost || len(ns.Nodes[0].GPUs) != 1 || ns.Nodes[0].GPUs[0].State != apitype.GPUFree {
		t.Errorf("nodes: %+v, want gpu-a lost with its GPU free", ns)
	}
	events, err := store.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Action != "nodes.drain" || events[0].Target != "drain node gpu-a" {
		t.Errorf("audit rows %+v, want the drain", events)
	}

	proxy.Partition()
	f.Get(t, servertest.AsViewer, "/api/v1/nodes").APIError(t, http.StatusServiceUnavailable, apitype.CodeLedgerUnavailable)
	f.Do(t, servertest.AsAdmin, http.MethodPost, "/api/v1/nodes/gpu-a/undrain", nil, "").APIError(t, http.StatusServiceUnavailable, apitype.CodeLedgerUnavailable)
	proxy.Heal()
	f.Do(t, servertest.AsAdmin, http.MethodPost, "/api/v1/nodes/gpu-a/undrain", nil, "").Decode(t, new(apitype.NodeDrain))
	f.Get(t, servertest.AsViewer, "/api/v1/nodes").Decode(t, &ns)
	if len(ns.Nodes) != 1 {
		t.Errorf("nodes after the outage: %+v", ns)
	}
}

// TestNodesConsolidateRoute: every role reads the advice, in the wire's
// shape; it takes no parameters.
func TestNodesConsolidateRoute(t *testing.T) {
	f, _ := newNodesFixture(t)
	want := `{"advice":[{"node":"n1","drain":true,"drained":false,"jobs":["j-000001"],"moves":[{"job":"j-000001","node":"n2"}],"why":"fits on n2"}]}` + "\n"
	for _, caller := range []string{servertest.AsAdmin, servertest.AsViewer, servertest.AsAlice} {
		if a := f.Get(t, caller, "/api/v1/nodes/consolidate"); a.Status != http.StatusOK || string(a.Body) != want {
			t.Errorf("as %s: %d\n%s\nwant\n%s", caller, a.Status, a.Body, want)
		}
	}
	f.Get(t, servertest.AsAlice, "/api/v1/nodes/consolidate?node=n1").APIError(t, http.StatusBadRequest, apitype.CodeBadRequest)
}
