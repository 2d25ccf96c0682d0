package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/queue/fairshare"
)

// FairShare is the queue's fair share: the factors of every user and team,
// from a cache refreshed in the background, so FairShare must not compute
// them on the call. LiftBudget lets a team over its budget start jobs for
// the rest of the calendar month, writing ev in the same transaction; an
// unknown team or one without a budget is a *fairshare.NoBudgetError,
// which the API answers with 400 on the field team.
type FairShare interface {
	FairShare(ctx context.Context) (fairshare.Report, error)
	LiftBudget(ctx context.Context, team string, ev audit.Event) error
}

func (s *server) fairShareRoutes() []route {
	return []route{
		{method: "GET", pattern: "/api/v1/fairshare", act: auth.ActFairShareRead, h: s.fairShare},
		{method: "POST", pattern: "/api/v1/fairshare/budgets/{team}/lift", act: auth.ActBudgetLift, mutating: true, h: s.liftBudget},
	}
}

// fairShareOff answers a call on an agent that computes no fair share.
func (s *server) fairShareOff(w http.ResponseWriter, r *http.Request, c *call, mutating bool) bool {
	if s.cfg.FairShare != nil {
		return false
	}
	if mutating {
		s.observe(r, c, "", http.StatusServiceUnavailable, "fair share off")
	}
	writeError(w, http.StatusServiceUnavailable, apitype.CodeFairShareOff, "this agent computes no fair share: it needs the GPU job queue (queue.enabled: true) and the ledger")
	return true
}

func (s *server) fairShare(w http.ResponseWriter, r *http.Request, c *call) {
	if s.fairShareOff(w, r, c, false) {
		return
	}
	if r.URL.RawQuery != "" {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, r.URL.Path+" takes no parameters")
		return
	}
	rep, err := s.cfg.FairShare.FairShare(r.Context())
	if err != nil {
		s.cfg.Logger.Error("fair share", "caller", c.id.Caller(), "err", err)
		writeError(w, http.StatusInternalServerError, apitype.CodeInternal, "the fair share could not be read; the agent's log says why")
		return
	}
	fs := FairShareFromReport(rep)
	if c.ownOnly {
		fs = ownRows(fs, c.id.User)
	}
	writeJSON(w, fs)
}

// namedAction checks what an action on a thing the path names (a team's
// budget, a node) brings: no parameters, no body but {}, and a name of 1
// to 255 bytes, which field names. It observes and answers a refusal,
// and returns false.
func (s *server) namedAction(w http.ResponseWriter, r *http.Request, c *call, target, field, name string) bool {
	if r.URL.RawQuery != "" {
		msg := r.URL.Path + " takes no parameters"
		s.observe(r, c, target, http.StatusBadRequest, msg)
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, msg)
		return false
	}
	var none struct{}
	if status, err := decodeJSON(w, r, &none); err != nil {
		s.observe(r, c, target, status, err.Error())
		return false
	}
	if name == "" || len(name) > 255 {
		msg := field + ": " + strconv.Quote(name) + " is not a " + field + " name"
		s.observe(r, c, target, http.StatusBadRequest, msg)
		writeErrorBody(w, http.StatusBadRequest, apitype.Error{Code: apitype.CodeBadRequest, Message: msg, Field: field})
		return false
	}
	return true
}

// ownRows narrows fs to what user may see: their own row, their team's
// (as their row names it) and the totals.
func ownRows(fs apitype.FairShare, user string) apitype.FairShare {
	out := fs
	out.Users, out.Teams = []apitype.FairShareRow{}, []apitype.FairShareRow{}
	team, found := "", false
	for _, row := range fs.Users {
		if row.Name == user {
			out.Users = append(out.Users, row)
			team, found = row.Team, true
		}
	}
	for _, row := range fs.Teams {
		if found && team != "" && row.Name == team {
			out.Teams = append(out.Teams, row)
		}
	}
	return out
}

func (s *server) liftBudget(w http.ResponseWriter, r *http.Request, c *call) {
	team := r.PathValue("team")
	target := "budget " + team
	if s.fairShareOff(w, r, c, true) {
		return
	}
	if !s.namedAction(w, r, c, target, "team", team) {
		return
	}
	ev := s.event(r, c, target, http.StatusOK, "")
	// What is asked is done even if the caller hangs up.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), actTimeout)
	defer cancel()
	if err := s.cfg.FairShare.LiftBudget(ctx, team, ev); err != nil {
		var nb *fairshare.NoBudgetError
		if errors.As(err, &nb) {
			msg := "team: " + nb.Error()
			s.observe(r, c, target, http.StatusBadRequest, msg)
			writeErrorBody(w, http.StatusBadRequest, apitype.Error{Code: apitype.CodeBadRequest, Message: msg, Field: "team"})
			return
		}
		s.observe(r, c, target, http.StatusInternalServerError, err.Error())
		s.cfg.Logger.Error("lift a budget", "team", team, "caller", c.id.Caller(), "err", err)
		writeError(w, http.StatusInternalServerError, apitype.CodeInternal, "the budget could not be lifted; the agent's log says why")
		return
	}
	c.observed = true
	writeJSON(w, apitype.BudgetLift{Team: team, Lifted: true})
}
