package exporter

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/record"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/waste"
)

func TestAcceptsGzip(t *testing.T) {
	for _, tc := range []struct {
		header []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"gzip"}, true},
		{[]string{"GZIP"}, true},
		{[]string{"x-gzip"}, true},
		{[]string{"identity"}, false},
		{[]string{"deflate, br"}, false},
		{[]string{"deflate, gzip;q=1.0, *;q=0.5"}, true},
		{[]string{"br;q=1, gzip;q=0.001"}, true},
		{[]string{"gzip;q=0"}, false},
		{[]string{"gzip; q=0.0"}, false},
		{[]string{"gzip;q=bad"}, false},
		{[]string{"*"}, true},
		{[]string{"*;q=0"}, false},
		{[]string{"*, gzip;q=0"}, false},
		{[]string{"gzip;q=0, *"}, false},
		{[]string{"identity", "gzip"}, true},
	} {
		if got := acceptsGzip(tc.header); got != tc.want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", tc.header, got, tc.want)
		}
	}
}

// get serves one GET /metrics and returns the response and its body,
// gunzipped when it came compressed.
func get(t *testing.T, h http.Handler, acceptEncoding string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	body := io.Reader(resp.Body)
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatalf("gzipped body: %v", err)
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(b)
}

// parse reads an exposition with Prometheus' parser.
func parse(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the scrape is not valid exposition: %v", err)
	}
	return fams
}

func TestHandlerGzip(t *testing.T) {
	s := playScenario(t, "../../testdata/shared.yaml", 61)
	h := Handler(s, "test", nil)
	tick := string(Render(nil, s.Latest()))
	for _, tc := range []struct {
		accept, wantEncoding string
	}{
		{"", ""},
		{"identity", ""},
		{"gzip", "gzip"},
		{"gzip, deflate, br", "gzip"},
		{"gzip;q=0", ""},
	} {
		resp, body := get(t, h, tc.accept)
		if got := resp.Header.Get("Content-Encoding"); got != tc.wantEncoding {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, want %q", tc.accept, got, tc.wantEncoding)
		}
		if got := resp.Header.Values("Vary"); !slices.Contains(got, "Accept-Encoding") {
			t.Errorf("Accept-Encoding %q: Vary %q, want Accept-Encoding in it", tc.accept, got)
		}
		if got, want := resp.Header.Get("Content-Type"), string(expfmt.NewFormat(expfmt.TypeTextPlain)); got != want {
			t.Errorf("Accept-Encoding %q: Content-Type %q, want %q", tc.accept, got, want)
		}
		// The tick's series come first, byte for byte; the Go and process
		// metrics after them change from one scrape to the next.
		if !strings.HasPrefix(body, tick) {
			t.Errorf("Accept-Encoding %q: the body does not start with the rendered tick", tc.accept)
		}
		if fams := parse(t, body); fams["go_goroutines"] == nil || fams["gpumeter_build_info"] == nil {
			t.Errorf("Accept-Encoding %q: no go_goroutines or gpumeter_build_info", tc.accept)
		}
	}
}

// failing is a collector whose every collection fails, as a collector
// reading a broken ledger might.
type failing struct{ desc *prometheus.Desc }

func (f failing) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }
func (f failing) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(f.desc, errors.New("ledger unreadable"))
}

// TestHandlerServesWhatGathered: a collector that fails loses its own
// metrics only; the error is logged and counted.
func TestHandlerServesWhatGathered(t *testing.T) {
	s := playScenario(t, "../../testdata/shared.yaml", 61)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	bad := failing{prometheus.NewDesc("gpumeter_test_broken", "Always fails.", nil, nil)}
	h := Handler(s, "test", log, record.New(record.Config{}), bad, audit.NewLog(audit.LogConfig{}))

	for scrape := 1; scrape <= 2; scrape++ {
		resp, body := get(t, h, "gzip")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("scrape %d: status %d, want 200:\n%s", scrape, resp.StatusCode, body)
		}
		fams := parse(t, body)
		for _, name := range []string{
			"DCGM_FI_DEV_GPU_UTIL", "gpumeter_container_gpu_used_seconds_total", // the tick
			"go_goroutines", "gpumeter_build_info", // the exporter's own
			"gpumeter_ledger_up", "gpumeter_audit_events_total", // the other collectors
		} {
			if fams[name] == nil {
				t.Errorf("scrape %d: no %s", scrape, name)
			}
		}
		if fams["gpumeter_test_broken"] != nil {
			t.Errorf("scrape %d: the failing collector's family is served", scrape)
		}
		// The counter is gathered before this scrape's error is counted.
		errs := map[string]float64{}
		for _, m := range fams["promhttp_metric_handler_errors_total"].GetMetric() {
			errs[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
		if want := map[string]float64{"gathering": float64(scrape - 1), "encoding": 0}; !maps.Equal(errs, want) {
			t.Errorf("scrape %d: promhttp_metric_handler_errors_total %v, want %v", scrape, errs, want)
		}
	}
	if got := strings.Count(logs.String(), "ledger unreadable"); got != 2 {
		t.Errorf("the error is logged %d times in two scrapes, want 2:\n%s", got, logs.String())
	}
}

// fixed serves one tick.
type fixed struct{ t *sampler.Tick }

func (f fixed) Latest() *sampler.Tick { return f.t }

// everyFamily returns the latest tick of s with what the shared scenario
// lacks added, so that every family the exporter writes has a sample: a
// value GPU 0 does not report, MIG instances on GPU 1, and GPU memory
// whose owner is unknown.
func everyFamily(s *sampler.Sampler) *sampler.Tick {
	st := *s.Latest()
	mt := *st.Tick
	mt.Sample.Devices = slices.Clone(mt.Sample.Devices)
	mt.Sample.Devices[0].Missing = []gpu.Field{gpu.FieldEncUtil}
	mt.Sample.Devices[1].MIGEnabled = true
	mt.Sample.Devices[1].MIG = []gpu.MIGInstance{{GPUInstanceID: 1, UUID: "MIG-0b1e", Profile: "3g.40gb", MemoryTotal: 40 << 30, MemoryUsed: 1 << 30}}
	mt.Usage = append(slices.Clone(mt.Usage), meter.Usage{
		Owner: container.Owner{Kind: container.OwnerNone}, GPU: 0, UUID: mt.Sample.Devices[0].UUID,
		MemoryBytes: 1 << 30, Total: meter.Sums{EnergyJoules: 1},
	})
	st.Tick = &mt
	return &st
}

// lintExceptions are the promlint findings the scrape keeps on purpose. A
// metric ending in * names every family it begins.
var lintExceptions = []struct {
	metric, text, why string
}{
	{"DCGM_FI_DEV_*", "label names should be written in 'snake_case' not 'camelCase'",
		"modelName is dcgm-exporter's label (the only camelCase one: checked below); dashboards built for it select on it"},
	{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", `counter metrics should have "_total" suffix`,
		"dcgm-exporter's name for the energy counter, kept for its dashboards"},
	{"gpumeter_waste_gpu_hours_total", `use base unit "seconds" instead of "hours"`,
		"GPU-hours are the unit of every report and finding (the waste package's lint test says the same)"},
}

// TestHandlerLint runs promlint over everything the agent serves: the
// tick with every family present, the queue's, the exporter's own metrics, and the
// ledger writer's, the audit log's and the waste rules' collectors.
func TestHandlerLint(t *testing.T) {
	rules := config.DefaultWasteRules()
	rules.Idle.Window = 10 * time.Second
	live := waste.NewLive(waste.LiveConfig{Rules: rules})
	s := playScenario(t, "../../testdata/shared.yaml", 61, live.Add)
	h := NewHandler(fixed{everyFamily(s)}, Config{Version: "test", Queue: func() (QueueStats, bool) { return queueStats(), true }, Prices: &testPrices,
		Extra: []prometheus.Collector{record.New(record.Config{}), audit.NewLog(audit.LogConfig{}), live}})
	_, body := get(t, h, "gzip")

	// Every family the exporter declares is in the scrape, so that the
	// lint below sees each of them.
	fams := parse(t, body)
	var declared []string
	for _, line := range strings.Split(string(RenderPrices(RenderQueue(Render(nil, everyFamily(s)), "lab-1", queueStats()), everyFamily(s), testPrices)), "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			declared = append(declared, strings.Fields(name)[0])
		}
	}
	declared = append(declared, "gpumeter_build_info", "gpumeter_ledger_up", "gpumeter_audit_events_total", "gpumeter_waste_findings", "gpumeter_waste_gpu_hours_total")
	for _, name := range declared {
		if len(fams[name].GetMetric()) == 0 {
			t.Errorf("%s has no sample, so promlint cannot check it", name)
		}
	}

	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	used := make([]bool, len(lintExceptions))
	problems = slices.DeleteFunc(problems, func(p promlint.Problem) bool {
		for i, e := range lintExceptions {
			prefix, wild := strings.CutSuffix(e.metric, "*")
			if p.Text == e.text && (p.Metric == e.metric || wild && strings.HasPrefix(p.Metric, prefix)) {
				used[i] = true
				return true
			}
		}
		return false
	})
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	for i, e := range lintExceptions {
		if !used[i] {
			t.Errorf("the exception for %s (%s) is no longer needed: remove it", e.metric, e.text)
		}
	}

	// promlint does not say which label is camelCase: only dcgm-exporter's
	// modelName may be.
	camel := regexp.MustCompile(`[a-z][A-Z]`)
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if camel.MatchString(l.GetName()) && (l.GetName() != "modelName" || !strings.HasPrefix(name, "DCGM_FI_DEV_")) {
					t.Errorf("%s has the camelCase label %s", name, l.GetName())
				}
			}
		}
	}
}

// discard is a ResponseWriter that counts the bytes it is sent.
type discard struct {
	h http.Header
	n int
}

func (w *discard) Header() http.Header         { return w.h }
func (w *discard) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }
func (w *discard) WriteHeader(int)             {}

// BenchmarkHandler serves the load scenario's scrape, plain and gzipped,
// and reports the bytes that go on the wire.
func BenchmarkHandler(b *testing.B) {
	s := playScenario(b, "../../testdata/bench-8gpu-64ctr.yaml", 3)
	h := Handler(s, "bench", nil)
	for _, enc := range []string{"identity", "gzip"} {
		b.Run(enc, func(b *testing.B) {
			r := httptest.NewRequest("GET", "/metrics", nil)
			r.Header.Set("Accept-Encoding", enc)
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				w.n = 0
				h.ServeHTTP(w, r)
			}
			b.ReportMetric(float64(w.n), "wire-bytes/scrape")
		})
	}
}
