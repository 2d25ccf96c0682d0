package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

// WhatIf replays and advises from the ledger's history
// (*whatif.Service).
type WhatIf interface {
	WhatIf(ctx context.Context, q whatif.Query) (*whatif.Result, error)
	Advice(ctx context.Context, q whatif.Query) (*whatif.AdviceReport, error)
	GPUUse(ctx context.Context, from, to time.Time) (map[string]whatif.GPUUse, error)
}

func (s *server) whatifRoutes() []route {
	return []route{
		{method: "GET", pattern: "/api/v1/whatif", act: auth.ActUsageRead, h: s.whatif},
		{method: "GET", pattern: "/api/v1/advice", act: auth.ActUsageRead, h: s.advice},
	}
}

// whatif answers the replay of a window. It names no one, so every
// caller who may read usage may read it.
func (s *server) whatif(w http.ResponseWriter, r *http.Request, _ *call) {
	if s.cfg.WhatIf == nil {
		writeError(w, http.StatusServiceUnavailable, apitype.CodeLedgerOff, "the ledger is off (ledger.enabled: false), so there is no history to replay")
		return
	}
	raw, err := apitype.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
		return
	}
	q, err := whatif.ParseWhatifQuery(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
		return
	}
	res, err := s.cfg.WhatIf.WhatIf(r.Context(), q)
	if err != nil {
		s.historyError(w, r, err)
		return
	}
	writeIndented(w, WhatIfFromResult(res))
}

// advice answers the advice over a window: a user's own only.
func (s *server) advice(w http.ResponseWriter, r *http.Request, c *call) {
	if s.cfg.WhatIf == nil {
		writeError(w, http.StatusServiceUnavailable, apitype.CodeLedgerOff, "the ledger is off (ledger.enabled: false), so there is no history to advise from")
		return
	}
	raw, err := apitype.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
		return
	}
	q, err := whatif.ParseAdviceQuery(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
		return
	}
	if c.ownOnly {
		if q.User != "" && q.User != c.id.User {
			s.forbid(w, r, c, "advice user="+q.User, auth.AuthorizeOwner(c.id, c.act, q.User))
			return
		}
		q.User = c.id.User
	}
	rep, err := s.cfg.WhatIf.Advice(r.Context(), q)
	if err != nil {
		s.historyError(w, r, err)
		return
	}
	writeIndented(w, AdviceFromReport(rep))
}

// historyError answers a failed replay or advice: the query's fault, or
// the ledger's, which the log says more of.
func (s *server) historyError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, whatif.ErrQuery) {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
		return
	}
	s.cfg.Logger.Warn("what-if", "path", r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, "ledger_error", "could not read the ledger; the agent's log says why")
}

// writeIndented writes v as `gpumeter whatif` and `advise` print it.
func writeIndented(w http.ResponseWriter, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		writeError(w, http.StatusInternalServerError, "render_error", "could not render the answer")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

// WhatIfFromResult is the replay on the wire.
func WhatIfFromResult(r *whatif.Result) apitype.WhatIf {
	out := apitype.WhatIf{
		Window: apitype.WhatIfWindow(r.Window),
		Model: apitype.WhatIfModel{Kind: r.Model.Kind, Share: r.Model.Share, MemoryFraction: r.Model.MemoryFraction,
			SwitchOverhead: r.Model.SwitchOverhead, Placement: r.Model.Placement, Holders: r.Model.Holders, QueueJobs: r.Model.QueueJobs,
			Assumptions: r.Model.Assumptions, Notes: r.Model.Notes},
		Measured: apitype.WhatIfMeasured{GPUs: r.Measured.GPUs, UtilMean: r.Measured.UtilMean, GPUHoursHeld: r.Measured.GPUHoursHeld,
			Wait: apitype.WaitSpread(r.Measured.Wait), MakespanS: r.Measured.MakespanS},
		Modes: mapSlice(r.Modes, func(m whatif.ModeResult) apitype.WhatIfMode {
			return apitype.WhatIfMode{Mode: string(m.Mode), GPUs: m.GPUs, UtilMean: m.UtilMean, GPUHoursHeld: m.GPUHoursHeld,
				Wait: apitype.WaitSpread(m.Wait), MakespanS: m.MakespanS, Stretch: apitype.Stretch(m.Stretch), JobsSlowed: m.JobsSlowed,
				GPUsForP95Wait: m.GPUsForP95Wait, Cost: apitype.Money(m.Cost), OverTimeLimit: m.OverTimeLimit, Unplaced: m.Unplaced,
				UtilStepS: m.UtilStepS, UtilSeries: m.UtilSeries}
		}),
	}
	return out
}

// AdviceFromReport is the advice on the wire.
func AdviceFromReport(r *whatif.AdviceReport) apitype.AdviceList {
	advice := mapSlice(r.Advice, func(a whatif.Advice) apitype.Advice {
		return apitype.Advice{User: a.User, Team: a.Team, Group: a.Group, Kind: string(a.Kind), Flag: a.Flag, Evidence: a.Evidence,
			SavedGPUHours: a.SavedGPUHours, SavedCost: apitype.Money(a.SavedCost), Holders: a.Holders}
	})
	if advice == nil {
		advice = []apitype.Advice{}
	}
	return apitype.AdviceList{Window: apitype.WhatIfWindow(r.Window), Advice: advice, Notes: r.Notes}
}
