package exporter

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/gpumeter/gpumeter/internal/sampler"
)

// swapped serves whichever tick was stored last.
type swapped struct{ p atomic.Pointer[sampler.Tick] }

func (s *swapped) Latest() *sampler.Tick { return s.p.Load() }

// runHandler starts h.Run and stops it when the test ends.
func runHandler(t testing.TB, h *MetricsHandler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	for !h.live.Load() { // until then a scrape renders itself
		time.Sleep(time.Millisecond)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// awaitTick scrapes until the body's tick part is want's, or fails after a
// generous timeout.
func awaitTick(t *testing.T, h http.Handler, want []byte) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := get(t, h, "")
		if strings.HasPrefix(body, string(want)) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scrape of the new tick in 30 s; got:\n%.300s", body)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestScrapeBetweenTicks: while Run runs, every scrape between two ticks
// serves the same render, plain and gzipped alike, with the registry's
// metrics in it; a new tick is served as soon as it is published.
func TestScrapeBetweenTicks(t *testing.T) {
	s := playScenario(t, "../../testdata/shared.yaml", 3)
	first := s.Latest()
	s2 := playScenario(t, "../../testdata/shared.yaml", 5)
	second := s2.Latest()
	src := &swapped{}
	src.p.Store(first)
	h := NewHandler(src, Config{Version: "test"})
	runHandler(t, h)

	body := awaitTick(t, h, Render(nil, first))
	for _, enc := range []string{"", "gzip", "identity", "gzip", ""} {
		resp, got := get(t, h, enc)
		if got != body {
			t.Fatalf("Accept-Encoding %q: the scrape between ticks differs from the first one", enc)
		}
		if ct, want := resp.Header.Get("Content-Type"), string(expfmt.NewFormat(expfmt.TypeTextPlain)); ct != want {
			t.Errorf("Content-Type %q, want %q", ct, want)
		}
	}
	if fams := parse(t, body); fams["go_goroutines"] == nil || fams["gpumeter_build_info"] == nil {
		t.Error("the render lacks the registry's metrics")
	}

	src.p.Store(second)
	// Before Run has rendered the new tick, a scrape renders it itself:
	// a scrape never lags the tick.
	_, next := get(t, h, "")
	if !strings.HasPrefix(next, string(Render(nil, second))) {
		t.Fatal("a scrape after the new tick, before Notify, does not serve it")
	}
	// Run, told of the tick the scrape rendered, leaves that render be.
	h.Notify()
	for range 3 {
		time.Sleep(10 * time.Millisecond)
		if _, gz := get(t, h, "gzip"); gz != next {
			t.Fatal("after the new tick, scrapes serve different renders")
		}
	}
}

// TestScrapeNeverHalfWritten scrapes while renders swap as fast as they
// can: each body is one whole render of one of the two ticks (run it with
// -race too).
func TestScrapeNeverHalfWritten(t *testing.T) {
	a := playScenario(t, "../../testdata/shared.yaml", 3).Latest()
	b := playScenario(t, "../../testdata/shared.yaml", 7).Latest()
	renders := [][]byte{Render(nil, a), Render(nil, b)}
	if bytes.Equal(renders[0], renders[1]) {
		t.Fatal("the two ticks render the same bytes: the test could not tell them apart")
	}
	src := &swapped{}
	src.p.Store(a)
	h := NewHandler(src, Config{Version: "test"})
	runHandler(t, h)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			src.p.Store([]*sampler.Tick{a, b}[i%2])
			h.Notify()
			time.Sleep(time.Millisecond)
		}
	})
	seen := map[int]bool{}
	for i := 0; i < 200 && !(seen[0] && seen[1] && i >= 50); i++ {
		enc := []string{"", "gzip"}[i%2]
		_, body := get(t, h, enc)
		which := -1
		for j, r := range renders {
			if strings.HasPrefix(body, string(r)) {
				which = j
			}
		}
		if which < 0 {
			close(stop)
			wg.Wait()
			t.Fatalf("scrape %d (%q) is neither tick's render:\n%.300s", i, enc, body)
		}
		seen[which] = true
		parse(t, body) // whole: the registry's part parses too
	}
	close(stop)
	wg.Wait()
}

// TestScrapeBeforeFirstTick: Run serves the registry's metrics before the
// sampler has a tick, and no tick series.
func TestScrapeBeforeFirstTick(t *testing.T) {
	h := NewHandler(&swapped{}, Config{Version: "test"})
	runHandler(t, h)
	_, body := get(t, h, "gzip")
	fams := parse(t, body)
	if fams["go_goroutines"] == nil {
		t.Error("no go_goroutines before the first tick")
	}
	if fams["gpumeter_ticks_total"] != nil {
		t.Error("tick series before the first tick")
	}
}

// copying is a response writer that copies the body into memory, as a
// socket write would, so that the benchmark pays for the copy.
type copying struct {
	h   http.Header
	buf []byte
}

func (w *copying) Header() http.Header         { return w.h }
func (w *copying) Write(p []byte) (int, error) { w.buf = append(w.buf, p...); return len(p), nil }
func (w *copying) WriteHeader(int)             {}

// benchScrape serves the load scenario's scrape from Run's snapshot, as
// the agent does, and reports the bytes on the wire.
func benchScrape(b *testing.B, enc string) {
	s := playScenario(b, "../../testdata/bench-8gpu-64ctr.yaml", 3)
	h := NewHandler(s, Config{Version: "bench"})
	runHandler(b, h)
	h.refresh(true)
	r, _ := http.NewRequest("GET", "/metrics", nil)
	r.Header.Set("Accept-Encoding", enc)
	w := &copying{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		w.buf = w.buf[:0]
		h.ServeHTTP(w, r)
	}
	b.ReportMetric(float64(len(w.buf)), "wire-bytes/scrape")
}

// BenchmarkScrape is a plain scrape at the 64-container load.
func BenchmarkScrape(b *testing.B) { benchScrape(b, "identity") }

// BenchmarkScrapeGzip is a gzipped scrape at the 64-container load.
func BenchmarkScrapeGzip(b *testing.B) { benchScrape(b, "gzip") }

// BenchmarkRefresh is what Run spends per tick at the 64-container load:
// the whole render, plain and gzipped.
func BenchmarkRefresh(b *testing.B) {
	s := playScenario(b, "../../testdata/bench-8gpu-64ctr.yaml", 3)
	h := NewHandler(s, Config{Version: "bench"})
	b.ReportAllocs()
	for b.Loop() {
		h.refresh(true)
	}
	snap := h.current.Load()
	b.ReportMetric(float64(cap(snap.plain)+cap(snap.gz)), "held-bytes/snapshot")
	b.ReportMetric(float64(len(snap.plain)+len(snap.gz)), "used-bytes/snapshot")
}
