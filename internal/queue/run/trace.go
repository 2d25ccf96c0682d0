package run

import (
	"context"
	"log/slog"
	"slices"
	"time"
)

// startSteps name the steps of a job's start, in order, as the trace and
// its log line name them: from the death of the container whose GPUs the
// job takes (when a death woke the pass) to the engine's answer to start.
// pass_to_intent holds the pass's scheduling, and the starts made before
// this one in the same pass; intent_to_create the spec, the staged
// mounts and Docker's create; create_to_check the inspect of the mounts;
// start_call Docker's start.
var startSteps = []string{"die_to_pass", "pass_to_intent", "intent_to_create", "create_to_check", "start_call"}

// passTrace is what the loop knows of the pass under way: when the death
// that woke it was seen (zero: none did) and when it began.
type passTrace struct {
	died, began time.Time
}

// startTrace holds the times of one job's start, one per step's end, the
// pass's own first.
type startTrace struct {
	died, began time.Time
	at          []time.Time
}

func (p *passTrace) dieSeen(now time.Time) {
	if p.died.IsZero() {
		p.died = now
	}
}

func (p *passTrace) passBegan(now time.Time) { p.began = now }

// passEnded forgets the death: the next pass was not woken by it.
func (p *passTrace) passEnded() { p.died = time.Time{} }

func (p *passTrace) start() *startTrace {
	return &startTrace{died: p.died, began: p.began, at: make([]time.Time, 0, len(startSteps)-1)}
}

// mark ends the next step at now.
func (s *startTrace) mark(now time.Time) { s.at = append(s.at, now) }

// durations are the steps' shares, in startSteps' order; a step not seen
// (no death woke the pass) is -1.
func (s *startTrace) durations() []time.Duration {
	d := make([]time.Duration, len(startSteps))
	d[0] = -1
	if !s.died.IsZero() {
		d[0] = s.began.Sub(s.died)
	}
	prev := s.began
	for i := 1; i < len(d); i++ {
		if i-1 >= len(s.at) {
			d[i] = -1
			continue
		}
		d[i] = s.at[i-1].Sub(prev)
		prev = s.at[i-1]
	}
	return d
}

// observeStart counts a started job's steps in the metrics and logs them.
func (q *Launcher) observeStart(id string, s *startTrace) {
	d := s.durations()
	q.metrics.observeStartSteps(d)
	if !q.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs := []any{"job", id}
	for i, name := range startSteps {
		if d[i] >= 0 {
			attrs = append(attrs, name+"_ms", float64(d[i].Microseconds())/1000)
		}
	}
	q.log.Debug("job start trace", attrs...)
}

// stepBounds are the start steps' histogram bounds in seconds: a
// millisecond to ten seconds.
var stepBounds = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// StepHistogram is one start step's cumulative histogram, as Snapshot's
// wait histogram is: Counts has one more count, for +Inf.
type StepHistogram struct {
	Step   string
	Bounds []float64
	Counts []uint64
	Sum    float64
	Count  uint64
}

type stepHistograms [][]uint64 // per step, per bucket (not cumulative), +Inf last

func (m *metrics) observeStartSteps(d []time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.steps == nil {
		m.steps = make(stepHistograms, len(startSteps))
		m.stepSums = make([]float64, len(startSteps))
		for i := range m.steps {
			m.steps[i] = make([]uint64, len(stepBounds)+1)
		}
	}
	for i, v := range d {
		if v < 0 {
			continue
		}
		s := v.Seconds()
		b, _ := slices.BinarySearch(stepBounds, s)
		m.steps[i][b]++
		m.stepSums[i] += s
	}
}

// startStepHistograms returns the steps' histograms; m.mu is held.
func (m *metrics) startStepHistograms() []StepHistogram {
	out := make([]StepHistogram, len(startSteps))
	for i, name := range startSteps {
		h := StepHistogram{Step: name, Bounds: slices.Clone(stepBounds), Counts: make([]uint64, len(stepBounds)+1)}
		if m.steps != nil {
			var c uint64
			for b, n := range m.steps[i] {
				c += n
				h.Counts[b] = c
			}
			h.Sum, h.Count = m.stepSums[i], c
		}
		out[i] = h
	}
	return out
}
