package sim

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Error is one problem in a scenario: where it is and what is wrong.
// It reads "file:line: key: message", leaving out what is unknown.
type Error struct {
	File string
	Line int    // 1-based; 0 when unknown
	Key  string // path of the key, such as containers[1].gpus; empty for the file as a whole
	Msg  string
}

// Error renders e as file:line: key: message.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":")
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a scenario, in file order, one per line.
type Errors []*Error

// maxErrors is how many problems one report lists; past that they are
// mostly echoes of the first.
const maxErrors = 10

// Error renders each problem on a line of its own.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find each *Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// finish sorts the list by line, drops repeats (a gpus entry with count 4
// makes each of its problems four times) and trims it to maxErrors.
func (es Errors) finish() Errors {
	sort.SliceStable(es, func(i, j int) bool { return es[i].Line < es[j].Line })
	out := es[:0]
	seen := make(map[Error]bool, len(es))
	for _, e := range es {
		if seen[*e] {
			continue
		}
		seen[*e] = true
		out = append(out, e)
	}
	if len(out) > maxErrors {
		more := len(out) - maxErrors
		last := out[maxErrors-1]
		out = append(out[:maxErrors:maxErrors], &Error{File: last.File, Line: last.Line, Msg: fmt.Sprintf("and %d more problems", more)})
	}
	return out
}

// positions remembers where each key of a parsed file was, so that checks
// run on the Scenario can still name a line.
type positions struct {
	lines map[string]int // key path -> line
	// gpuPath is, per GPU index, the path of the gpus entry that made it.
	gpuPath []string
}

// line returns the line of path, or of its closest parent that has one.
func (p *positions) line(path string) int {
	if p == nil {
		return 0
	}
	for {
		if l, ok := p.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return p.lines[""]
		}
		path = path[:i]
	}
}

func (p *positions) gpu(i int) string {
	if p != nil && i < len(p.gpuPath) {
		return p.gpuPath[i]
	}
	return fmt.Sprintf("gpus[%d]", i)
}
