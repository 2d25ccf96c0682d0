package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// History is where GET /api/v1/gpus/history reads the GPUs' figures over
// time.
type History interface {
	// Recent returns what the agent keeps in memory of [from, to) per
	// step: the last hour of ticks, no ledger read.
	Recent(from, to time.Time, step time.Duration) []ledger.GPUHistory
	// Stored reads [from, to) per step (whole minutes) from the ledger;
	// it wraps ErrNoLedger when the ledger is off.
	Stored(ctx context.Context, from, to time.Time, step time.Duration) ([]ledger.GPUHistory, error)
}

// ErrNoLedger is wrapped by History.Stored when there is no ledger.
var ErrNoLedger = errors.New("the ledger is off")

// historyWindow is one window the endpoint knows: how far back, in what
// steps, and whether memory holds it.
type historyWindow struct {
	name   string
	span   time.Duration
	step   time.Duration
	recent bool
}

// historyWindows give each window a few hundred points at most per GPU.
var historyWindows = []historyWindow{
	{apitype.HistoryHour, time.Hour, 10 * time.Second, true},
	{apitype.HistoryDay, 24 * time.Hour, 5 * time.Minute, false},
	{apitype.HistoryWeek, 7 * 24 * time.Hour, time.Hour, false},
}

func (s *server) historyRoutes() []route {
	return []route{{method: "GET", pattern: "/api/v1/gpus/history", act: auth.ActGPUsRead, h: s.history}}
}

// history answers GET /api/v1/gpus/history?window=1h|24h|7d[&gpu=UUID].
// A GPU's figures are its own and say nothing of who used it, so every
// role that may read /api/v1/gpus reads them whole.
func (s *server) history(w http.ResponseWriter, r *http.Request, c *call) {
	q, err := apitype.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
		return
	}
	for k := range q {
		if k != "window" && k != "gpu" {
			writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, fmt.Sprintf("unknown query parameter %q: use window and gpu", k))
			return
		}
		if len(q[k]) > 1 {
			writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, fmt.Sprintf("%s is given %d times: give it once", k, len(q[k])))
			return
		}
	}
	name := q.Get("window")
	if name == "" {
		name = apitype.HistoryHour
	}
	i := slices.IndexFunc(historyWindows, func(h historyWindow) bool { return h.name == name })
	if i < 0 {
		names := make([]string, len(historyWindows))
		for j, h := range historyWindows {
			names[j] = h.name
		}
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, fmt.Sprintf("window %q: want one of %s", name, strings.Join(names, ", ")))
		return
	}
	hw := historyWindows[i]
	if s.cfg.History == nil {
		writeError(w, http.StatusServiceUnavailable, apitype.CodeNoSample, "GPU history is not kept by this agent")
		return
	}
	// The window ends at the end of the step now is in, so that the
	// newest point is there and points stay put between calls.
	to := s.cfg.Now().UTC().Truncate(hw.step).Add(hw.step)
	from := to.Add(-hw.span)
	var hs []ledger.GPUHistory
	if hw.recent {
		hs = s.cfg.History.Recent(from, to, hw.step)
	} else {
		hs, err = s.cfg.History.Stored(r.Context(), from, to, hw.step)
		switch {
		case errors.Is(err, ErrNoLedger):
			writeError(w, http.StatusServiceUnavailable, apitype.CodeLedgerOff,
				fmt.Sprintf("window %s reads the ledger, which is off (ledger.enabled: false); window %s is kept in memory", name, apitype.HistoryHour))
			return
		case err != nil:
			s.cfg.Logger.Error("GPU history", "window", name, "err", err)
			writeError(w, http.StatusInternalServerError, apitype.CodeInternal, "could not read the GPU history from the ledger")
			return
		}
	}
	gpus := HistoryFromLedger(hs)
	if uuid := q.Get("gpu"); uuid != "" {
		j := slices.IndexFunc(gpus, func(g apitype.GPUHistory) bool { return g.UUID == uuid })
		if j < 0 {
			writeError(w, http.StatusNotFound, apitype.CodeNotFound, fmt.Sprintf("gpu %q: no such GPU has figures in the last %s", uuid, name))
			return
		}
		gpus = gpus[j : j+1]
	}
	if gpus == nil {
		gpus = []apitype.GPUHistory{}
	}
	for k := range gpus {
		if gpus[k].Points == nil {
			gpus[k].Points = []apitype.HistoryPoint{}
		}
	}
	writeJSON(w, apitype.HistoryResponse{
		Node: s.cfg.Node, Window: name, From: from, To: to,
		Step: stepName(hw.step), StepSeconds: int64(hw.step / time.Second), GPUs: gpus,
	})
}

// stepName writes a step as 10s, 5m or 1h.
func stepName(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}
