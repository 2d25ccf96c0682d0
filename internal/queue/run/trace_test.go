package run

import (
	"slices"
	"testing"
	"time"
)

func TestStartTraceSteps(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	var p passTrace
	p.dieSeen(ms(0))
	p.dieSeen(ms(5)) // a second death in the same turn: the first counts
	p.passBegan(ms(10))
	s := p.start()
	for _, n := range []int{12, 40, 45, 300} {
		s.mark(ms(n))
	}
	want := []time.Duration{10, 2, 28, 5, 255}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if got := s.durations(); !slices.Equal(got, want) {
		t.Errorf("steps %v = %v, want %v", startSteps, got, want)
	}

	p.passEnded()
	p.passBegan(ms(400))
	s = p.start()
	s.mark(ms(401))
	got := s.durations()
	if got[0] != -1 || got[1] != time.Millisecond || got[2] != -1 {
		t.Errorf("a pass no death woke, stopped after the intent: %v", got)
	}

	m := newMetrics()
	m.observeStartSteps([]time.Duration{-1, 2 * time.Millisecond, 2 * time.Second, 0, 0})
	h := m.snapshot().StartSteps
	if len(h) != len(startSteps) || h[0].Count != 0 || h[1].Count != 1 || h[2].Sum != 2 {
		t.Errorf("histograms: %+v", h)
	}
	if i := slices.Index(stepBounds, 0.005); h[1].Counts[i] != 1 || h[1].Counts[i-1] != 0 {
		t.Errorf("2 ms not in the 5 ms bucket: %v", h[1].Counts)
	}
}
