package top

import (
	"errors"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

var t0 = time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)

func f64(v float64) *float64 { return &v }

// snapshotAt is a node with two GPUs, two containers of alice and bob
// and a host process of carol, at t0 plus step seconds; alice's
// container has used 2 CPU seconds a second.
func snapshotAt(step int) apitype.Snapshot {
	at := t0.Add(time.Duration(step) * time.Second)
	started := t0.Add(-90 * time.Minute)
	share := func(gpu int, sm float64, mem uint64) apitype.GPUShare {
		return apitype.GPUShare{GPU: gpu, SMPercent: sm, MemoryBytes: mem, Share: 1, Processes: 1}
	}
	return apitype.Snapshot{
		Node: "lab-1", Time: at,
		GPUs: []apitype.GPU{
			{Index: 0, UUID: "GPU-0", Model: "H100", MemoryTotalBytes: 80 << 30, MemoryUsedBytes: 40 << 30, UtilPercent: f64(float64(50 + 10*step)), PowerWatts: f64(300), TemperatureC: f64(60), Holders: 1,
				Processes: []apitype.Process{{PID: 11, Type: "compute", OwnerKind: "container", Owner: "aaaa", MemoryBytes: 40 << 30, SMPercent: 50}}},
			{Index: 1, UUID: "GPU-1", Model: "H100", MemoryTotalBytes: 80 << 30, MemoryUsedBytes: 8 << 30, UtilPercent: f64(5), PowerWatts: f64(90), TemperatureC: f64(40), Holders: 1,
				Processes: []apitype.Process{{PID: 22, Type: "compute", OwnerKind: "container", Owner: "bbbb", MemoryBytes: 4 << 30, SMPercent: 1}, {PID: 33, Type: "compute", OwnerKind: "host", Owner: "carol", MemoryBytes: 4 << 30, SMPercent: 4}}},
		},
		Containers: []apitype.Container{
			{ID: "aaaa", Name: "alice-train", User: "alice", Running: true, Resolved: true, StartedAt: &started, CPUSeconds: float64(100 + 2*step),
				Labels: map[string]string{"gpumeter.job": "j-000001"}, GPUs: []apitype.GPUShare{share(0, 50, 40<<30)}},
			{ID: "bbbb", Name: "bob-notebook", User: "bob", Running: true, Resolved: true, StartedAt: &started, CPUSeconds: 10,
				Labels: map[string]string{}, GPUs: []apitype.GPUShare{share(1, 1, 4<<30)}},
		},
		HostUsers: []apitype.HostUser{{User: "carol", GPUs: []apitype.GPUShare{share(1, 4, 4<<30)}}},
		Waste: &apitype.WasteReport{Findings: []apitype.WasteFinding{
			{ID: "idle-bob", Rule: "idle", OwnerKind: apitype.OwnerContainer, ContainerID: "bbbb", Container: "bob-notebook", Owner: "bob", Active: true, Since: t0},
		}},
		Queue: &apitype.QueueSummary{Counts: map[string]int{"queued": 2, "running": 1}, Jobs: []apitype.JobBrief{{ID: "j-000001", Name: "train", User: "alice", State: "running", GPUsRequested: 1}}},
	}
}

// driven is a model and what driving it has asked for.
type driven struct {
	t       *testing.T
	m       Model
	fetches int
}

func drive(t *testing.T, o Options) *driven {
	t.Helper()
	d := &driven{t: t}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	o.Fetch = func() (apitype.Snapshot, error) {
		d.fetches++
		return snapshotAt(d.fetches), nil
	}
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	d.m = m
	return d
}

// send feeds msg to the model and returns the command it gave back.
func (d *driven) send(msg tea.Msg) tea.Cmd {
	d.t.Helper()
	next, cmd := d.m.Update(msg)
	d.m = next.(Model)
	return cmd
}

func (d *driven) press(keys ...string) {
	d.t.Helper()
	for _, k := range keys {
		d.send(keyMsg(k))
	}
}

// keyMsg is the key press tmux's send-keys would name k.
func keyMsg(k string) tea.KeyPressMsg {
	switch k {
	case "enter":
		return tea.KeyPressMsg{Code: tea.KeyEnter}
	case "esc":
		return tea.KeyPressMsg{Code: tea.KeyEscape}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "up":
		return tea.KeyPressMsg{Code: tea.KeyUp}
	case "backspace":
		return tea.KeyPressMsg{Code: tea.KeyBackspace}
	case "ctrl+c":
		return tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
	}
	return tea.KeyPressMsg{Code: []rune(k)[0], Text: k}
}

// names are the first column of the table's rows, as shown.
func (d *driven) names() []string {
	var out []string
	for _, r := range d.m.rows {
		out = append(out, r.name)
	}
	return out
}

func isQuit(cmd tea.Cmd) bool {
	if cmd == nil {
		return false
	}
	_, ok := cmd().(tea.QuitMsg)
	return ok
}

// TestFetchLoop: the first command takes a snapshot; each snapshot asks
// for the next only after the interval, and a refresh while a fetch is
// under way asks for none, so that the agent is asked once a redraw.
func TestFetchLoop(t *testing.T) {
	d := drive(t, Options{Interval: 2 * time.Second})
	msg := d.m.Init()()
	if d.fetches != 1 {
		t.Fatalf("Init's command fetched %d times, want 1", d.fetches)
	}
	next := d.send(msg)
	if next == nil {
		t.Fatal("a snapshot asked for no next one")
	}
	if d.fetches != 1 {
		t.Errorf("taking a snapshot fetched again at once: %d fetches", d.fetches)
	}
	if d.m.snap == nil || d.m.snap.Node != "lab-1" {
		t.Fatalf("the snapshot was not kept: %+v", d.m.snap)
	}
	// The tick's command waits the interval and then asks for a refresh.
	began := time.Now()
	refresh := next()
	if _, ok := refresh.(refreshMsg); !ok {
		t.Fatalf("the next command gave %T, want a refresh", refresh)
	}
	if waited := time.Since(began); waited < 1900*time.Millisecond {
		t.Errorf("the refresh came after %s, want the 2s interval", waited)
	}
	fetch := d.send(refresh)
	if fetch == nil || d.send(refreshMsg{}) != nil {
		t.Fatal("a refresh should fetch once, and a second one meanwhile not at all")
	}
	d.send(fetch())
	if d.fetches != 2 {
		t.Errorf("%d fetches, want 2", d.fetches)
	}

	if _, err := New(Options{Interval: 500 * time.Millisecond, Fetch: d.m.opts.Fetch}); err == nil {
		t.Error("an interval under a second was taken")
	}
}

// TestHistoryAndCPU: each snapshot adds to every GPU's history, which
// stays at most historyLen long, and the CPU column is the rate between
// two snapshots.
func TestHistoryAndCPU(t *testing.T) {
	d := drive(t, Options{Sort: ColSM})
	d.send(SnapshotMsg{Snapshot: snapshotAt(0)})
	if got := d.m.rows[0].cpu; got >= 0 {
		t.Errorf("CPU after one snapshot %v, want unknown", got)
	}
	d.send(SnapshotMsg{Snapshot: snapshotAt(1)})
	if got := d.m.history["GPU-0"].util; len(got) != 2 || got[0] != 50 || got[1] != 60 {
		t.Errorf("GPU 0 util history %v, want [50 60]", got)
	}
	alice := d.m.rows[0]
	if alice.name != "alice-train" || alice.cpu != 2 {
		t.Errorf("first row %s with CPU %v, want alice-train with 2 cores", alice.name, alice.cpu)
	}
	before := d.m
	for i := range historyLen + 5 {
		d.send(SnapshotMsg{Snapshot: snapshotAt(2 + i)})
	}
	if n := len(d.m.history["GPU-0"].util); n != historyLen {
		t.Errorf("history of %d, want %d", n, historyLen)
	}
	// Update never changes what an older model holds.
	if got := before.history["GPU-0"].util; len(got) != 2 {
		t.Errorf("an older model's history changed to %v", got)
	}
}

// TestKeys: g steps the grouping, s and r the sort, / filters by user,
// enter opens the detail and esc closes it, q and ctrl+c quit.
func TestKeys(t *testing.T) {
	d := drive(t, Options{Sort: ColSM})
	d.send(SnapshotMsg{Snapshot: snapshotAt(0)})
	if got, want := strings.Join(d.names(), "|"), "alice-train|carol (host)|bob-notebook"; got != want {
		t.Errorf("by container, SM first: %s, want %s", got, want)
	}
	d.press("g")
	if got, want := strings.Join(d.names(), "|"), "alice|carol|bob"; got != want || d.m.group != ByUser {
		t.Errorf("by user: %s (%s), want %s", got, d.m.group, want)
	}
	d.press("g")
	if got, want := strings.Join(d.names(), "|"), "11 alice-train|33 (host)|22 bob-notebook"; got != want {
		t.Errorf("by process: %s, want %s", got, want)
	}
	d.press("g")
	if d.m.group != ByContainer {
		t.Errorf("g three times is %s, want container again", d.m.group)
	}

	d.press("r")
	if got, want := strings.Join(d.names(), "|"), "bob-notebook|carol (host)|alice-train"; got != want {
		t.Errorf("reversed: %s, want %s", got, want)
	}
	d.press("r", "S", "S", "S", "S") // sm -> gpu -> user -> name -> waste
	if d.m.sort != ColWaste || d.names()[0] != "bob-notebook" {
		t.Errorf("sorted on %s: %v, want waste with bob's idle container first", d.m.sort, d.names())
	}
	d.press("s", "s") // waste -> name -> user
	if d.m.sort != ColUser || strings.Join(d.names(), "|") != "alice-train|bob-notebook|carol (host)" {
		t.Errorf("sorted on %s: %v, want user A to Z", d.m.sort, d.names())
	}

	d.press("/", "b", "o", "x", "backspace", "enter")
	if d.m.user != "bo" || strings.Join(d.names(), "|") != "bob-notebook" {
		t.Errorf("filter %q: %v, want bob's row alone", d.m.user, d.names())
	}
	if frame := d.m.Plain(); !strings.Contains(frame, "user: bo") {
		t.Errorf("the frame does not say the filter:\n%s", frame)
	}
	d.press("esc")
	if d.m.user != "" || len(d.m.rows) != 3 {
		t.Errorf("esc left filter %q and %d rows", d.m.user, len(d.m.rows))
	}

	d.press("up", "up", "down", "enter")
	if !d.m.detail || d.m.selected != "c:bbbb" {
		t.Fatalf("detail %v of %q, want bob's container", d.m.detail, d.m.selected)
	}
	frame := d.m.Plain()
	for _, want := range []string{"container bob-notebook", "container  bbbb", "waste: idle since"} {
		if !strings.Contains(frame, want) {
			t.Errorf("the detail view lacks %q:\n%s", want, frame)
		}
	}
	// A new snapshot keeps the detail on the same row.
	d.send(SnapshotMsg{Snapshot: snapshotAt(1)})
	if !d.m.detail || d.m.selected != "c:bbbb" {
		t.Errorf("after a snapshot: detail %v of %q", d.m.detail, d.m.selected)
	}
	d.press("esc")
	if d.m.detail {
		t.Error("esc did not close the detail view")
	}

	if next, cmd := d.m.Update(tea.KeyPressMsg{Code: 'q', Text: "q"}); !isQuit(cmd) || next == nil {
		t.Error("q did not quit")
	}
	if _, cmd := d.m.Update(tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}); !isQuit(cmd) {
		t.Error("ctrl+c did not quit")
	}
	// While a filter is typed, q is a letter of it.
	d.press("/")
	if _, cmd := d.m.Update(tea.KeyPressMsg{Code: 'q', Text: "q"}); isQuit(cmd) {
		t.Error("q quit while typing a filter")
	}
}

// TestAgentGone: a failed snapshot is said on screen with the last one
// still shown, and tried again after the interval; the next that works
// clears it. A fatal error ends top with it.
func TestAgentGone(t *testing.T) {
	d := drive(t, Options{})
	d.send(SnapshotMsg{Snapshot: snapshotAt(0)})
	gone := errors.New("dial unix /run/gpumeter/api.sock: connect: connection refused")
	next := d.send(SnapshotMsg{Err: gone})
	if next == nil {
		t.Fatal("a failed snapshot was not tried again")
	}
	d.send(SnapshotMsg{Err: gone})
	frame := d.m.Plain()
	for _, want := range []string{"agent not answering (2 failed, retrying every 1s, showing the snapshot of 10:00:00): dial unix", "connection refused", "alice-train"} {
		if !strings.Contains(frame, want) {
			t.Errorf("the frame lacks %q:\n%s", want, frame)
		}
	}
	d.send(SnapshotMsg{Snapshot: snapshotAt(1)})
	if strings.Contains(d.m.Plain(), "not answering") {
		t.Error("the error stayed after the agent answered")
	}

	refused := errors.New("401 bad_token")
	cmd := d.send(SnapshotMsg{Err: Fatal(refused)})
	if !isQuit(cmd) || !errors.Is(d.m.Err(), refused) {
		t.Errorf("a fatal error: quit %v, Err %v", isQuit(cmd), d.m.Err())
	}
}

// TestFrame: the plain frame has a line per GPU with its bars and
// sparklines, the queue and waste in the title, and fits the width.
func TestFrame(t *testing.T) {
	d := drive(t, Options{Width: 150})
	for i := range 4 {
		d.send(SnapshotMsg{Snapshot: snapshotAt(i)})
	}
	frame := d.m.Plain()
	lines := strings.Split(frame, "\n")
	for _, want := range []string{"node lab-1", "queue: 2 queued, 1 running", "waste: 1 active",
		"GPU 0  H100", "util ██████░░ 80%", "▅▅▆▇", "mem ████░░░░ 40.0/80G", "pwr ████████ 300W", "pwr ██░░░░░░ 90W", "temp █████░░░ 60C",
		"j-000001", "idle", "q quit"} {
		if !strings.Contains(frame, want) {
			t.Errorf("the frame lacks %q:\n%s", want, frame)
		}
	}
	for _, l := range lines {
		if w := len([]rune(l)); w > 150 {
			t.Errorf("a line of %d columns in a frame of 150: %q", w, l)
		}
	}
	if strings.Contains(frame, "\x1b[") {
		t.Error("the plain frame has escape codes")
	}
	if !strings.Contains(d.m.frame(), "\x1b[") {
		t.Error("the terminal's frame has no styles")
	}

	// A short terminal shows the rows that fit, and follows the
	// selection.
	d.send(tea.WindowSizeMsg{Width: 150, Height: 9})
	if n := d.m.tableRows(); n != 2 {
		t.Fatalf("%d table rows in 9 lines, want 2", n)
	}
	d.press("up", "up", "up")
	if frame := d.m.Plain(); !strings.Contains(frame, "alice-train") || strings.Contains(frame, "carol (host)") {
		t.Errorf("the first rows are not in view:\n%s", frame)
	}
	d.press("down", "down")
	if frame := d.m.Plain(); !strings.Contains(frame, "carol (host)") || strings.Contains(frame, "alice-train") {
		t.Errorf("the selection's row is not in view:\n%s", frame)
	}
}

// TestDetailWords: the detail says what a container asked for and counts
// its processes in words that read right.
func TestDetailWords(t *testing.T) {
	for req, want := range map[string]string{"": "none", "all": "all GPUs", "0": "GPU 0", "0,1": "GPUs 0,1", "GPU-0a1b": "GPU-0a1b"} {
		if got := gpuRequestWords(req); got != want {
			t.Errorf("gpuRequestWords(%q) = %q, want %q", req, got, want)
		}
	}
	lines := shareLines([]apitype.GPUShare{{GPU: 0, Processes: 1}, {GPU: 1, Processes: 2}})
	if !strings.Contains(lines[0], " 1 process ") || !strings.Contains(lines[1], " 2 processes ") {
		t.Errorf("share lines %q, want 1 process and 2 processes", lines)
	}
}

// TestRowsNameAnotherNodesJob: a container labelled with another node's
// job of the same id as one of this node's (two agents on one engine) is
// that node's job, by container and by process, and the detail of the
// queue's own job does not land on it.
func TestRowsNameAnotherNodesJob(t *testing.T) {
	snap := snapshotAt(0)
	snap.Containers[0].Labels = map[string]string{"gpumeter.job": "j-000001", "gpumeter.node": "lab-1"}
	snap.Containers[1].Labels = map[string]string{"gpumeter.job": "j-000001", "gpumeter.node": "node2"}
	for _, g := range []Group{ByContainer, ByProcess} {
		jobs := map[string][]string{}
		for _, r := range buildRows(&snap, g, nil) {
			if len(r.jobs) > 0 {
				jobs[r.user] = r.jobs
			}
		}
		if got := jobs["alice"]; len(got) != 1 || got[0] != "j-000001" {
			t.Errorf("group %d: alice's row has jobs %q, want this node's j-000001", g, got)
		}
		if got := jobs["bob"]; len(got) != 1 || got[0] != "node2/j-000001" {
			t.Errorf("group %d: bob's row has jobs %q, want node2/j-000001", g, got)
		}
	}
}
