package waste

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Reader is the part of a ledger the rules read.
type Reader interface {
	Series(ctx context.Context, f ledger.Filter, step time.Duration) ([]ledger.UsagePoint, error)
	ContainerSeries(ctx context.Context, f ledger.Filter, step time.Duration) ([]ledger.ContainerUsage, error)
}

// MinuteSteps is the longest window evaluated on the ledger's minute rows
// only; a longer one reads its whole hours from hour rows, so that a month
// takes a second, not a minute. Rules then see hour steps there: a
// condition must hold for whole hours. The partial hours at the window's
// ends, and the last hour or so before its end (see tailStart), come from
// minute rows all the same: a finding never starts before the window does,
// and whether it holds at the end is judged minute by minute. (Where
// Retain has deleted the minute rows of a window's first partial hour, a
// window reaching back further than ledger.minute_retention, that part of
// an hour is not seen.)
const MinuteSteps = 48 * time.Hour

// Options say what to evaluate.
type Options struct {
	// From and To bound the window [From, To), in whole minutes.
	From, To time.Time
	Node     string // "" for all nodes
	Rules    config.WasteRules
	Cost     cost.Model
	// Flush is how often the agents commit their rows to the ledger
	// (ledger.flush_interval): a live agent's data may end that much
	// before now. It is part of the slack with which a node's data must
	// reach To for its findings to be active; see Evaluate.
	Flush time.Duration
}

// Evaluate applies the rules to the ledger's usage over a window. What
// happened before the window is not seen: a condition that held across
// From starts there, and wasted GPU-hours count inside the window only.
// Unaccounted GPU memory is not in the ledger, so only Live finds it.
//
// A finding is active when its condition held in its owner's last step
// and that step's row ends less than a minute plus opt.Flush before To:
// the owner's node was still writing when the window ended. The minute is
// the minute rows' step: windows end on whole minutes, so one ending now
// ends up to a minute after it; the flush interval is how long a live
// agent holds rows before it commits them. Less slack would call a live
// node stopped; more would keep a stopped node's findings active for
// longer. A node whose agent stopped is active for that slack after its
// last row ends, and never after.
func Evaluate(ctx context.Context, r Reader, opt Options) (*Report, error) {
	if err := opt.Rules.Validate(); err != nil {
		return nil, fmt.Errorf("waste rules: %w", err)
	}
	if !opt.From.Before(opt.To) {
		return nil, fmt.Errorf("waste window is empty: from %s is not before to %s", opt.From.UTC().Format(time.RFC3339), opt.To.UTC().Format(time.RFC3339))
	}
	l := planSteps(opt.From, opt.To, slack(opt.Flush))
	var points []ledger.UsagePoint
	var cpu []ledger.ContainerUsage
	for _, sg := range l.segments() {
		f := ledger.Filter{From: sg.from, To: sg.to, Node: opt.Node}
		p, err := r.Series(ctx, f, sg.step)
		if err != nil {
			return nil, fmt.Errorf("read usage series: %w", err)
		}
		c, err := r.ContainerSeries(ctx, f, sg.step)
		if err != nil {
			return nil, fmt.Errorf("read container series: %w", err)
		}
		// The segments follow each other in time, so the points stay in
		// the order evaluate wants.
		points, cpu = append(points, p...), append(cpu, c...)
	}
	return evaluate(points, cpu, l, opt), nil
}

// slack is how long before a window's end a node's last row may end for
// the node to count as live at the end: see Evaluate.
func slack(flush time.Duration) time.Duration { return time.Minute + max(flush, 0) }

// layout says which rows a window is read from: hour rows for the steps
// that start in [hourFrom, hourTo), minute rows for the others.
type layout struct {
	from, to         time.Time
	hourFrom, hourTo time.Time // equal when the window reads no hour rows
}

// byMinute reads [from, to) from minute rows only.
func byMinute(from, to time.Time) layout {
	from, to = ledger.Minute(from), ledger.Minute(to)
	return layout{from: from, to: to, hourFrom: to, hourTo: to}
}

// planSteps lays out the window [from, to): minute rows for a window of up
// to MinuteSteps; for a longer one, hour rows for its whole hours but for
// the partial hour at its start and the hours from tailStart on, which
// come from minute rows.
func planSteps(from, to time.Time, slack time.Duration) layout {
	l := byMinute(from, to)
	if l.to.Sub(l.from) <= MinuteSteps {
		return l
	}
	l.hourFrom = ledger.Hour(l.from.Add(time.Hour - time.Minute))
	l.hourTo = tailStart(l.to, slack)
	if l.hourTo.Before(l.hourFrom) {
		l.hourTo = l.hourFrom
	}
	return l
}

// tailStart is where a window ending at to reads minute rows again: the
// start of the hour that holds to - slack. Whether a node is still
// writing at the window's end is judged on the rows that end in the last
// slack; were one of them an hour row, a node that stopped at its start
// would read as live for an hour.
func tailStart(to time.Time, slack time.Duration) time.Time { return ledger.Hour(to.Add(-slack)) }

// segment is a part of a window read at one step.
type segment struct {
	from, to time.Time
	step     time.Duration
}

// segments are the reads of the layout, in time order.
func (l layout) segments() []segment {
	var out []segment
	for _, sg := range []segment{
		{l.from, l.hourFrom, time.Minute},
		{l.hourFrom, l.hourTo, time.Hour},
		{l.hourTo, l.to, time.Minute},
	} {
		if sg.from.Before(sg.to) {
			out = append(out, sg)
		}
	}
	return out
}

// step is the length of the row that starts at start.
func (l layout) step(start time.Time) time.Duration {
	if !start.Before(l.hourFrom) && start.Before(l.hourTo) {
		return time.Hour
	}
	return time.Minute
}

// ledgerSubject is a subject with its steps, in time order.
type ledgerSubject struct {
	subject
	// from and to bound what the ledger knows a container ran, each zero
	// when unknown: from its start, or from when an agent first saw it if
	// that was later, to its end, or to when an agent last saw it if that
	// was earlier (the agent stopped, or the container outlived it).
	from, to time.Time
	steps    []step
}

type ctrKey struct{ node, id string }

type ownerKey struct {
	node, kind, id, gpu string
}

func evaluate(points []ledger.UsagePoint, cpu []ledger.ContainerUsage, l layout, opt Options) *Report {
	rules := opt.Rules
	subjects := map[ownerKey]*ledgerSubject{}
	ctrs := map[ctrKey]*ledgerSubject{}
	var order []*ledgerSubject
	var last ownerKey
	var ls *ledgerSubject
	for i := range points {
		p := &points[i]
		key := ownerKey{p.Node, p.OwnerKind, p.OwnerID, ""}
		if p.OwnerKind != ledger.KindContainer {
			key.gpu = p.GPU.UUID
		}
		if ls == nil || key != last {
			ls = subjects[key]
			last = key
		}
		if ls == nil {
			ls = newLedgerSubject(p)
			subjects[key] = ls
			order = append(order, ls)
			if ls.kind == kindContainer {
				ctrs[ctrKey{p.Node, p.OwnerID}] = ls
			}
		}
		slot := ls.slot(GPURef{Index: p.GPU.Index, UUID: p.GPU.UUID, Model: p.GPU.Model}, opt.Cost.GPUHourCost(p.GPU.Model))
		if n := len(ls.steps); n == 0 || !ls.steps[n-1].start.Equal(p.Start) {
			ls.steps = append(ls.steps, step{start: p.Start, end: p.Start.Add(l.step(p.Start))})
		}
		s := &ls.steps[len(ls.steps)-1]
		g := s.at(slot)
		g.alloc += p.AllocatedSeconds
		g.present += p.PresentSeconds
		g.used += p.UsedSeconds
		g.mem += p.MemoryByteSeconds
		g.held += p.HeldSeconds
		g.heldUsed += p.UsedSeconds - p.Unheld.UsedSeconds
	}
	// CPU joins the container's steps, both in time order.
	cursor := map[*ledgerSubject]int{}
	for i := range cpu {
		c := &cpu[i]
		ls := ctrs[ctrKey{c.Node, c.ContainerID}]
		if ls == nil {
			continue
		}
		j := cursor[ls]
		for j < len(ls.steps) && ls.steps[j].start.Before(c.Start) {
			j++
		}
		cursor[ls] = j
		if j < len(ls.steps) && ls.steps[j].start.Equal(c.Start) {
			ls.steps[j].cpu += c.CPUSeconds
		}
	}

	var fs []Finding
	live := opt.To.Add(-slack(opt.Flush))
	for _, ls := range order {
		t := newTracker(&rules, &ls.subject)
		var prevEnd, rowEnd time.Time
		for i := range ls.steps {
			s := &ls.steps[i]
			rowEnd = s.end // the end of its row, before span narrows it
			ls.span(s, opt.To)
			if !prevEnd.IsZero() && s.start.Sub(prevEnd) > time.Second {
				// A gap: the owner was not there.
				t.absent()
			}
			t.add(s)
			prevEnd = s.end
		}
		if !rowEnd.After(live) {
			// The owner's rows, and so its node's, stop before the
			// window's end: what held in its last step does not hold
			// at the end.
			t.absent()
		}
		for _, f := range t.findings {
			fs = append(fs, ls.export(f))
		}
	}
	return newReport(opt.From, opt.To, opt.Cost.Currency, fs)
}

func newLedgerSubject(p *ledger.UsagePoint) *ledgerSubject {
	ls := &ledgerSubject{}
	s := &ls.subject
	s.node = p.Node
	switch p.OwnerKind {
	case ledger.KindContainer:
		s.kind, s.ownerKind, s.id = kindContainer, OwnerContainer, p.OwnerID
		s.name = container.ShortID(p.OwnerID)
		if c := p.Container; c != nil {
			s.name, s.image, s.owner, s.team, s.project = c.Name, c.Image, c.User, c.Team, c.Project
			s.started = c.StartedAt
			if s.started.IsZero() {
				s.started = c.FirstSeen
			}
			ls.from = s.started
			if c.FirstSeen.After(ls.from) {
				// Started before any agent saw it: nothing was metered
				// before.
				ls.from = c.FirstSeen
			}
			ls.to = c.FinishedAt
			// Stores keep times to the second: the last sighting may
			// lie up to a second after LastSeen.
			if seen := c.LastSeen.Add(time.Second); !c.LastSeen.IsZero() && (ls.to.IsZero() || seen.Before(ls.to)) {
				// No agent saw it after: nothing was metered after,
				// and the step of a stopped agent is not a full one.
				ls.to = seen
			}
		}
	case ledger.KindHost:
		s.kind, s.ownerKind, s.id, s.owner = kindHost, OwnerHost, p.OwnerID, p.OwnerID
	default:
		s.kind, s.ownerKind = kindHost, OwnerNone
	}
	return ls
}

// span sets the part of a step the subject ran in and for how long.
func (ls *ledgerSubject) span(s *step, to time.Time) {
	if s.end.After(to) {
		s.end = to
	}
	switch ls.kind {
	case kindContainer:
		start, end := s.start, s.end
		if ls.from.After(start) {
			start = ls.from
		}
		if !ls.to.IsZero() && ls.to.Before(end) {
			end = ls.to
		}
		if end.After(start) {
			s.start, s.end = start, end
			s.seconds = end.Sub(start).Seconds()
		} else {
			// What the ledger knows of the container does not cover
			// the step: the time it booked on its GPUs does.
			s.seconds = 0
			for _, g := range s.gpu {
				s.seconds = max(s.seconds, g.alloc, g.present)
			}
		}
	default:
		if len(s.gpu) > 0 {
			s.seconds = s.gpu[0].present
		}
	}
}
