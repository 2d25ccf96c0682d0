package server

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sampler/samplertest"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// oneGPU is a GPU source that reads one idle GPU.
type oneGPU struct{}

func (oneGPU) Read(_ context.Context, now time.Time) (gpu.Sample, error) {
	return gpu.Sample{Time: now, Devices: []gpu.Device{{Index: 0, UUID: "GPU-0", Model: "Test GPU"}}}, nil
}

// TestErrorsAreJSON: every answer under /api/ that is not a result is the
// API's JSON error with a status that says what went wrong.
func TestErrorsAreJSON(t *testing.T) {
	s := sampler.New(sampler.Config{Node: "n1", GPUs: oneGPU{}})
	s.Step(context.Background(), time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC))
	secret, tok, err := auth.NewToken("t", "admin", config.RoleAdmin, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	authn, err := auth.New(auth.Config{Tokens: []config.Token{tok}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Config{Ticks: s, Auth: func() *auth.Authenticator { return authn }, Limiter: func() *auth.Limiter { return nil }}))
	defer srv.Close()

	tests := []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{http.MethodGet, "/api/v1/nothing", http.StatusNotFound, "not_found", ""},
		{http.MethodPost, "/api/v1/gpus", http.StatusMethodNotAllowed, "method_not_allowed", "GET, HEAD"},
		{http.MethodGet, "/api/v1/containers/x/stop", http.StatusMethodNotAllowed, "method_not_allowed", "POST"},
		{http.MethodDelete, "/api/v1/containers", http.StatusMethodNotAllowed, "method_not_allowed", "GET, HEAD"},
		{http.MethodPut, "/api/v1/usage", http.StatusMethodNotAllowed, "method_not_allowed", "GET, HEAD"},
		{http.MethodPost, "/api/v1/usage.csv", http.StatusMethodNotAllowed, "method_not_allowed", "GET, HEAD"},
		{http.MethodPost, "/api/v1/nothing", http.StatusNotFound, "not_found", ""},
		{http.MethodGet, "/api/v1/usage", http.StatusServiceUnavailable, "ledger_off", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+secret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%d %s, want %d application/json; body %s", resp.StatusCode, resp.Header.Get("Content-Type"), tt.status, body)
			}
			if got := resp.Header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow: %q, want %q", got, tt.allow)
			}
			var e apitype.Error
			if err := json.Unmarshal(body, &e); err != nil || e.Code != tt.code || e.Message == "" {
				t.Errorf("body %s, want an error with code %q and a message", body, tt.code)
			}
		})
	}
}

// openHandler serves the API to anyone as a viewer, for tests of what
// the endpoints answer rather than of who may call them.
func openHandler(t *testing.T, ticks TickSource, reports Reports, findings Waste) http.Handler {
	t.Helper()
	authn, err := auth.New(auth.Config{Anonymous: config.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{Ticks: ticks, Reports: reports, Waste: findings, Auth: func() *auth.Authenticator { return authn }, Limiter: func() *auth.Limiter { return nil }})
}

// TestContainersHeldSeconds: in shared.yaml alice and bob share GPU 0
// for the 60 s metered: each is allocated half of it, 30 s, and holds
// all of it, 60 s.
func TestContainersHeldSeconds(t *testing.T) {
	sc, err := sim.Load("../../../testdata/shared.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := samplertest.Scenario(sc, sampler.Config{})
	for i := range 61 {
		s.Step(context.Background(), sc.Start.Add(time.Duration(i)*time.Second))
	}
	got := map[string][2]float64{}
	for _, c := range ContainersFromTick(s.Latest()).Containers {
		for _, g := range c.GPUs {
			got[c.Name] = [2]float64{g.AllocatedSeconds, g.HeldSeconds}
		}
	}
	want := map[string][2]float64{"alice-train": {30, 60}, "bob-notebook": {30, 60}, "carol-idle": {60, 60}}
	for name, w := range want {
		if g := got[name]; math.Abs(g[0]-w[0]) > 1e-9 || math.Abs(g[1]-w[1]) > 1e-9 {
			t.Errorf("%s: allocated and held seconds %v, want %v", name, g, w)
		}
	}
}
