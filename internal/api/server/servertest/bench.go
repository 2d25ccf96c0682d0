package servertest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sampler/samplertest"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// BenchSampler plays the load scenario at path (the repository's
// testdata/bench-8gpu-64ctr.yaml: 8 GPUs, 64 containers, 256 GPU
// processes) through the real sampler and meter for a few ticks, so that
// the latest tick has totals, as on a node that has been running.
func BenchSampler(b *testing.B, path string) *sampler.Sampler {
	b.Helper()
	sc, err := sim.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	s := samplertest.Scenario(sc, sampler.Config{})
	for i := range 3 {
		s.Step(context.Background(), sc.Start.Add(time.Duration(i)*time.Second))
	}
	return s
}

// CountingAudit is the agent's audit log, writing nowhere, that counts
// what it is told: what a read or a refusal costs the request is building
// its event and summing it.
type CountingAudit struct {
	*audit.Log
	N int
}

// NewCountingAudit is a CountingAudit over a fresh log.
func NewCountingAudit() *CountingAudit {
	return &CountingAudit{Log: audit.NewLog(audit.LogConfig{Node: "bench"})}
}

func (a *CountingAudit) Observe(e audit.Event) {
	a.N++
	a.Log.Observe(e)
}

func (a *CountingAudit) Events(context.Context, time.Time, time.Time, int) ([]audit.Event, bool, error) {
	return nil, false, nil
}

// discardWriter is a response recorder that keeps the status and the
// size of the body but not the body, and can be reused, so that the
// benchmarks measure the handler rather than a growing buffer.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.h }

func (w *discardWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

func (w *discardWriter) reset() {
	clear(w.h)
	w.status, w.n = 0, 0
}

// ServeLoop serves r until the benchmark ends, each answer with status,
// and returns the last answer's size.
func ServeLoop(b *testing.B, h http.Handler, r *http.Request, status int) int {
	b.Helper()
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		h.ServeHTTP(w, r)
		if w.status != status {
			b.Fatalf("status %d, want %d", w.status, status)
		}
	}
	return w.n
}
