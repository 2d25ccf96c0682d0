package top

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/units"
)

// Fleet is one look at a fleet: its nodes (GET /api/v1/nodes) and the
// jobs the caller may see (GET /api/v1/jobs), taken at At.
type Fleet struct {
	Nodes []apitype.Node
	Jobs  []apitype.Job
	At    time.Time
}

// FetchFleet takes one look at the fleet. It runs in a command, never in
// Update; an error made by Fatal ends the view, any other is shown and
// the look is tried again at the next interval.
type FetchFleet func() (Fleet, error)

// FleetOptions are how the fleet view starts.
type FleetOptions struct {
	Interval time.Duration // at least MinInterval
	Fetch    FetchFleet
	// Width is the frame's width before the terminal tells its own; 0
	// leaves lines as long as they are.
	Width int
}

// FleetModel is the state of `gpumeter top --fleet`: a row per node of
// the fleet, and the detail of one node's GPUs and jobs.
type FleetModel struct {
	opts  FleetOptions
	fleet *Fleet
	poll  poll

	width, height int
	// selected is the name of the selected node; offset the first row
	// shown; detail shows the selected node's GPUs and jobs.
	selected string
	offset   int
	detail   bool
}

// NewFleet checks o and builds the fleet view's model.
func NewFleet(o FleetOptions) (FleetModel, error) {
	if o.Interval < MinInterval {
		return FleetModel{}, fmt.Errorf("interval: %s is shorter than %s; top redraws at most once a second", o.Interval, MinInterval)
	}
	if o.Fetch == nil {
		return FleetModel{}, errors.New("top: no Fetch to look at the fleet with")
	}
	return FleetModel{opts: o, poll: poll{interval: o.Interval}, width: o.Width}, nil
}

// FleetMsg is the outcome of one FetchFleet.
type FleetMsg struct {
	Fleet Fleet
	Err   error
}

// Init takes the first look.
func (m FleetModel) Init() tea.Cmd { return m.fetch() }

func (m FleetModel) fetch() tea.Cmd {
	f := m.opts.Fetch
	return func() tea.Msg {
		fl, err := f()
		return FleetMsg{Fleet: fl, Err: err}
	}
}

// Err is the error the view ended with, if it ended with one.
func (m FleetModel) Err() error { return m.poll.fatal }

// Update takes one message: a look at the fleet, a key or the
// terminal's size.
func (m FleetModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case FleetMsg:
		keep, next := m.poll.answered(msg.Err)
		if !keep {
			return m, next
		}
		fl := msg.Fleet
		m.fleet = &fl
		if m.index() < 0 {
			m.selected, m.detail = "", false
			if len(fl.Nodes) > 0 {
				m.selected = fl.Nodes[0].Node
			}
		}
		m.scroll()
		return m, next
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

func (m FleetModel) key(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	switch {
	case k.String() == "ctrl+c", key.Matches(k, keys.quit):
		return m, tea.Quit
	case key.Matches(k, keys.down):
		m.move(1)
	case key.Matches(k, keys.up):
		m.move(-1)
	case key.Matches(k, keys.detail):
		m.detail = m.index() >= 0
	case key.Matches(k, keys.back):
		m.detail = false
	}
	return m, nil
}

func (m *FleetModel) nodes() []apitype.Node {
	if m.fleet == nil {
		return nil
	}
	return m.fleet.Nodes
}

// index is the position of the selected node; -1 when it is gone.
func (m *FleetModel) index() int {
	return slices.IndexFunc(m.nodes(), func(n apitype.Node) bool { return n.Node == m.selected })
}

func (m *FleetModel) move(d int) {
	ns := m.nodes()
	if len(ns) == 0 {
		return
	}
	m.selected = ns[min(max(m.index()+d, 0), len(ns)-1)].Node
	m.scroll()
}

// tableRows is how many node rows fit; 0 when the terminal's height is
// not known, and all are shown.
func (m *FleetModel) tableRows() int {
	if m.height == 0 {
		return 0
	}
	// The title, the status line, a blank line, the heading and the
	// help line.
	return max(1, m.height-5)
}

// scroll keeps the selected node in view.
func (m *FleetModel) scroll() {
	m.offset = scrolled(m.offset, m.index(), m.tableRows(), len(m.nodes()))
}

// View draws the frame in the alternate screen.
func (m FleetModel) View() tea.View {
	return altView(m.frame(), "gpumeter top --fleet")
}

// Plain is the frame as plain text: what `gpumeter top --fleet --once`
// prints.
func (m FleetModel) Plain() string { return ansi.Strip(m.frame()) }

func (m FleetModel) frame() string {
	lines := []string{titleStyle.Render(m.title()), m.status()}
	if m.fleet != nil {
		lines = append(lines, "")
		if m.detail {
			lines = append(lines, m.detailLines()...)
		} else {
			lines = append(lines, m.table()...)
		}
	}
	lines = append(lines, m.helpLine())
	return fitLines(lines, m.width)
}

func (m FleetModel) title() string {
	if m.fleet == nil {
		return "gpumeter top --fleet"
	}
	states := map[string]int{}
	for _, n := range m.fleet.Nodes {
		states[n.State]++
	}
	var ns []string
	for _, s := range []string{apitype.NodeUp, apitype.NodeDraining, apitype.NodeLost} {
		if states[s] > 0 {
			ns = append(ns, fmt.Sprintf("%d %s", states[s], s))
		}
	}
	nodes := fmt.Sprintf("%d nodes", len(m.fleet.Nodes))
	if len(ns) > 0 {
		nodes += ": " + strings.Join(ns, ", ")
	}
	jobs := map[string]int{}
	for _, j := range m.fleet.Jobs {
		jobs[j.State]++
	}
	var js []string
	for _, s := range []string{"queued", "starting", "running"} {
		if jobs[s] > 0 {
			js = append(js, fmt.Sprintf("%d %s", jobs[s], s))
		}
	}
	if len(js) == 0 {
		js = []string{"none"}
	}
	return strings.Join([]string{"gpumeter top --fleet", m.fleet.At.UTC().Format("2006-01-02 15:04:05 UTC"), nodes, "jobs: " + strings.Join(js, ", ")}, " · ")
}

func (m FleetModel) status() string {
	showing := ""
	if m.fleet != nil {
		showing = "the fleet as of " + m.fleet.At.UTC().Format("15:04:05")
	}
	if f := m.poll.failure(showing); f != "" {
		return f
	}
	if m.fleet == nil {
		return "waiting for the agent's first answer…"
	}
	return faintStyle.Render("GPUs: █ held by a job, ▒ used outside the queue, · free; lost: its agent's lease ran out")
}

// fleetColumns are the fleet table's columns.
var fleetColumns = []struct {
	head  string
	width int
	right bool
}{
	{"NODE", 16, false}, {"STATE", 8, false}, {"LEASE", 5, true}, {"SCORE", 5, true}, {"SM%", 4, true},
	{"GPUS", 8, false}, {"FREE", 4, true}, {"HELD", 4, true}, {"OUT", 3, true}, {"JOBS", 4, true}, {"VERSION", 10, false},
}

// gpuStrip is a node's GPUs, one cell each by state.
func gpuStrip(n apitype.Node) string {
	var b strings.Builder
	for _, g := range n.GPUs {
		switch g.State {
		case apitype.GPUHeld:
			b.WriteString("█")
		case apitype.GPUOutside:
			b.WriteString("▒")
		default:
			b.WriteString("·")
		}
	}
	return b.String()
}

// running reports whether a job holds GPUs now.
func running(j apitype.Job) bool { return j.State == "starting" || j.State == "running" }

// nodeJobs are the jobs starting or running on node.
func (m FleetModel) nodeJobs(node string) []apitype.Job {
	var out []apitype.Job
	for _, j := range m.fleet.Jobs {
		if j.Node == node && running(j) {
			out = append(out, j)
		}
	}
	return out
}

func (m FleetModel) table() []string {
	strip := 8
	for _, n := range m.fleet.Nodes {
		strip = max(strip, len(n.GPUs))
	}
	var head []string
	for _, c := range fleetColumns {
		w := c.width
		if c.head == "GPUS" {
			w = strip
		}
		head = append(head, pad(c.head, w, c.right))
	}
	lines := []string{headStyle.Render(strings.TrimRight(strings.Join(head, " "), " "))}
	if len(m.fleet.Nodes) == 0 {
		return append(lines, faintStyle.Render("no node has registered in the ledger yet"))
	}
	nodes := m.fleet.Nodes
	if n := m.tableRows(); n > 0 && len(nodes) > n {
		nodes = nodes[m.offset:min(m.offset+n, len(nodes))]
	}
	for _, n := range nodes {
		free, held, outside := n.GPUCounts()
		cells := []string{n.Node, n.State, leaseAge(n.LeaseAgeSeconds), strconv.FormatFloat(n.Score, 'f', 0, 64),
			strconv.FormatFloat(100*n.SMUtil, 'f', 0, 64), gpuStrip(n), strconv.Itoa(free), strconv.Itoa(held), strconv.Itoa(outside),
			strconv.Itoa(len(m.nodeJobs(n.Node))), dash(n.AgentVersion)}
		for i, c := range fleetColumns {
			w := c.width
			if c.head == "GPUS" {
				w = strip
			}
			cells[i] = pad(cells[i], w, c.right)
		}
		line := strings.TrimRight(strings.Join(cells, " "), " ")
		switch {
		case n.Node == m.selected:
			line = selectedStyle.Render(line)
		case n.State == apitype.NodeLost:
			line = errorStyle.Render(line)
		case n.State == apitype.NodeDraining:
			line = wasteStyle.Render(line)
		}
		lines = append(lines, line)
	}
	return lines
}

// leaseAge writes a lease's age in seconds as the tables do: 2s, 5m, 3h.
func leaseAge(s float64) string { return units.FormatAge(time.Duration(s * float64(time.Second))) }

// detailLines are the selected node's GPUs, each with the job that holds
// it, and its jobs.
func (m FleetModel) detailLines() []string {
	i := m.index()
	if i < 0 {
		return []string{"the node is gone"}
	}
	n := m.fleet.Nodes[i]
	free, held, outside := n.GPUCounts()
	lines := []string{headStyle.Render("node " + n.Node),
		fmt.Sprintf("  state %s · lease %s ago · score %.0f · SM %.0f%% · agent %s · %d free, %d held, %d outside",
			n.State, leaseAge(n.LeaseAgeSeconds), n.Score, 100*n.SMUtil, dash(n.AgentVersion), free, held, outside)}
	jobs := m.nodeJobs(n.Node)
	holder := map[string]apitype.Job{}
	for _, j := range jobs {
		for _, u := range j.GPUs {
			holder[u] = j
		}
	}
	for _, g := range n.GPUs {
		l := fmt.Sprintf("  GPU %-2d %-24s %-8s %-7s", g.Index, shorten(g.Model, 24), memWord(g.MemoryBytes), g.State)
		if j, ok := holder[g.UUID]; ok {
			l += " " + j.ID + " (" + j.User + ")"
		}
		lines = append(lines, strings.TrimRight(l, " "))
	}
	if len(n.GPUs) == 0 {
		lines = append(lines, "  no GPUs registered")
	}
	for _, j := range jobs {
		lines = append(lines, fmt.Sprintf("  job %s (%s) of %s: %s, %d GPUs", j.ID, dash(j.Name), j.User, j.State, j.GPUsRequested))
	}
	return lines
}

// memWord is a GPU's memory in GiB: "80G".
func memWord(b uint64) string {
	return strconv.FormatFloat(float64(b)/(1<<30), 'f', 0, 64) + "G"
}

func (m FleetModel) helpLine() string {
	h := help.New()
	if m.width > 0 {
		h.SetWidth(m.width)
	}
	return h.ShortHelpView([]key.Binding{keys.quit, keys.up, keys.detail, keys.back})
}
