package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// callHistory answers with one point per GPU at from and records what it
// was asked.
type callHistory struct {
	calls []string
	err   error
}

func (h *callHistory) answer(kind string, from, to time.Time, step time.Duration) []ledger.GPUHistory {
	h.calls = append(h.calls, fmt.Sprintf("%s %s %s %v", kind, from.Format(time.RFC3339), to.Format(time.RFC3339), step))
	return []ledger.GPUHistory{
		{GPU: ledger.GPU{UUID: "GPU-b", Index: 1, Model: "H100"}, Points: []ledger.GPUPoint{{Start: from, Samples: 1, UtilMean: 20}}},
		{GPU: ledger.GPU{UUID: "GPU-a", Index: 0, Model: "H100"}},
	}
}

func (h *callHistory) Recent(from, to time.Time, step time.Duration) []ledger.GPUHistory {
	return h.answer("recent", from, to, step)
}

func (h *callHistory) Stored(_ context.Context, from, to time.Time, step time.Duration) ([]ledger.GPUHistory, error) {
	if h.err != nil {
		return nil, h.err
	}
	return h.answer("stored", from, to, step), nil
}

// TestHistoryWindows: each window reads its source over its span, ending
// with the step now is in, in its step; every role reads GPU figures.
func TestHistoryWindows(t *testing.T) {
	h := &callHistory{}
	f := newFixture(t, func(c *Config) { c.History = h })
	now := f.clock.Now().UTC()
	end := func(step time.Duration) time.Time { return now.Truncate(step).Add(step) }
	for _, tc := range []struct {
		query, window, step string
		span, stepD         time.Duration
		kind                string
	}{
		{"", "1h", "10s", time.Hour, 10 * time.Second, "recent"},
		{"?window=1h", "1h", "10s", time.Hour, 10 * time.Second, "recent"},
		{"?window=24h", "24h", "5m", 24 * time.Hour, 5 * time.Minute, "stored"},
		{"?window=7d", "7d", "1h", 7 * 24 * time.Hour, time.Hour, "stored"},
	} {
		for _, caller := range []string{asAdmin, asAlice, asViewer} {
			h.calls = nil
			a := f.get(t, caller, "/api/v1/gpus/history"+tc.query)
			if a.status != http.StatusOK {
				t.Fatalf("%s %s: %d %s", caller, tc.query, a.status, a.body)
			}
			var got apitype.HistoryResponse
			a.decode(t, &got)
			to := end(tc.stepD)
			want := fmt.Sprintf("%s %s %s %v", tc.kind, to.Add(-tc.span).Format(time.RFC3339), to.Format(time.RFC3339), tc.stepD)
			if len(h.calls) != 1 || h.calls[0] != want {
				t.Errorf("%s %s: read %q, want %q", caller, tc.query, h.calls, want)
			}
			if got.Window != tc.window || got.Step != tc.step || got.StepSeconds != int64(tc.stepD/time.Second) || !got.To.Equal(to) || len(got.GPUs) != 2 {
				t.Errorf("%s %s: %s", caller, tc.query, a.body)
			}
			if got.GPUs[1].Points == nil {
				t.Errorf("%s: a GPU without points has null points, want []", tc.query)
			}
		}
	}
	var one apitype.HistoryResponse
	f.get(t, asAlice, "/api/v1/gpus/history?window=24h&gpu=GPU-b").decode(t, &one)
	if len(one.GPUs) != 1 || one.GPUs[0].UUID != "GPU-b" || len(one.GPUs[0].Points) != 1 {
		t.Errorf("gpu=GPU-b: %+v", one)
	}
}

// TestHistoryBadInput: what the endpoint does not know is refused with a
// message that names it.
func TestHistoryBadInput(t *testing.T) {
	h := &callHistory{}
	f := newFixture(t, func(c *Config) { c.History = h })
	for q, want := range map[string]string{
		"?window=30d":          `window "30d": want one of 1h, 24h, 7d`,
		"?window=1H":           `window "1H"`,
		"?span=1h":             `unknown query parameter "span"`,
		"?window=1h&window=7d": "window is given 2 times",
		"?window=%zz":          "window",
	} {
		a := f.get(t, asAdmin, "/api/v1/gpus/history"+q)
		e := a.apiError(t, http.StatusBadRequest, apitype.CodeBadRequest)
		if !strings.Contains(e.Message, want) {
			t.Errorf("%s: %q, want it to say %q", q, e.Message, want)
		}
	}
	e := f.get(t, asAdmin, "/api/v1/gpus/history?gpu=GPU-z").apiError(t, http.StatusNotFound, apitype.CodeNotFound)
	if !strings.Contains(e.Message, `"GPU-z"`) {
		t.Errorf("unknown GPU: %q, want it named", e.Message)
	}
	f.get(t, asNone, "/api/v1/gpus/history").apiError(t, http.StatusUnauthorized, "unauthenticated")
	if len(h.calls) != 1 {
		t.Errorf("reads %q, want only the unknown GPU's", h.calls)
	}

	h.err = fmt.Errorf("wrapped: %w", ErrNoLedger)
	e = f.get(t, asAdmin, "/api/v1/gpus/history?window=7d").apiError(t, http.StatusServiceUnavailable, apitype.CodeLedgerOff)
	if !strings.Contains(e.Message, "ledger.enabled") {
		t.Errorf("ledger off: %q", e.Message)
	}
	h.err = fmt.Errorf("disk on fire")
	e = f.get(t, asAdmin, "/api/v1/gpus/history?window=7d").apiError(t, http.StatusInternalServerError, apitype.CodeInternal)
	if strings.Contains(e.Message, "fire") {
		t.Errorf("internal error leaks %q", e.Message)
	}
	off := newFixture(t, nil)
	off.get(t, asAdmin, "/api/v1/gpus/history").apiError(t, http.StatusServiceUnavailable, apitype.CodeNoSample)
}
