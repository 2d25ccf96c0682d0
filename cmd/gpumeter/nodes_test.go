package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/run"
)

// tableNodes is a fixed fleet, a fake good for the commands' output
// only: the view is tested in run against the store. It keeps the drains
// it was asked for.
type tableNodes struct {
	views  []queue.NodeView
	drains []string
	advice []queue.ConsolidateAdvice
}

func (n *tableNodes) Nodes(context.Context) ([]queue.NodeView, error) { return n.views, nil }

func (n *tableNodes) Consolidate(context.Context) ([]queue.ConsolidateAdvice, error) {
	return n.advice, nil
}

func (n *tableNodes) SetDrained(_ context.Context, node string, drained bool, ev audit.Event) error {
	if ev.Action != "nodes.drain" {
		return fmt.Errorf("audit event for %s", ev.Action)
	}
	for _, v := range n.views {
		if v.Node == node {
			n.drains = append(n.drains, fmt.Sprintf("%s %v", node, drained))
			return nil
		}
	}
	return fmt.Errorf("drain %s: %w", node, ledger.ErrNodeNotFound)
}

// startNodesAgent serves the API with nodes (nil: not in a fleet), and
// points the commands at it with a token of role.
func startNodesAgent(t *testing.T, nodes server.Nodes, role config.Role) {
	t.Helper()
	startAPIAgent(t, server.Config{Nodes: nodes, Node: "gpu-a"}, role)
}

func nodesTable() []queue.NodeView {
	gpus := func(states ...queue.GPUState) []queue.NodeGPUView {
		out := []queue.NodeGPUView{}
		for i, s := range states {
			out = append(out, queue.NodeGPUView{UUID: fmt.Sprintf("GPU-%d", i), Index: i, Model: "H100", MemoryBytes: 80 << 30, State: s})
		}
		return out
	}
	return []queue.NodeView{
		{Node: "gpu-a", State: queue.NodeUp, LeaseAge: 2 * time.Second, AgentVersion: "1.4.0", SMUtil: 0.65, Score: 95,
			GPUs: gpus(queue.GPUHeld, queue.GPUHeld, queue.GPUFree, queue.GPUOutside)},
		{Node: "gpu-b", State: queue.NodeDraining, LeaseAge: 4 * time.Second, AgentVersion: "1.4.0", Score: 30, GPUs: gpus(queue.GPUFree, queue.GPUFree)},
		{Node: "gpu-c", State: queue.NodeLost, LeaseAge: 3 * time.Hour, Score: 30, GPUs: gpus()},
	}
}

func TestNodesCommand(t *testing.T) {
	startNodesAgent(t, &tableNodes{views: nodesTable()}, config.RoleUser)
	out, _, err := runCmd(t, "nodes")
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^NODE +STATE +LEASE-AGE +VERSION +SCORE +SM +GPUS +FREE/HELD/OUTSIDE
gpu-a +up +2s +1\.4\.0 +95 +65% +4 +1/2/1
gpu-b +draining +4s +1\.4\.0 +30 +0% +2 +2/0/0
gpu-c +lost +3h +- +30 +0% +0 +0/0/0
$`)
	if !want.MatchString(out) {
		t.Errorf("nodes:\n%s", out)
	}
	out, _, err = runCmd(t, "nodes", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got apitype.Nodes
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("nodes --format json: %v\n%s", err, out)
	}
	if diff := cmp.Diff(server.NodesFromView(nodesTable()), got); diff != "" {
		t.Errorf("nodes --format json is not the API's body (-want +got):\n%s", diff)
	}
	if _, _, err := runCmd(t, "nodes", "--format", "csv"); err == nil || !strings.Contains(err.Error(), "--format") {
		t.Errorf("--format csv: %v, want an error naming --format", err)
	}
	if _, _, err := runCmd(t, "nodes", "gpu-a"); err == nil || !strings.Contains(err.Error(), "takes no arguments") {
		t.Errorf("nodes gpu-a: %v", err)
	}
	// The node commands complete the nodes' names.
	got2, _, _ := complete(t, "node", "drain", "gpu-")
	if diff := cmp.Diff([]string{"gpu-a", "gpu-b", "gpu-c"}, got2); diff != "" {
		t.Errorf("node drain completes (-want +got):\n%s", diff)
	}
}

func TestNodeDrainCommand(t *testing.T) {
	nodes := &tableNodes{views: nodesTable()}
	startNodesAgent(t, nodes, config.RoleAdmin)
	out, _, err := runCmd(t, "node", "drain", "gpu-a")
	if err != nil || out != "drained node gpu-a: no new jobs start there; its running jobs finish\n" {
		t.Errorf("node drain: %q %v", out, err)
	}
	out, _, err = runCmd(t, "node", "undrain", "gpu-b")
	if err != nil || out != "undrained node gpu-b: new jobs may start there again\n" {
		t.Errorf("node undrain: %q %v", out, err)
	}
	if diff := cmp.Diff([]string{"gpu-a true", "gpu-b false"}, nodes.drains); diff != "" {
		t.Errorf("drains (-want +got):\n%s", diff)
	}
	// An unknown node fails (main exits 1) with the agent's sentence.
	if _, _, err := runCmd(t, "node", "drain", "gpu-z"); err == nil || !strings.Contains(err.Error(), queue.NodeNotFound("gpu-z")) {
		t.Errorf("node drain gpu-z: %v, want %q", err, queue.NodeNotFound("gpu-z"))
	}
	for _, args := range [][]string{{"node", "drain"}, {"node", "undrain"}} {
		if _, _, err := runCmd(t, args...); err == nil || !strings.Contains(err.Error(), "needs a node") {
			t.Errorf("%s without a node: %v", strings.Join(args, " "), err)
		}
	}
	if _, _, err := runCmd(t, "node", "drain", "gpu-a", "gpu-b"); err == nil || !strings.Contains(err.Error(), "takes one node") {
		t.Errorf("node drain of two nodes: %v", err)
	}

	startNodesAgent(t, &tableNodes{views: nodesTable()}, config.RoleUser)
	if _, _, err := runCmd(t, "node", "drain", "gpu-a"); err == nil || !strings.Contains(err.Error(), "nodes.drain") {
		t.Errorf("node drain as a user: %v, want a refusal naming nodes.drain", err)
	}
	// An agent outside a fleet says how to put it in one.
	startNodesAgent(t, nil, config.RoleAdmin)
	for _, args := range [][]string{{"nodes"}, {"node", "drain", "gpu-a"}} {
		if _, _, err := runCmd(t, args...); err == nil || !strings.Contains(err.Error(), "queue.fleet: true") {
			t.Errorf("%s outside a fleet: %v", strings.Join(args, " "), err)
		}
	}
}

// TestNodeDrainOverTheLedger: the commands over the real view and a
// SQLite fleet store: a drain shows in nodes and is one audit row,
// written with it.
func TestNodeDrainOverTheLedger(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.RegisterNode(ctx, ledger.NodeInfo{Node: "gpu-a", AgentVersion: "1.4.0",
		GPUs: []ledger.NodeGPU{{UUID: "GPU-0", Model: "H100", MemoryBytes: 80 << 30, Util: 0.7}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Acquire(ctx, ledger.Lease{Node: "gpu-a", Instance: "i-1", Host: "gpu-a", PID: os.Getpid()}, time.Hour); err != nil {
		t.Fatal(err)
	}
	startNodesAgent(t, &run.Nodes{Fleet: store, Jobs: store, Takeover: time.Hour}, config.RoleAdmin)
	if _, _, err := runCmd(t, "node", "drain", "gpu-a"); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCmd(t, "nodes")
	if err != nil || !regexp.MustCompile(`\ngpu-a +draining +\d+s +1\.4\.0 +100 +70% +1 +1/0/0\n$`).MatchString(out) {
		t.Errorf("nodes after the drain: %v\n%s", err, out)
	}
	if _, _, err := runCmd(t, "node", "drain", "gpu-z"); err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), `"gpu-z" is not in the fleet`) {
		t.Errorf("drain of an unknown node: %v", err)
	}
	events, err := store.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Action != "nodes.drain" || events[0].Target != "drain node gpu-a" || events[0].Caller != "alice (token laptop)" {
		t.Errorf("audit rows %+v, want the one drain", events)
	}
}

// TestNodesConsolidateCommand: nodes --consolidate prints a row of advice
// per node, and the API's body with --format json.
func TestNodesConsolidateCommand(t *testing.T) {
	startNodesAgent(t, &tableNodes{advice: []queue.ConsolidateAdvice{
		{Node: "gpu-a", Drain: true, Jobs: []string{"j-000004"}, Moves: []queue.Move{{JobID: "j-000004", Node: "gpu-b"}}, Why: "its 1 job fits on gpu-b"},
		{Node: "gpu-b", Jobs: []string{"j-000002", "j-000003"}, Why: "it takes gpu-a's jobs"},
		{Node: "gpu-c", Drained: true, Why: "drained already"},
	}}, config.RoleUser)
	out, _, err := runCmd(t, "nodes", "--consolidate")
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^NODE +ADVICE +JOBS +WHY
gpu-a +drain +1 +its 1 job fits on gpu-b
gpu-b +keep +2 +it takes gpu-a's jobs
gpu-c +drained +0 +drained already
$`)
	if !want.MatchString(out) {
		t.Errorf("nodes --consolidate:\n%s", out)
	}
	out, _, err = runCmd(t, "nodes", "--consolidate", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got apitype.Consolidation
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Advice) != 3 || got.Advice[0].Moves[0] != (apitype.ConsolidateMove{Job: "j-000004", Node: "gpu-b"}) {
		t.Errorf("nodes --consolidate --format json: %v\n%s", err, out)
	}
}
