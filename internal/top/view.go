package top

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

// keys are top's keys, as the help line shows them.
var keys = struct {
	quit, group, sortNext, sortPrev, reverse, filter, up, down, detail, back key.Binding
}{
	quit:     key.NewBinding(key.WithKeys("q"), key.WithHelp("q", "quit")),
	group:    key.NewBinding(key.WithKeys("g"), key.WithHelp("g", "group")),
	sortNext: key.NewBinding(key.WithKeys("s", ">"), key.WithHelp("s/S", "sort column")),
	sortPrev: key.NewBinding(key.WithKeys("S", "<")),
	reverse:  key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "reverse")),
	filter:   key.NewBinding(key.WithKeys("/", "u"), key.WithHelp("/", "filter user")),
	up:       key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/↓", "move")),
	down:     key.NewBinding(key.WithKeys("down", "j")),
	detail:   key.NewBinding(key.WithKeys("enter", "d"), key.WithHelp("enter", "detail")),
	back:     key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back")),
}

var (
	titleStyle    = lipgloss.NewStyle().Bold(true)
	errorStyle    = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("9"))
	headStyle     = lipgloss.NewStyle().Bold(true).Underline(true)
	selectedStyle = lipgloss.NewStyle().Reverse(true)
	wasteStyle    = lipgloss.NewStyle().Foreground(lipgloss.Color("11"))
	barStyle      = lipgloss.NewStyle().Foreground(lipgloss.Color("10"))
	faintStyle    = lipgloss.NewStyle().Faint(true)
)

// View draws the frame in the alternate screen.
func (m Model) View() tea.View {
	return altView(m.frame(), "gpumeter top")
}

// Plain is the frame as plain text, without escape codes: what
// `gpumeter top --once` prints.
func (m Model) Plain() string { return ansi.Strip(m.frame()) }

func (m Model) frame() string {
	var lines []string
	lines = append(lines, titleStyle.Render(m.title()))
	lines = append(lines, m.status())
	if m.snap == nil {
		lines = append(lines, "", m.helpLine())
		return fitLines(lines, m.width)
	}
	for _, g := range m.snap.GPUs {
		lines = append(lines, m.gpuLine(g))
	}
	lines = append(lines, "")
	if m.detail {
		lines = append(lines, m.detailLines()...)
	} else {
		lines = append(lines, m.table()...)
	}
	lines = append(lines, m.helpLine())
	return fitLines(lines, m.width)
}

func (m Model) title() string {
	if m.snap == nil {
		return "gpumeter top"
	}
	s := m.snap
	parts := []string{"gpumeter top", "node " + dash(s.Node), s.Time.UTC().Format("2006-01-02 15:04:05 UTC"),
		fmt.Sprintf("%d GPUs", len(s.GPUs)), fmt.Sprintf("%d rows", len(m.rows))}
	if s.Queue != nil {
		var qs []string
		for _, st := range []string{"queued", "starting", "running"} {
			if n := s.Queue.Counts[st]; n > 0 {
				qs = append(qs, fmt.Sprintf("%d %s", n, st))
			}
		}
		if len(qs) == 0 {
			qs = []string{"empty"}
		}
		parts = append(parts, "queue: "+strings.Join(qs, ", "))
	}
	if s.Waste != nil {
		n := 0
		for _, f := range s.Waste.Findings {
			if f.Active {
				n++
			}
		}
		parts = append(parts, fmt.Sprintf("waste: %d active", n))
	}
	return strings.Join(parts, " · ")
}

// status says how the view is set, or that the agent does not answer.
func (m Model) status() string {
	showing := ""
	if m.snap != nil {
		showing = "the snapshot of " + m.snap.Time.UTC().Format("15:04:05")
	}
	if f := m.poll.failure(showing); f != "" {
		return f
	}
	if m.snap == nil {
		return "waiting for the agent's first snapshot…"
	}
	dir := "▼"
	if columns[m.sort].desc == m.reverse {
		dir = "▲"
	}
	s := fmt.Sprintf("group: %s · sort: %s %s", m.group, m.sort, dir)
	if m.user != "" {
		s += " · user: " + m.user
	}
	return faintStyle.Render(s)
}

// gpuLine is one GPU: a bar and a sparkline of its utilisation, memory,
// power and temperature.
func (m Model) gpuLine(g apitype.GPU) string {
	name := fmt.Sprintf("GPU %-2d %-12s", g.Index, shorten(g.Model, 12))
	if g.Error != "" {
		return name + " " + errorStyle.Render("error: "+g.Error)
	}
	h := m.history[g.UUID]
	memPct := 0.0
	if g.MemoryTotalBytes > 0 {
		memPct = 100 * float64(g.MemoryUsedBytes) / float64(g.MemoryTotalBytes)
	}
	// The power bar is out of the highest power seen on any GPU of the
	// node: the API does not give the GPU's limit, and one GPU's own
	// highest would show a lone reading as a full bar.
	peak := 1.0
	for _, o := range m.history {
		peak = max(peak, slices.Max(append([]float64{1}, o.power...)))
	}
	return strings.Join([]string{name,
		meter("util", value(g.UtilPercent), 100, figure(g.UtilPercent, "%", 4), h.util, 100),
		meter("mem", memPct, 100, fmt.Sprintf("%-10s", memPair(g.MemoryUsedBytes, g.MemoryTotalBytes)), h.mem, 100),
		meter("pwr", value(g.PowerWatts), peak, figure(g.PowerWatts, "W", 5), h.power, peak),
		meter("temp", value(g.TemperatureC), 100, figure(g.TemperatureC, "C", 4), h.temp, 100),
	}, " ")
}

// figure is *p with its unit, padded to width; n/a when the GPU does not
// report it.
func figure(p *float64, unit string, width int) string {
	s := "n/a"
	if p != nil {
		s = strconv.FormatFloat(*p, 'f', 0, 64) + unit
	}
	return fmt.Sprintf("%-*s", width, s)
}

// memPair is used/total memory in the unit of total: "60.0/80.0G".
func memPair(used, total uint64) string {
	const gib = 1 << 30
	if total >= gib {
		return fmt.Sprintf("%.1f/%.0fG", float64(used)/gib, float64(total)/gib)
	}
	return fmt.Sprintf("%.0f/%.0fM", float64(used)/(1<<20), float64(total)/(1<<20))
}

const (
	barWidth   = 8
	sparkWidth = 10
)

// meter is a label, a bar of v out of full, the figure and a sparkline
// of the history out of top.
func meter(label string, v, full float64, figure string, hist []float64, top float64) string {
	return label + " " + barStyle.Render(bar(v, full, barWidth)) + " " + figure + " " + faintStyle.Render(sparkline(hist, top, sparkWidth))
}

// bar is a bar of width cells filled for v out of full.
func bar(v, full float64, width int) string {
	n := 0
	if full > 0 {
		n = int(math.Round(float64(width) * min(max(v/full, 0), 1)))
	}
	return strings.Repeat("█", n) + strings.Repeat("░", width-n)
}

var sparks = []rune("▁▂▃▄▅▆▇█")

// sparkline draws the last width values out of top, left-aligned so that
// the newest is nearest the figure's column when the history is short.
func sparkline(vals []float64, top float64, width int) string {
	if len(vals) > width {
		vals = vals[len(vals)-width:]
	}
	var b strings.Builder
	for _, v := range vals {
		i := 0
		if top > 0 {
			i = int(math.Round(float64(len(sparks)-1) * min(max(v/top, 0), 1)))
		}
		b.WriteRune(sparks[i])
	}
	b.WriteString(strings.Repeat(" ", width-len(vals)))
	return b.String()
}

// table is the heading and the rows that fit.
func (m Model) table() []string {
	var head []string
	for i, c := range columns {
		h := c.head
		if Column(i) == m.sort {
			if columns[m.sort].desc != m.reverse {
				h += "▼"
			} else {
				h += "▲"
			}
		}
		head = append(head, pad(h, c.width, c.right))
	}
	lines := []string{headStyle.Render(strings.Join(head, " "))}
	rows := m.rows
	if n := m.tableRows(); n > 0 && len(rows) > n {
		rows = rows[m.offset:min(m.offset+n, len(rows))]
	}
	if len(m.rows) == 0 {
		msg := "no rows"
		if m.user != "" {
			msg += " of user " + m.user
		}
		lines = append(lines, faintStyle.Render(msg))
	}
	for i := range rows {
		r := &rows[i]
		var cells []string
		for j, c := range columns {
			cells = append(cells, pad(r.cell(Column(j)), c.width, c.right))
		}
		line := strings.Join(cells, " ")
		switch {
		case r.key == m.selected:
			line = selectedStyle.Render(line)
		case len(r.waste) > 0:
			line = wasteStyle.Render(line)
		}
		lines = append(lines, line)
	}
	return lines
}

// pad cuts or pads s to width.
func pad(s string, width int, right bool) string {
	s = shorten(s, width)
	if n := width - ansi.StringWidth(s); n > 0 {
		if right {
			return strings.Repeat(" ", n) + s
		}
		return s + strings.Repeat(" ", n)
	}
	return s
}

// shorten cuts s to width cells, marking the cut.
func shorten(s string, width int) string {
	if ansi.StringWidth(s) <= width {
		return s
	}
	return ansi.Truncate(s, width, "…")
}

func (m Model) detailLines() []string {
	i := m.index()
	if i < 0 {
		return []string{"the row is gone"}
	}
	r := &m.rows[i]
	lines := []string{headStyle.Render(fmt.Sprintf("%s %s", m.group, r.name))}
	for j, c := range columns {
		lines = append(lines, fmt.Sprintf("  %-8s %s", strings.ToLower(c.head), r.cell(Column(j))))
	}
	for _, d := range r.detail {
		lines = append(lines, "  "+d)
	}
	if m.snap.Waste != nil {
		for _, f := range m.snap.Waste.Findings {
			if f.Active && m.findingOf(r, f.ContainerID, f.OwnerKind, f.Owner) {
				lines = append(lines, wasteStyle.Render(fmt.Sprintf("  waste: %s since %s, %.2f GPU-h wasted", f.Rule, f.Since.UTC().Format("15:04:05"), f.WastedGPUHours)))
			}
		}
	}
	if m.snap.Queue != nil {
		for _, j := range m.snap.Queue.Jobs {
			if slices.Contains(r.jobs, j.ID) {
				lines = append(lines, fmt.Sprintf("  job %s (%s) of %s: %s, %d GPUs", j.ID, dash(j.Name), j.User, j.State, j.GPUsRequested))
			}
		}
	}
	return lines
}

// findingOf says whether a finding is about row r.
func (m Model) findingOf(r *row, containerID, kind, owner string) bool {
	switch {
	case strings.HasPrefix(r.key, "c:"):
		return containerID != "" && r.key == "c:"+containerID
	case strings.HasPrefix(r.key, "h:"):
		return kind == "host" && r.key == "h:"+owner
	case strings.HasPrefix(r.key, "u:"):
		return owner != "" && r.user == owner
	}
	return len(r.waste) > 0 && r.user == owner && owner != ""
}

func (m Model) helpLine() string {
	if m.filtering {
		return "filter user: " + m.input + "▏  (enter applies, esc cancels, an empty filter shows everyone)"
	}
	h := help.New()
	if m.width > 0 {
		h.SetWidth(m.width)
	}
	return h.ShortHelpView([]key.Binding{keys.quit, keys.group, keys.sortNext, keys.reverse, keys.filter, keys.up, keys.detail, keys.back}) +
		faintStyle.Render("  · columns: name user gpu sm mem cpu time job waste")
}
