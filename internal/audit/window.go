package audit

import (
	"net"
	"net/netip"
	"time"
	"unicode/utf8"
)

// sumKey is what tells the sums of a window apart: everything of a call
// but its time, port and target.
type sumKey struct {
	source, caller, role, action, outcome, reason string
	status                                        int
}

// sum is the calls of one key in a window.
type sum struct {
	key  sumKey
	ev   Event // the first call, clipped
	kind int
	// count is the calls not written as events of their own: all of them,
	// or all but the first.
	count int64
	first bool // the first call was written as it came
	mixed bool // the calls had more than one target
}

func (s *sum) add(target string) {
	s.count++
	if !s.mixed && target != s.ev.Target {
		s.mixed = true
	}
}

// window is the observations of one window, summed.
type window struct {
	start   time.Time
	sums    map[sumKey]*sum
	order   []*sum              // as they came, for the order they are written in
	sources map[string]struct{} // the source addresses told apart
	reasons map[string]int      // sums per source address
	// exact, coarse and rest count the sums by source address, by /24 or
	// /64, and beyond both caps.
	exact, coarse, rest int
}

func newWindow(start time.Time) *window {
	return &window{start: start, sums: map[sumKey]*sum{}, sources: map[string]struct{}{}, reasons: map[string]int{}}
}

func (w *window) put(k sumKey, e Event, kind int) *sum {
	s := &sum{key: k, ev: e, kind: kind}
	w.sums[k] = s
	w.order = append(w.order, s)
	return s
}

// events appends to out one event for each sum with calls not written on
// their own: stamped with the start of the window, from the address or
// prefix summed, with the count.
func (w *window) events(out []Event) []Event {
	for _, s := range w.order {
		if s.count == 0 {
			continue
		}
		e := s.ev
		e.Time, e.Source, e.Count = w.start, s.key.source, s.count
		if s.mixed {
			e.Target = ""
		}
		if s.key.source == "*" {
			e.Caller, e.Role, e.Action, e.Target = "", "", "", ""
			e.Error = "beyond the audit log's caps for one window, summed by status"
		}
		out = append(out, e)
	}
	return out
}

// hostOf is the address of a source without its port: "192.0.2.7" of
// "192.0.2.7:51234"; a source that is not host:port ("unix uid 0") is
// its own.
func hostOf(source string) string {
	if h, _, err := net.SplitHostPort(source); err == nil {
		return h
	}
	return source
}

// prefixOf is the /24 of an IPv4 address or the /64 of an IPv6 one; what
// is not an IP address is its own.
func prefixOf(host string) string {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap().WithZone("")
	bits := 64
	if a.Is4() {
		bits = 24
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return host
	}
	return p.String()
}

// Caps on what one field of an observed event takes in a JSON line, so
// that a line, whatever a client sends, takes at most maxLine0 bytes.
const (
	capShort  = 16 // kind, role, outcome
	capMedium = 32 // rule, finding id, container, owner, action
	capLong   = 64 // container id, source, node
	capText   = 128
	// maxLine0 bounds the JSON line of a clipped event, its newline
	// included; TestObservedLineBound checks it.
	maxLine0 = 1100
)

// clipEvent is e with every string cut to its cap and without evidence:
// an observation holds nothing a client can make long.
func clipEvent(e Event) Event {
	e.Kind, e.Role, e.Outcome = clip(e.Kind, capShort), clip(e.Role, capShort), clip(e.Outcome, capShort)
	e.Rule, e.FindingID, e.Container = clip(e.Rule, capMedium), clip(e.FindingID, capMedium), clip(e.Container, capMedium)
	e.Owner, e.Action = clip(e.Owner, capMedium), clip(e.Action, capMedium)
	e.ContainerID, e.Source, e.Node = clip(e.ContainerID, capLong), clip(e.Source, capLong), clip(e.Node, capLong)
	e.Caller, e.Target, e.Error = clip(e.Caller, capText), clip(e.Target, capText), clip(e.Error, capText)
	e.Evidence = nil
	return e
}

// clip cuts s, ending it with "…", so that it takes at most n bytes in
// JSON, where encoding/json writes <, >, &, control characters and
// invalid UTF-8 as six-byte escapes.
func clip(s string, n int) string {
	if len(s)*6 <= n {
		return s
	}
	w, cut := 0, -1
	for i, r := range s {
		c := jsonWidth(r)
		if cut < 0 && w+c > n-len("…") {
			cut = i
		}
		if w += c; w > n {
			return s[:cut] + "…"
		}
	}
	return s
}

func jsonWidth(r rune) int {
	switch {
	case r == utf8.RuneError, r < 0x20, r == '<', r == '>', r == '&', r == '\u2028', r == '\u2029':
		return 6
	case r == '"', r == '\\':
		return 2
	}
	return utf8.RuneLen(r)
}
