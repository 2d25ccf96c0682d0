package top

import (
	"fmt"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
)

// poll is what both views keep of their one call to the agent per
// redraw: whether a call is under way, the last failure and how many
// came in a row, and the error that ended the view. It is a value inside
// a model: Update changes a copy.
type poll struct {
	interval time.Duration
	fetching bool
	err      error
	failures int
	fatal    error
}

// refreshMsg says that the interval has passed: time for the next call.
type refreshMsg struct{}

// refresh starts call unless one is under way: one call at a time.
func (p *poll) refresh(call tea.Cmd) tea.Cmd {
	if p.fetching {
		return nil
	}
	p.fetching = true
	return call
}

// answered takes a call's error and says whether its answer is to be
// kept, with the command that comes next: the next call after the
// interval, or the end of the view for a Fatal error.
func (p *poll) answered(err error) (bool, tea.Cmd) {
	p.fetching = false
	switch {
	case err != nil && isFatal(err):
		p.fatal = err
		return false, tea.Quit
	case err != nil:
		p.err = err
		p.failures++
		return false, p.next()
	}
	p.err, p.failures = nil, 0
	return true, p.next()
}

func (p *poll) next() tea.Cmd {
	return tea.Tick(p.interval, func(time.Time) tea.Msg { return refreshMsg{} })
}

// failure is the status line of a failing agent, saying what the view
// still shows ("the snapshot of 15:04:05"); "" when the last call
// answered.
func (p *poll) failure(showing string) string {
	if p.err == nil {
		return ""
	}
	// What to expect comes first: the agent's error may be long, and
	// the line is cut at the terminal's width.
	msg := fmt.Sprintf("agent not answering (%d failed, retrying every %s", p.failures, p.interval)
	if showing != "" {
		msg += ", showing " + showing
	}
	return errorStyle.Render(msg + fmt.Sprintf("): %v", p.err))
}

// scrolled is the first of total rows to show in n lines so that row i
// is in view, from offset; 0 when n is (the height is not known).
func scrolled(offset, i, n, total int) int {
	if n == 0 {
		return 0
	}
	i = max(i, 0)
	if i < offset {
		offset = i
	}
	if i >= offset+n {
		offset = i - n + 1
	}
	return max(0, min(offset, total-n))
}

// fitLines joins lines, each cut to width cells (0: as long as it is).
func fitLines(lines []string, width int) string {
	if width > 0 {
		for i, l := range lines {
			lines[i] = ansi.Truncate(l, width, "")
		}
	}
	return strings.Join(lines, "\n")
}

// altView is a frame drawn in the alternate screen.
func altView(frame, title string) tea.View {
	v := tea.NewView(frame)
	v.AltScreen = true
	v.WindowTitle = title
	return v
}
