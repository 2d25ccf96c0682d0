package sqlledger

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Bounds of an open window, whole hours far from int64 overflow.
const (
	minUnix = -(1 << 62) / 3600 * 3600
	maxUnix = (1 << 62) / 3600 * 3600
)

// NoHorizon is the minute horizon of a ledger whose minute rows were never
// deleted.
const NoHorizon = minUnix

// Range is [From, To) in unix seconds.
type Range struct{ From, To int64 }

// Empty reports whether r holds no second.
func (r Range) Empty() bool { return r.From >= r.To }

// Plan says which rows answer a window: day rows over Days, hour rows
// over the rest of Hours (HourParts), minute rows over each of Minutes.
// Window is what they cover together, which is wider than asked where
// hour rows stand in for deleted minute rows.
type Plan struct {
	Window  Range
	Hours   Range // every whole hour of the window, Days included
	Days    Range // the whole days of Hours that day rows answer
	Minutes []Range
}

// HourParts are the parts of Hours outside Days, which hour rows answer.
func (p Plan) HourParts() []Range {
	if p.Days.Empty() {
		if p.Hours.Empty() {
			return nil
		}
		return []Range{p.Hours}
	}
	var out []Range
	if p.Hours.From < p.Days.From {
		out = append(out, Range{p.Hours.From, p.Days.From})
	}
	if p.Days.To < p.Hours.To {
		out = append(out, Range{p.Days.To, p.Hours.To})
	}
	return out
}

// NoDays is the day horizon under which PlanWindow plans no day rows.
const NoDays = maxUnix

// Empty reports whether the plan reads nothing.
func (p Plan) Empty() bool { return p.Window.Empty() }

// PlanWindow plans a query over f's window. horizon is where the minute
// rows start: Retain has deleted those before it (NoHorizon when it never
// ran). days is where the day rows answer from (NoHorizon for all of
// them, NoDays for none): whole days inside the window from then on come
// from day rows, the other whole hours from hour rows, the partial hours
// at its edges from minute rows; an edge hour before the horizon has no
// minute rows left, so its hour row stands in whole.
func PlanWindow(f ledger.Filter, horizon, days int64) Plan {
	p := planHours(f, horizon)
	if p.Hours.Empty() {
		return p
	}
	dFrom, dTo := floor(max(p.Hours.From, days)+86399, 86400), floor(p.Hours.To, 86400)
	if dFrom < dTo {
		p.Days = Range{dFrom, dTo}
	}
	return p
}

// planHours is PlanWindow without day rows.
func planHours(f ledger.Filter, horizon int64) Plan {
	from, to := minuteWindow(f)
	if from >= to {
		return Plan{}
	}
	if h := floor(from, 3600); h != from && h < horizon {
		from = h
	}
	if h := floor(to, 3600); h != to && h < horizon {
		to = h + 3600
	}
	p := Plan{Window: Range{from, to}}
	hFrom, hTo := floor(from+3599, 3600), floor(to, 3600)
	if hFrom >= hTo {
		p.Minutes = []Range{{from, to}}
		return p
	}
	p.Hours = Range{hFrom, hTo}
	if from < hFrom {
		p.Minutes = append(p.Minutes, Range{from, hFrom})
	}
	if hTo < to {
		p.Minutes = append(p.Minutes, Range{hTo, to})
	}
	return p
}

// PlanSeries plans a series over f's window at step: minute rows over the
// window, or hour rows over every hour it touches. Steps other than
// time.Minute and time.Hour are an error.
func PlanSeries(f ledger.Filter, step time.Duration) (Plan, error) {
	if step != time.Minute && step != time.Hour {
		return Plan{}, fmt.Errorf("series step %v: want %v or %v", step, time.Minute, time.Hour)
	}
	from, to := minuteWindow(f)
	if from >= to {
		return Plan{}, nil
	}
	if step == time.Minute {
		r := Range{from, to}
		return Plan{Window: r, Minutes: []Range{r}}, nil
	}
	r := Range{floor(from, 3600), floor(to+3599, 3600)}
	return Plan{Window: r, Hours: r}, nil
}

// minuteWindow is f's window in unix seconds, truncated to the minute and
// kept within the bounds of an open window.
func minuteWindow(f ledger.Filter) (from, to int64) {
	from, to = minUnix, maxUnix
	if !f.From.IsZero() {
		from = min(max(floor(f.From.Unix(), 60), minUnix), maxUnix)
	}
	if !f.To.IsZero() {
		to = min(max(floor(f.To.Unix(), 60), minUnix), maxUnix)
	}
	return from, to
}

// RetainCutoffs returns the starts before which Retain deletes minute and
// hour rows; ok is false for a table whose rows are kept forever.
func RetainCutoffs(now time.Time, minutes, hours time.Duration) (minuteCut int64, minuteOK bool, hourCut int64, hourOK bool) {
	if minutes > 0 {
		minuteCut, minuteOK = floor(now.Add(-minutes).Unix(), 3600), true
	}
	if hours > 0 {
		hourCut, hourOK = floor(now.Add(-hours).Unix(), 3600), true
	}
	return minuteCut, minuteOK, hourCut, hourOK
}

// RetainDayHorizon is the day horizon (MetaDays) once Retain has deleted
// the hour rows before hourCut: the first whole day after it.
func RetainDayHorizon(hourCut int64) int64 { return floor(hourCut+86399, 86400) }

// Statement is one SQL statement with its arguments.
type Statement struct {
	SQL  string
	Args []any
}

// RetainDeletes are the statements of Retain for the cut-offs of
// RetainCutoffs. With a node they delete only that node's rows (its GPUs'
// usage, its owners' CPU and RAM, its audit events), so that each agent of
// a shared ledger keeps to its own; node "" deletes every node's. Audit
// events go with the hour rows.
func RetainDeletes(node string, minuteCut int64, minuteOK bool, hourCut int64, hourOK bool) []Statement {
	var out []Statement
	del := func(table, cond string, cut int64) {
		switch {
		case node == "":
			out = append(out, Statement{"DELETE FROM " + table + " WHERE " + cond, []any{cut}})
		case table == "audit_events":
			out = append(out, Statement{"DELETE FROM " + table + " WHERE " + cond + " AND node = $2", []any{cut, node}})
		case strings.HasSuffix(table, "_chunk"):
			out = append(out, Statement{"DELETE FROM " + table + " WHERE " + cond +
				" AND node_id IN (SELECT id FROM nodes WHERE name = $2)", []any{cut, node}})
		case strings.HasPrefix(table, "container_"):
			out = append(out, Statement{"DELETE FROM " + table + " WHERE " + cond +
				" AND owner_id IN (SELECT o.id FROM owners o JOIN nodes n ON n.id = o.node_id WHERE n.name = $2)", []any{cut, node}})
		default:
			out = append(out, Statement{"DELETE FROM " + table + " WHERE " + cond +
				" AND gpu_id IN (SELECT g.id FROM gpus g JOIN nodes n ON n.id = g.node_id WHERE n.name = $2)", []any{cut, node}})
		}
	}
	for _, t := range []string{"usage", "gpu", "container"} {
		if minuteOK {
			del(t+"_minute", "start < $1", minuteCut)
			del(t+"_chunk", "start < $1", minuteCut)
		}
		if hourOK {
			del(t+"_hour", "start < $1", hourCut)
			// Day rows go with the first hour row of their day, and the
			// day horizon (RetainDayHorizon) leaves the day that straddles
			// the cut to the hour rows it keeps.
			del(t+"_day", "start < $1", RetainDayHorizon(hourCut))
		}
	}
	if hourOK {
		del("audit_events", "at_us < $1", hourCut*1e6)
	}
	return out
}
