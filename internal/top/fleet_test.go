package top

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

// fleetAt is a fleet of three nodes at t0 plus step seconds: gpu-a up
// with four GPUs (two held by alice's job, one used outside the queue),
// gpu-b draining with two free ones, gpu-c lost; bob's job waits.
func fleetAt(step int) Fleet {
	gpus := func(node string, states ...string) []apitype.NodeGPU {
		var out []apitype.NodeGPU
		for i, s := range states {
			out = append(out, apitype.NodeGPU{UUID: node + "-GPU-" + string(rune('0'+i)), Index: i, Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, State: s})
		}
		return out
	}
	return Fleet{
		At: t0.Add(time.Duration(step) * time.Second),
		Nodes: []apitype.Node{
			{Node: "gpu-a", State: apitype.NodeUp, LeaseAgeSeconds: 2.5, AgentVersion: "1.4.0", Score: 95, SMUtil: 0.65,
				GPUs: gpus("a", apitype.GPUHeld, apitype.GPUHeld, apitype.GPUFree, apitype.GPUOutside)},
			{Node: "gpu-b", State: apitype.NodeDraining, LeaseAgeSeconds: 1, AgentVersion: "1.4.0", Score: 30, GPUs: gpus("b", apitype.GPUFree, apitype.GPUFree)},
			{Node: "gpu-c", State: apitype.NodeLost, LeaseAgeSeconds: 3 * 3600, Score: 30},
		},
		Jobs: []apitype.Job{
			{ID: "j-000001", Name: "train", User: "alice", State: "running", Node: "gpu-a", GPUsRequested: 2, GPUs: []string{"a-GPU-0", "a-GPU-1"}},
			{ID: "j-000002", Name: "eval", User: "bob", State: "queued", GPUsRequested: 1},
		},
	}
}

// fleetDriven is a fleet model and the looks driving it has taken.
type fleetDriven struct {
	t     *testing.T
	m     FleetModel
	looks int
	err   error
}

func driveFleet(t *testing.T) *fleetDriven {
	t.Helper()
	d := &fleetDriven{t: t}
	m, err := NewFleet(FleetOptions{Interval: time.Second, Fetch: func() (Fleet, error) {
		d.looks++
		return fleetAt(d.looks), d.err
	}})
	if err != nil {
		t.Fatal(err)
	}
	d.m = m
	return d
}

func (d *fleetDriven) send(msg tea.Msg) tea.Cmd {
	d.t.Helper()
	next, cmd := d.m.Update(msg)
	d.m = next.(FleetModel)
	return cmd
}

func (d *fleetDriven) press(keys ...string) {
	for _, k := range keys {
		d.send(keyMsg(k))
	}
}

// TestFleetFetchLoop: the first command takes a look; each look asks for
// the next only after the interval, and a refresh while a look is under
// way asks for none.
func TestFleetFetchLoop(t *testing.T) {
	d := driveFleet(t)
	msg := d.m.Init()()
	if d.looks != 1 {
		t.Fatalf("Init's command looked %d times, want 1", d.looks)
	}
	if next := d.send(msg); next == nil || d.looks != 1 {
		t.Fatalf("a look asked for no next one, or looked again at once (%d looks)", d.looks)
	}
	look := d.send(refreshMsg{})
	if look == nil || d.send(refreshMsg{}) != nil {
		t.Fatal("a refresh should look once, and a second one meanwhile not at all")
	}
	d.send(look())
	if d.looks != 2 || !d.m.fleet.At.Equal(t0.Add(2*time.Second)) {
		t.Errorf("%d looks, the fleet as of %s; want 2, the second", d.looks, d.m.fleet.At)
	}
	if _, err := NewFleet(FleetOptions{Interval: 500 * time.Millisecond, Fetch: d.m.opts.Fetch}); err == nil {
		t.Error("an interval under a second was taken")
	}
	if _, err := NewFleet(FleetOptions{Interval: time.Second}); err == nil {
		t.Error("a fleet view without a Fetch was made")
	}
}

// TestFleetFrame: a row per node with its state, lease age, score, SM,
// GPUs one cell each by state and counted, and its jobs running; the
// title counts the nodes by state and the jobs.
func TestFleetFrame(t *testing.T) {
	d := driveFleet(t)
	d.send(FleetMsg{Fleet: fleetAt(0)})
	frame := d.m.Plain()
	for _, want := range []string{
		"gpumeter top --fleet · 2026-11-02 10:00:00 UTC · 3 nodes: 1 up, 1 draining, 1 lost · jobs: 1 queued, 1 running",
		"NODE             STATE    LEASE SCORE  SM% GPUS     FREE HELD OUT JOBS VERSION\n",
		"gpu-a            up          2s    95   65 ██·▒        1    2   1    1 1.4.0\n",
		"gpu-b            draining    1s    30    0 ··          2    0   0    0 1.4.0\n",
		"gpu-c            lost        3h    30    0             0    0   0    0 -\n",
		"q quit",
	} {
		if !strings.Contains(frame, want) {
			t.Errorf("the frame lacks %q:\n%s", want, frame)
		}
	}
	if strings.Contains(frame, "\x1b[") {
		t.Error("the plain frame has escape codes")
	}
	// The selected node is drawn reversed, a lost one in red.
	if styled := d.m.frame(); !strings.Contains(styled, "\x1b[") {
		t.Error("the styled frame has no styles")
	}

	// A narrow terminal cuts every line; a short one scrolls the rows to
	// keep the selection in view.
	d.send(tea.WindowSizeMsg{Width: 40, Height: 6})
	for _, l := range strings.Split(d.m.Plain(), "\n") {
		if n := len([]rune(l)); n > 40 {
			t.Errorf("a line of %d cells in 40: %q", n, l)
		}
	}
	d.press("down", "down")
	if got := nodeRows(d.m.Plain()); len(got) != 1 || got[0] != "gpu-c" {
		t.Errorf("rows shown %v with gpu-c selected in a 6-line terminal, want gpu-c alone", got)
	}

	// No nodes yet, and before the first look.
	e := driveFleet(t)
	if !strings.Contains(e.m.Plain(), "waiting for the agent's first answer") {
		t.Errorf("before the first look:\n%s", e.m.Plain())
	}
	e.send(FleetMsg{Fleet: Fleet{At: t0}})
	if f := e.m.Plain(); !strings.Contains(f, "no node has registered") || !strings.Contains(f, "0 nodes · jobs: none") {
		t.Errorf("an empty fleet:\n%s", f)
	}
}

var nodeRowRE = regexp.MustCompile(`(?m)^(gpu-\w)\s`)

// nodeRows are the nodes of the frame's rows.
func nodeRows(frame string) []string {
	var out []string
	for _, m := range nodeRowRE.FindAllStringSubmatch(frame, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestFleetKeys: the arrows move, enter shows the node's GPUs with the
// job holding each and its jobs, esc goes back, q and ctrl+c quit; the
// selection stays on its node across looks.
func TestFleetKeys(t *testing.T) {
	d := driveFleet(t)
	d.send(FleetMsg{Fleet: fleetAt(0)})
	if d.m.selected != "gpu-a" {
		t.Fatalf("selected %q first, want gpu-a", d.m.selected)
	}
	d.press("enter")
	frame := d.m.Plain()
	for _, want := range []string{
		"node gpu-a\n  state up · lease 2s ago · score 95 · SM 65% · agent 1.4.0 · 1 free, 2 held, 1 outside",
		"  GPU 0  NVIDIA H100 80GB HBM3    80G      held    j-000001 (alice)",
		"  GPU 1  NVIDIA H100 80GB HBM3    80G      held    j-000001 (alice)",
		"  GPU 2  NVIDIA H100 80GB HBM3    80G      free\n",
		"  GPU 3  NVIDIA H100 80GB HBM3    80G      outside\n",
		"  job j-000001 (train) of alice: running, 2 GPUs",
	} {
		if !strings.Contains(frame, want) {
			t.Errorf("the detail lacks %q:\n%s", want, frame)
		}
	}
	d.press("esc", "down")
	if d.m.detail || d.m.selected != "gpu-b" {
		t.Errorf("after esc and down: detail %v, selected %q; want the table with gpu-b", d.m.detail, d.m.selected)
	}
	d.send(FleetMsg{Fleet: fleetAt(1)})
	if d.m.selected != "gpu-b" {
		t.Errorf("a new look moved the selection to %q", d.m.selected)
	}
	d.press("down", "down", "down", "enter")
	if f := d.m.Plain(); d.m.selected != "gpu-c" || !strings.Contains(f, "no GPUs registered") {
		t.Errorf("gpu-c's detail:\n%s", f)
	}
	// The selected node gone, the first is selected and the table shown.
	gone := fleetAt(2)
	gone.Nodes = gone.Nodes[:2]
	d.send(FleetMsg{Fleet: gone})
	if d.m.selected != "gpu-a" || d.m.detail {
		t.Errorf("with gpu-c gone: selected %q, detail %v", d.m.selected, d.m.detail)
	}
	for _, k := range []string{"q", "ctrl+c"} {
		if _, cmd := d.m.Update(keyMsg(k)); !isQuit(cmd) {
			t.Errorf("%s does not quit", k)
		}
	}
}

// TestFleetErrors: a failed look is said with the fleet last seen kept,
// and retried; a fatal one ends the view with its error.
func TestFleetErrors(t *testing.T) {
	d := driveFleet(t)
	d.send(FleetMsg{Fleet: fleetAt(0)})
	if cmd := d.send(FleetMsg{Err: errors.New("connection refused")}); cmd == nil {
		t.Fatal("a failed look asked for no retry")
	}
	d.send(FleetMsg{Err: errors.New("connection refused")})
	f := d.m.Plain()
	if !strings.Contains(f, "agent not answering (2 failed, retrying every 1s, showing the fleet as of 10:00:00): connection refused") || !strings.Contains(f, "gpu-a ") {
		t.Errorf("a failing agent:\n%s", f)
	}
	d.send(FleetMsg{Fleet: fleetAt(1)})
	if strings.Contains(d.m.Plain(), "not answering") {
		t.Errorf("an answer did not clear the failure:\n%s", d.m.Plain())
	}
	refused := errors.New("this agent is not in a fleet")
	if cmd := d.send(FleetMsg{Err: Fatal(refused)}); !isQuit(cmd) || !errors.Is(d.m.Err(), refused) {
		t.Errorf("a fatal error: quit %v, Err %v", isQuit(cmd), d.m.Err())
	}
}
