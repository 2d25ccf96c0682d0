package waste

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/report"
)

// Reader is the part of a ledger the rules read.
type Reader interface {
	Series(ctx context.Context, f ledger.Filter, step time.Duration) ([]ledger.UsagePoint, error)
	ContainerSeries(ctx context.Context, f ledger.Filter, step time.Duration) ([]ledger.ContainerUsage, error)
}

// MinuteSteps is the longest window evaluated on the ledger's minute rows;
// a longer one reads its hour rows, so that a month takes a second, not a
// minute. Rules then see hour steps: a condition must hold for whole hours.
const MinuteSteps = 48 * time.Hour

// Options say what to evaluate.
type Options struct {
	// From and To bound the window [From, To), in whole minutes.
	From, To time.Time
	Node     string // "" for all nodes
	Rules    Rules
	Cost     report.CostModel
}

// Evaluate applies the rules to the ledger's usage over a window. What
// happened before the window is not seen: a condition that held across
// From starts there, and wasted GPU-hours count inside the window only.
// Unaccounted GPU memory is not in the ledger, so only Live finds it.
func Evaluate(ctx context.Context, r Reader, opt Options) (*Report, error) {
	if err := opt.Rules.Validate(); err != nil {
		return nil, fmt.Errorf("waste rules: %w", err)
	}
	if !opt.From.Before(opt.To) {
		return nil, fmt.Errorf("waste window is empty: from %s is not before to %s", opt.From.UTC().Format(time.RFC3339), opt.To.UTC().Format(time.RFC3339))
	}
	stepLen := time.Minute
	if opt.To.Sub(opt.From) > MinuteSteps {
		stepLen = time.Hour
	}
	f := ledger.Filter{From: opt.From, To: opt.To, Node: opt.Node}
	points, err := r.Series(ctx, f, stepLen)
	if err != nil {
		return nil, fmt.Errorf("read usage series: %w", err)
	}
	cpu, err := r.ContainerSeries(ctx, f, stepLen)
	if err != nil {
		return nil, fmt.Errorf("read container series: %w", err)
	}
	return evaluate(points, cpu, stepLen, opt), nil
}

// ledgerSubject is a subject with its steps, in time order.
type ledgerSubject struct {
	subject
	from, to time.Time // when a container ran; zero when unknown
	steps    []step
}

type ctrKey struct{ node, id string }

type ownerKey struct {
	node, kind, id, gpu string
}

func evaluate(points []ledger.UsagePoint, cpu []ledger.ContainerUsage, stepLen time.Duration, opt Options) *Report {
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
			ls.steps = append(ls.steps, step{start: p.Start, end: p.Start.Add(stepLen)})
		}
		s := &ls.steps[len(ls.steps)-1]
		g := s.at(slot)
		g.alloc += p.AllocatedSeconds
		g.present += p.PresentSeconds
		g.used += p.UsedSeconds
		g.mem += p.MemoryByteSeconds
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
	for _, ls := range order {
		t := newTracker(&rules, &ls.subject)
		var prevEnd time.Time
		for i := range ls.steps {
			s := &ls.steps[i]
			ls.span(s, opt.To)
			if !prevEnd.IsZero() && s.start.Sub(prevEnd) > time.Second {
				// A gap: the owner was not there.
				t.absent()
			}
			t.add(s)
			prevEnd = s.end
		}
		if prevEnd.Before(opt.To.Add(-stepLen)) {
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
		s.name = shortID(p.OwnerID)
		if c := p.Container; c != nil {
			s.name, s.image, s.owner, s.team, s.project = c.Name, c.Image, c.User, c.Team, c.Project
			ls.from = c.StartedAt
			if ls.from.IsZero() {
				ls.from = c.FirstSeen
			}
			ls.to = c.FinishedAt
			s.started = ls.from
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
		if ls.from.After(s.start) && ls.from.Before(s.end) {
			s.start = ls.from
		}
		if !ls.to.IsZero() && ls.to.After(s.start) && ls.to.Before(s.end) {
			s.end = ls.to
		}
		s.seconds = s.end.Sub(s.start).Seconds()
		if stopped := !ls.to.IsZero() && !ls.to.After(s.start); s.seconds <= 0 || stopped {
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
