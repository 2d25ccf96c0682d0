// Package top is the model of `gpumeter top`, the live terminal view of
// an agent: a bar and a sparkline per GPU, then a table of containers,
// users or processes. It is a Bubble Tea model: Update is pure and takes
// the snapshots and keys as messages; the one API call per redraw runs in
// a command, as the Fetch the caller gives. FleetModel is `top --fleet`,
// the same over a fleet: a row per node and the detail of its GPUs.
package top

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

// MinInterval is the shortest time between two snapshots: top redraws at
// most once a second, and asks the agent once per redraw.
const MinInterval = time.Second

// historyLen is how many snapshots a GPU's sparklines remember.
const historyLen = 60

// Fetch takes one snapshot from the agent. It runs in a command, never in
// Update. An error made by Fatal ends top; any other is shown and the
// snapshot is tried again at the next interval.
type Fetch func() (apitype.Snapshot, error)

// Fatal marks err as one that trying again will not mend: a token the
// agent refuses, say.
func Fatal(err error) error { return fatalError{err} }

type fatalError struct{ error }

func (e fatalError) Unwrap() error { return e.error }

func isFatal(err error) bool {
	var f fatalError
	return errors.As(err, &f)
}

// Options are how top starts.
type Options struct {
	Interval time.Duration // at least MinInterval
	Group    Group
	Sort     Column
	// Reverse turns the sort column's own direction around.
	Reverse bool
	// User shows the rows of this user only; "" shows every row the
	// caller may see.
	User  string
	Fetch Fetch
	// Width is the frame's width before the terminal tells its own; 0
	// leaves lines as long as they are.
	Width int
}

// Model is the state of the view.
type Model struct {
	opts Options

	snap *apitype.Snapshot
	poll poll

	// history is the recent figures of each GPU by UUID.
	history map[string]gpuHistory
	// cpu is each container's CPU use in cores between the last two
	// snapshots; cpuSeen its CPU seconds and time in the last.
	cpu     map[string]float64
	cpuSeen map[string]cpuSample

	width, height int
	group         Group
	sort          Column
	reverse       bool
	user          string
	// filtering: the user filter is being typed into input.
	filtering bool
	input     string
	// selected is the key of the selected row; offset the first row
	// shown.
	selected string
	offset   int
	// detail: the detail view of the selected row is shown.
	detail bool
	rows   []row
}

type cpuSample struct {
	seconds float64
	at      time.Time
}

// New checks o and builds the model.
func New(o Options) (Model, error) {
	if o.Interval < MinInterval {
		return Model{}, fmt.Errorf("interval: %s is shorter than %s; top redraws at most once a second", o.Interval, MinInterval)
	}
	if o.Fetch == nil {
		return Model{}, errors.New("top: no Fetch to take snapshots with")
	}
	return Model{opts: o, poll: poll{interval: o.Interval}, group: o.Group, sort: o.Sort, reverse: o.Reverse, user: o.User, width: o.Width,
		history: map[string]gpuHistory{}, cpu: map[string]float64{}, cpuSeen: map[string]cpuSample{}}, nil
}

// SnapshotMsg is the outcome of one Fetch.
type SnapshotMsg struct {
	Snapshot apitype.Snapshot
	Err      error
}

// Init takes the first snapshot.
func (m Model) Init() tea.Cmd { return m.fetch() }

func (m Model) fetch() tea.Cmd {
	f := m.opts.Fetch
	return func() tea.Msg {
		s, err := f()
		return SnapshotMsg{Snapshot: s, Err: err}
	}
}

// Err is the error top ended with, if it ended with one.
func (m Model) Err() error { return m.poll.fatal }

// Update takes one message: a snapshot, a key or the terminal's size.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case SnapshotMsg:
		return m.snapshot(msg)
	case refreshMsg:
		return m, m.poll.refresh(m.fetch())
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.scroll()
		return m, nil
	case tea.KeyPressMsg:
		return m.key(msg)
	}
	return m, nil
}

// snapshot takes a fetch's outcome and asks for the next after the
// interval: one call at a time, and one per interval at most.
func (m Model) snapshot(msg SnapshotMsg) (tea.Model, tea.Cmd) {
	keep, next := m.poll.answered(msg.Err)
	if !keep {
		return m, next
	}
	s := msg.Snapshot
	m.snap = &s
	m.history = pushHistory(m.history, s.GPUs)
	m.cpu, m.cpuSeen = cpuRates(m.cpuSeen, &s)
	m.rebuild()
	return m, next
}

// cpuRates is each container's CPU use in cores since the snapshot seen,
// and the samples to measure the next against.
func cpuRates(seen map[string]cpuSample, s *apitype.Snapshot) (map[string]float64, map[string]cpuSample) {
	rates, now := map[string]float64{}, map[string]cpuSample{}
	for _, c := range s.Containers {
		cur := cpuSample{seconds: c.CPUSeconds, at: s.Time}
		now[c.ID] = cur
		prev, ok := seen[c.ID]
		if dt := cur.at.Sub(prev.at).Seconds(); ok && dt > 0 && cur.seconds >= prev.seconds {
			rates[c.ID] = (cur.seconds - prev.seconds) / dt
		}
	}
	return rates, now
}

// rebuild makes the rows again from the snapshot and the view's settings,
// keeping the selection on the row it was on.
func (m *Model) rebuild() {
	if m.snap == nil {
		m.rows = nil
		return
	}
	rows := buildRows(m.snap, m.group, m.cpu)
	if m.user != "" {
		rows = slices.DeleteFunc(rows, func(r row) bool { return !strings.Contains(r.user, m.user) })
	}
	slices.SortFunc(rows, func(a, b row) int { return less(m.sort, m.reverse)(&a, &b) })
	m.rows = rows
	if m.index() < 0 {
		m.selected, m.detail = "", false
		if len(rows) > 0 {
			m.selected = rows[0].key
		}
	}
	m.scroll()
}

// index is the position of the selected row; -1 when it is gone.
func (m *Model) index() int {
	return slices.IndexFunc(m.rows, func(r row) bool { return r.key == m.selected })
}

// tableRows is how many rows fit under the GPUs; 0 when the terminal's
// height is not known, and all are shown.
func (m *Model) tableRows() int {
	if m.height == 0 {
		return 0
	}
	gpus := 0
	if m.snap != nil {
		gpus = len(m.snap.GPUs)
	}
	// The title, the status line, the GPUs, a blank line, the heading
	// and the help line.
	return max(1, m.height-gpus-5)
}

// scroll keeps the selected row in view.
func (m *Model) scroll() {
	m.offset = scrolled(m.offset, m.index(), m.tableRows(), len(m.rows))
}

func (m Model) key(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	if k.String() == "ctrl+c" {
		return m, tea.Quit
	}
	if m.filtering {
		switch k.String() {
		case "enter":
			m.filtering, m.user = false, strings.TrimSpace(m.input)
			m.rebuild()
		case "esc":
			m.filtering = false
		case "backspace":
			if r := []rune(m.input); len(r) > 0 {
				m.input = string(r[:len(r)-1])
			}
		default:
			if t := k.Key().Text; t != "" {
				m.input += t
			}
		}
		return m, nil
	}
	switch {
	case key.Matches(k, keys.quit):
		return m, tea.Quit
	case m.detail && key.Matches(k, keys.back):
		m.detail = false
	case key.Matches(k, keys.group):
		m.group = (m.group + 1) % Group(len(groupNames))
		m.detail = false
		m.rebuild()
	case key.Matches(k, keys.sortNext):
		m.sort = (m.sort + 1) % Column(len(columns))
		m.rebuild()
	case key.Matches(k, keys.sortPrev):
		m.sort = (m.sort + Column(len(columns)) - 1) % Column(len(columns))
		m.rebuild()
	case key.Matches(k, keys.reverse):
		m.reverse = !m.reverse
		m.rebuild()
	case key.Matches(k, keys.filter):
		m.filtering, m.input = true, m.user
	case key.Matches(k, keys.down):
		m.move(1)
	case key.Matches(k, keys.up):
		m.move(-1)
	case key.Matches(k, keys.detail):
		m.detail = m.index() >= 0
	case key.Matches(k, keys.back):
		if m.user != "" {
			m.user = ""
			m.rebuild()
		}
	}
	return m, nil
}

func (m *Model) move(d int) {
	if len(m.rows) == 0 {
		return
	}
	i := min(max(m.index()+d, 0), len(m.rows)-1)
	m.selected = m.rows[i].key
	m.scroll()
}

// gpuHistory is a GPU's recent figures, oldest first.
type gpuHistory struct {
	util, mem, power, temp []float64
}

// pushHistory adds the GPUs' figures to the history and drops GPUs no
// longer seen. It returns a new map: Update never changes what an older
// model holds.
func pushHistory(h map[string]gpuHistory, gpus []apitype.GPU) map[string]gpuHistory {
	out := make(map[string]gpuHistory, len(gpus))
	for _, g := range gpus {
		old := h[g.UUID]
		memPct := 0.0
		if g.MemoryTotalBytes > 0 {
			memPct = 100 * float64(g.MemoryUsedBytes) / float64(g.MemoryTotalBytes)
		}
		out[g.UUID] = gpuHistory{
			util:  ring(old.util, value(g.UtilPercent)),
			mem:   ring(old.mem, memPct),
			power: ring(old.power, value(g.PowerWatts)),
			temp:  ring(old.temp, value(g.TemperatureC)),
		}
	}
	return out
}

// ring is s with v added at the end and at most historyLen long, in a
// new slice.
func ring(s []float64, v float64) []float64 {
	if len(s) >= historyLen {
		s = s[len(s)-historyLen+1:]
	}
	return append(slices.Clone(s), v)
}

func value(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
