package web

import (
	"cmp"
	"errors"
	"net/http"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// anotherUser stands for a holder the reader may not see.
const anotherUser = "another user"

func (s *handler) overviewPage(r *http.Request, c *Visitor, f Frame) (any, error) {
	if r.URL.RawQuery != "" {
		return nil, badPage("the overview takes no parameters (it was given %q); the usage page takes a window: /usage?window=7d", r.URL.RawQuery)
	}
	v := &Overview{Frame: f}
	if t := s.cfg.Ticks.Latest(); t != nil {
		v.Sampled, v.Driver = t.Time, t.Sample.DriverVersion
		v.Tiles = s.tiles(t, c)
	}
	loc := f.Loc
	if loc == nil {
		loc = time.UTC
	}
	now := f.Now.In(loc)
	midnight := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, loc)
	v.Today = s.figures(r, c, midnight, f.Now)
	if s.cfg.Waste == nil {
		v.WasteNote = "the live waste rules are off (waste.enabled: false)"
	} else {
		for _, fd := range s.visibleFindings(c).Findings {
			v.WasteFindings++
			v.WastedHours += fd.WastedGPUHours
			v.WasteCost += fd.Cost
		}
	}
	if s.cfg.Jobs == nil {
		v.QueueNote = "the GPU job queue is off (queue.enabled: false)"
	} else {
		jf := ledger.JobFilter{States: []queue.State{queue.Queued, queue.Starting, queue.Running}}
		if c.OwnOnly {
			jf.User = c.ID.User
		}
		jobs, err := s.cfg.Jobs.Jobs(r.Context(), jf)
		if err != nil {
			s.cfg.Logger.Warn("console overview: list jobs", "err", err)
			v.QueueNote = "could not read the queue; the agent's log says why"
		}
		for _, j := range jobs {
			if j.State == queue.Queued {
				v.Queued++
			} else {
				v.Running++
			}
		}
	}
	return v, nil
}

// visibleFindings are the live waste findings the caller may see.
func (s *handler) visibleFindings(c *Visitor) *waste.Report {
	rep := s.cfg.Waste.Report()
	if c.OwnOnly {
		rep = rep.Only(func(f *waste.Finding) bool { return f.Owner != "" && c.Owns(f.Owner) })
	}
	return rep
}

// figures are the caller's use in [from, to) from the ledger: their own
// for a user, the node's for admins and viewers.
func (s *handler) figures(r *http.Request, c *Visitor, from, to time.Time) Figures {
	out := Figures{From: from, To: to}
	if s.cfg.Reports == nil {
		out.Note = "the ledger is off (ledger.enabled: false)"
		return out
	}
	req := report.Request{By: "node", From: &from, To: &to, Format: "json"}
	if c.OwnOnly {
		req.User = c.ID.User
	}
	if err := req.Validate(s.cfg.Now()); err != nil {
		out.Note = err.Error()
		return out
	}
	rep, err := s.cfg.Reports.Report(r.Context(), req)
	if err != nil {
		if !errors.Is(err, cost.ErrInvalidCost) {
			s.cfg.Logger.Warn("console: usage figures", "err", err)
		}
		out.Note = "could not read the ledger; the agent's log says why"
		return out
	}
	out.UsedHours, out.Cost, out.Currency = rep.Totals.GPUHoursUsed, rep.Totals.Cost, rep.Currency
	if rep.Totals.GPUHoursHeld != nil {
		out.HeldHours = *rep.Totals.GPUHoursHeld
	}
	out.EnergyKWh = rep.Totals.EnergyKWh
	if !c.OwnOnly {
		out.EnergyKWh += rep.Idle.EnergyKWh
		if !rep.Idle.Shared {
			out.Cost += rep.Idle.Cost
		}
	}
	return out
}

// tiles are the tick's GPUs as the caller may see them: every GPU's own
// figures, and its holders in the tick by name where they are the
// caller's.
func (s *handler) tiles(t *sampler.Tick, c *Visitor) []Tile {
	g := s.cfg.API.GPUs(t)
	names := map[string]string{}
	for i := range t.Containers {
		names[t.Containers[i].ID] = t.Containers[i].Name
	}
	out := make([]Tile, 0, len(g.GPUs))
	for _, d := range g.GPUs {
		tl := Tile{Index: d.Index, UUID: d.UUID, Model: d.Model, Error: d.Error,
			Util: d.UtilPercent, Power: d.PowerWatts, Temp: d.TemperatureC,
			MemUsed: d.MemoryUsedBytes, MemTotal: d.MemoryTotalBytes}
		seen := map[string]bool{}
		add := func(name string) {
			if !seen[name] {
				seen[name] = true
				tl.Holders = append(tl.Holders, name)
			}
		}
		for _, o := range d.Owners {
			// Owners are every row the meter keeps, with totals since the
			// agent started; the holders are those that hold the GPU or
			// have a process on it in this tick, as ps and the API say.
			if o.Share == 0 && o.Processes == 0 {
				continue
			}
			if !c.Owns(s.cfg.API.UserOf(t, o.OwnerKind, o.Owner)) {
				add(anotherUser)
				continue
			}
			switch o.OwnerKind {
			case container.OwnerContainer.String():
				add(cmp.Or(names[o.Owner], container.ShortID(o.Owner)))
			case container.OwnerHost.String():
				add(o.Owner + " (host)")
			default:
				add("unattributed")
			}
		}
		out = append(out, tl)
	}
	return out
}
