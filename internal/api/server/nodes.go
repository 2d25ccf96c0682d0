package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/run"
)

// Nodes is the fleet's nodes, read from the ledger on each call.
// SetDrained drains a node or undrains it, writing ev in the same
// transaction; an unknown node is an error wrapping
// ledger.ErrNodeNotFound, which the API answers with 404 node_not_found.
type Nodes interface {
	Nodes(ctx context.Context) ([]queue.NodeView, error)
	SetDrained(ctx context.Context, node string, drained bool, ev audit.Event) error
	// Consolidate says which nodes could be drained now.
	Consolidate(ctx context.Context) ([]queue.ConsolidateAdvice, error)
}

var _ Nodes = (*run.Nodes)(nil)

func (s *server) nodeRoutes() []route {
	return []route{
		{method: "GET", pattern: "/api/v1/nodes", act: auth.ActNodesRead, h: s.nodes},
		{method: "GET", pattern: "/api/v1/nodes/consolidate", act: auth.ActNodesRead, h: s.consolidate},
		{method: "POST", pattern: "/api/v1/nodes/{node}/drain", act: auth.ActNodeDrain, mutating: true, h: s.drainNode(true)},
		{method: "POST", pattern: "/api/v1/nodes/{node}/undrain", act: auth.ActNodeDrain, mutating: true, h: s.drainNode(false)},
	}
}

// fleetOff answers a call on an agent that is not in a fleet.
func (s *server) fleetOff(w http.ResponseWriter, r *http.Request, c *call, target string, mutating bool) bool {
	if s.cfg.Nodes != nil {
		return false
	}
	if mutating {
		s.observe(r, c, target, http.StatusServiceUnavailable, "fleet off")
	}
	writeError(w, http.StatusServiceUnavailable, apitype.CodeFleetOff, "this agent is not in a fleet: it needs queue.fleet: true, with ledger.dsn on the PostgreSQL that the fleet's agents share")
	return true
}

func (s *server) nodes(w http.ResponseWriter, r *http.Request, c *call) {
	if s.fleetOff(w, r, c, "", false) {
		return
	}
	if r.URL.RawQuery != "" {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, r.URL.Path+" takes no parameters")
		return
	}
	views, err := s.cfg.Nodes.Nodes(r.Context())
	if err != nil {
		s.nodesFailed(w, c, "read the nodes", err)
		return
	}
	writeJSON(w, NodesFromView(views))
}

// consolidate answers which nodes could be drained now.
func (s *server) consolidate(w http.ResponseWriter, r *http.Request, c *call) {
	if s.fleetOff(w, r, c, "", false) {
		return
	}
	if r.URL.RawQuery != "" {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, r.URL.Path+" takes no parameters")
		return
	}
	advice, err := s.cfg.Nodes.Consolidate(r.Context())
	if err != nil {
		s.nodesFailed(w, c, "advise on consolidation", err)
		return
	}
	out := apitype.Consolidation{Advice: []apitype.ConsolidateAdvice{}}
	for _, a := range advice {
		ca := apitype.ConsolidateAdvice{Node: a.Node, Drain: a.Drain, Drained: a.Drained, Jobs: append([]string{}, a.Jobs...),
			Moves: []apitype.ConsolidateMove{}, Why: a.Why}
		for _, m := range a.Moves {
			ca.Moves = append(ca.Moves, apitype.ConsolidateMove{Job: m.JobID, Node: m.Node})
		}
		out.Advice = append(out.Advice, ca)
	}
	writeJSON(w, out)
}

// drainNode drains the node the path names, or undrains it.
func (s *server) drainNode(drained bool) func(w http.ResponseWriter, r *http.Request, c *call) {
	verb := "drain"
	if !drained {
		verb = "undrain"
	}
	return func(w http.ResponseWriter, r *http.Request, c *call) {
		node := r.PathValue("node")
		target := verb + " node " + node
		if s.fleetOff(w, r, c, target, true) {
			return
		}
		if !s.namedAction(w, r, c, target, "node", node) {
			return
		}
		ev := s.event(r, c, target, http.StatusOK, "")
		// What is asked is done even if the caller hangs up.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), actTimeout)
		defer cancel()
		if err := s.cfg.Nodes.SetDrained(ctx, node, drained, ev); err != nil {
			if errors.Is(err, ledger.ErrNodeNotFound) {
				msg := queue.NodeNotFound(node)
				s.observe(r, c, target, http.StatusNotFound, msg)
				writeError(w, http.StatusNotFound, apitype.CodeNodeNotFound, msg)
				return
			}
			s.observe(r, c, target, s.nodesFailed(w, c, verb+" node "+node, err), err.Error())
			return
		}
		c.observed = true
		writeJSON(w, apitype.NodeDrain{Node: node, Drained: drained})
	}
}

// nodesFailed answers a call the fleet's store failed, and returns the
// status: a ledger that cannot be reached is a 503 to ask again after,
// since nothing was done; anything else a 500 the log explains.
func (s *server) nodesFailed(w http.ResponseWriter, c *call, what string, err error) int {
	if errors.Is(err, ledger.ErrUnavailable) {
		s.cfg.Logger.Warn(what+": ledger unavailable", "caller", c.id.Caller(), "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(int(ledgerRetryAfter/time.Second)))
		writeError(w, http.StatusServiceUnavailable, apitype.CodeLedgerUnavailable, "the fleet's database cannot be reached; nothing was done; try again in a few seconds")
		return http.StatusServiceUnavailable
	}
	s.cfg.Logger.Error(what, "caller", c.id.Caller(), "err", err)
	writeError(w, http.StatusInternalServerError, apitype.CodeInternal, "could not "+what+"; the agent's log says why")
	return http.StatusInternalServerError
}
