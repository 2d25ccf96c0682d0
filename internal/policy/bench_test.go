package policy

import (
	"fmt"
	"testing"
)

// BenchmarkEngineStep is one look at 256 active findings (one per
// container of the benchmark load) of which a quarter are exempt and the
// rest have been warned and wait for their stop: the engine's steady
// state, once a second.
func BenchmarkEngineStep(b *testing.B) {
	var names []string
	for i := range 256 {
		names = append(names, fmt.Sprintf("ctr-%d", i))
	}
	w := newWorld(names...)
	for i, n := range names {
		w.findings = append(w.findings, finding(fmt.Sprintf("idle-%d", i), n, true))
		if i%4 == 0 {
			w.ctrs["c-"+n].Labels[ExemptLabel] = "true"
		}
	}
	p := stopPolicy("")
	p.DryRun = true
	e := newTestEngine(w, p, &memAudit{}, nil)
	look(e) // the warnings
	b.ReportAllocs()
	for b.Loop() {
		e.step()
	}
	if len(e.state) != len(names) {
		b.Fatalf("%d tracked, want %d", len(e.state), len(names))
	}
}
