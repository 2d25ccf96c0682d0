package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/web"
)

// mountConsole puts the console on s's mux: its pages are let in, and
// read, through the API's own checks.
func (s *server) mountConsole() {
	cfg := s.cfg
	err := web.Mount(s.mux, web.Config{
		API: consoleAPI{s}, Ticks: cfg.Ticks, Reports: cfg.Reports, Waste: cfg.Waste, Jobs: cfg.Jobs,
		Audit: cfg.Audit, Usage: cfg.Usage, WhatIf: cfg.WhatIf, Stops: cfg.Stopper != nil, MaxAuditEvents: cfg.Limits.MaxAuditEvents,
		Nodes: cfg.Nodes, Node: cfg.Node, Now: cfg.Now, Logger: cfg.Logger,
	})
	if err != nil {
		// The console's templates are in the binary, and a test renders
		// every page: a parse error cannot reach a running agent.
		panic(err)
	}
}

// consoleAPI is web.API over the server.
type consoleAPI struct{ s *server }

var _ web.API = consoleAPI{}

func (a consoleAPI) Admit(r *http.Request) web.Admission {
	s := a.s
	src := source(r)
	id, ses, authErr := s.authenticate(r)
	ok, wait, _ := s.cfg.Limiter().Allow(limitKey(id, authErr, src), s.cfg.Now())
	return web.Admission{ID: id, Session: ses, AuthErr: authErr, Source: src, Limited: !ok, Wait: wait, Who: describe(id, authErr, src)}
}

// visitorCall is the call a console page stands for.
func visitorCall(v *web.Visitor) *call {
	return &call{id: v.ID, ownOnly: v.OwnOnly, source: v.Source, act: v.Act, session: v.Session}
}

func (a consoleAPI) Observe(r *http.Request, v *web.Visitor, target string, status int, detail string) {
	a.s.observe(r, visitorCall(v), target, status, detail)
}

func (a consoleAPI) ClearSession(w http.ResponseWriter, r *http.Request) { clearSessionCookie(w, r) }

func (a consoleAPI) UsageReport(ctx context.Context, v *web.Visitor, req *report.Request) (*report.Report, *web.UsageFault) {
	rep, fault := a.s.usageReport(ctx, visitorCall(v), req)
	if fault != nil {
		return nil, &web.UsageFault{Status: fault.status, Msg: fault.msg, Denied: fault.denied}
	}
	return rep, nil
}

func (a consoleAPI) Job(j queue.Job) apitype.Job { return a.s.jobJSON(j) }

func (a consoleAPI) GPUs(t *sampler.Tick) apitype.GPUsResponse { return GPUsFromTick(t) }

func (a consoleAPI) UserOf(t *sampler.Tick, ownerKind, owner string) string {
	return ownerUser(t, container.Owner{Kind: kindOf(ownerKind), ID: owner})
}

func (a consoleAPI) HistoryWindows() []web.HistoryWindow {
	out := make([]web.HistoryWindow, len(historyWindows))
	for i, h := range historyWindows {
		out[i] = web.HistoryWindow{Name: h.name, Span: h.span, Step: h.step, StepName: stepName(h.step), Recent: h.recent}
	}
	return out
}

func (a consoleAPI) History(ctx context.Context, w web.HistoryWindow, from, to time.Time) ([]apitype.GPUHistory, error) {
	h := a.s.cfg.History
	switch {
	case h == nil:
		return nil, web.ErrNoHistory
	case w.Recent:
		return HistoryFromLedger(h.Recent(from, to, w.Step)), nil
	}
	hs, err := h.Stored(ctx, from, to, w.Step)
	if errors.Is(err, ErrNoLedger) {
		return nil, web.ErrNoLedger
	}
	return HistoryFromLedger(hs), err
}
