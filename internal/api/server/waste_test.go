package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// fixedWaste serves one report.
type fixedWaste struct{ rep *waste.Report }

func (f fixedWaste) Report() *waste.Report { return f.rep }

// TestWaste: /api/v1/waste serves the live findings as `gpumeter waste
// --format json` writes them, and says when the rules are off.
func TestWaste(t *testing.T) {
	s := sampler.New(sampler.Config{Node: "n1", GPUs: oneGPU{}})
	s.Step(context.Background(), time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC))
	since := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	rep := &waste.Report{From: since, To: since.Add(time.Hour), Currency: "EUR", Findings: []waste.Finding{{
		ID: "idle-0123456789abcdef", Rule: config.RuleIdle, Node: "n1", OwnerKind: waste.OwnerContainer, ContainerID: "c1", Container: "nb",
		Owner: "carol", GPUs: []waste.GPURef{{Index: 0, UUID: "GPU-0"}}, Since: since, FirstSeen: since.Add(time.Hour), Until: since.Add(time.Hour),
		Active: true, Evidence: map[string]float64{waste.EvSMPercent: 0}, WastedGPUHours: 1, Cost: 2.5,
	}}}

	get := func(h http.Handler, path string) (int, []byte) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}

	status, body := get(openHandler(t, s, nil, fixedWaste{rep}), "/api/v1/waste")
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var got waste.Report
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Findings) != 1 || got.Findings[0].ID != rep.Findings[0].ID || !got.Findings[0].Since.Equal(since) || got.Currency != "EUR" {
		t.Errorf("got %+v, want %+v", got, rep)
	}

	for _, tt := range []struct {
		name   string
		h      http.Handler
		path   string
		status int
		code   string
	}{
		{"off", openHandler(t, s, nil, nil), "/api/v1/waste", http.StatusServiceUnavailable, "waste_off"},
		{"parameters", openHandler(t, s, nil, fixedWaste{rep}), "/api/v1/waste?since=1h", http.StatusBadRequest, "bad_request"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body := get(tt.h, tt.path)
			var e apitype.Error
			if err := json.Unmarshal(body, &e); err != nil || status != tt.status || e.Code != tt.code {
				t.Errorf("%d %s, want %d with code %s", status, body, tt.status, tt.code)
			}
		})
	}
}
