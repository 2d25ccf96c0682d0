package waste

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/record"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sampler/samplertest"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// stoppedAgent is a node whose agent starts at 00:20, inside an hour, and
// stops at 02:30 with every container still running. Each container does
// one thing all its life, so every condition holds for whole hours and
// the ledger's hour rows must find what its minute rows find:
//   - nb idles on GPU 0, loader stalls on GPU 1 (busy CPU, memory held,
//     no compute), greedy holds GPUs 2 and 3 and computes on 2;
//   - light computes at 8 % on GPU 4, above the idle threshold, and train
//     at 85 % on GPU 5: neither is waste;
//   - dave runs a process on GPU 4 until 01:40, long before the stop;
//     frank runs one on GPU 5 until the agent stops.
const stoppedAgent = `
version: 1
node: lab
start: 2026-11-02T00:20:00Z
duration: 6h
interval: 10s
gpus:
  - count: 6
    model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    idle_power: 70W
    max_power: 700W
containers:
  - name: nb
    labels: {gpumeter.user: carol}
    gpus: [0]
    cpu: 0.01
    phases:
      - {at: 0s, util: 0, memory: 2GiB}
  - name: loader
    labels: {gpumeter.user: bob}
    gpus: [1]
    cpu: 3
    phases:
      - {at: 0s, util: 0, memory: 20GiB}
  - name: greedy
    labels: {gpumeter.user: alice}
    gpus: [2, 3]
    cpu: 2
    phases:
      - {at: 0s, util: 90, memory: 40GiB, gpus: [2]}
  - name: light
    labels: {gpumeter.user: gina}
    gpus: [4]
    cpu: 0.05
    phases:
      - {at: 0s, util: 8, memory: 4GiB}
  - name: train
    labels: {gpumeter.user: erin}
    gpus: [5]
    cpu: 4
    phases:
      - {at: 0s, util: 85, memory: 60GiB}
host_processes:
  - {user: dave, gpu: 4, start: 0s, end: 1h20m, util: 20, memory: 1GiB}
  - {user: frank, gpu: 5, start: 0s, end: 6h, util: 10, memory: 1GiB}
`

// playUntil runs the scenario through the sampler and meter as an agent
// would until stop, when the agent stops: its containers are still
// running, and nothing says they ended.
func playUntil(t testing.TB, text string, stop time.Duration, sinks ...func(*sampler.Tick)) *sim.Scenario {
	t.Helper()
	sc, err := sim.Parse("scenario.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if stop >= sc.Duration {
		t.Fatalf("stop %s is not before the scenario's end, %s: its containers would end", stop, sc.Duration)
	}
	s := samplertest.Scenario(sc, sampler.Config{
		OnTick: func(tk *sampler.Tick) {
			for _, f := range sinks {
				f(tk)
			}
		},
	})
	for now := sc.Start; !now.After(sc.Start.Add(stop)); now = now.Add(sc.Interval) {
		s.Step(context.Background(), now)
	}
	return sc
}

// stepsRead is the real ledger, noting which rows each read asked for.
type stepsRead struct {
	Reader
	hours, minutes []ledger.Filter
}

func (s *stepsRead) Series(ctx context.Context, f ledger.Filter, step time.Duration) ([]ledger.UsagePoint, error) {
	if step == time.Hour {
		s.hours = append(s.hours, f)
	} else {
		s.minutes = append(s.minutes, f)
	}
	return s.Reader.Series(ctx, f, step)
}

// TestWindowLength: the findings over the ledger of an agent that then
// stopped do not depend on the window's length. A window of 47 h reads
// minute rows, one of 49 h hour rows (the partial hours at its ends
// aside); both find the same rules, owners and GPUs, since the same time
// to the hour, and nothing active once the node's data has stopped, while
// a window that ends where the data does finds what held at the end
// active (and dave, gone for 50 minutes, not).
func TestWindowLength(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rec := record.New(record.Config{Store: store, Node: "lab", MaxRows: 1 << 30})
	sc := playUntil(t, stoppedAgent, 2*time.Hour+10*time.Minute, rec.Add)
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	start := sc.Start                                  // 00:20
	stop := sc.Start.Add(2*time.Hour + 10*time.Minute) // 02:30
	rules := config.DefaultWasteRules()
	rules.TooOld.MaxAge = time.Hour
	const flush = 5 * time.Second // ledger.flush_interval's default

	type key struct{ rule, who, gpus string }
	type want struct {
		key
		since  time.Time
		active bool // when the window ends at the stop
	}
	tooOld := start.Add(time.Hour)
	wants := []want{
		{key{config.RuleIdle, "nb", "[0]"}, start, true},
		{key{config.RuleStalled, "loader", "[1]"}, start, true},
		{key{config.RuleOverAllocated, "greedy", "[3]"}, start, true},
		{key{config.RuleOutside, "dave", "[4]"}, start, false},
		{key{config.RuleOutside, "frank", "[5]"}, start, true},
		{key{config.RuleTooOld, "nb", "[0]"}, tooOld, true},
		{key{config.RuleTooOld, "loader", "[1]"}, tooOld, true},
		{key{config.RuleTooOld, "greedy", "[2 3]"}, tooOld, true},
		{key{config.RuleTooOld, "light", "[4]"}, tooOld, true},
		{key{config.RuleTooOld, "train", "[5]"}, tooOld, true},
	}
	for _, end := range []struct {
		name string
		to   time.Time
		live bool // the node's data reaches the window's end
	}{
		{"ending at the stop", stop, true},
		// Within the slack (a minute and the flush interval) the rows of
		// a stopped agent look like those of a live one about to flush.
		{"ending a minute after the stop", stop.Add(time.Minute), true},
		{"ending two minutes after the stop", stop.Add(2 * time.Minute), false},
		{"ending 40 minutes after the stop", stop.Add(40 * time.Minute), false},
		// The last minute is inside the hour after the stop's: the stop's
		// hour, were it read from its hour row, would reach into the slack.
		{"ending a minute into the next hour", ledger.Hour(stop).Add(time.Hour + time.Minute), false},
		{"ending a day after the stop", stop.Add(24 * time.Hour), false},
	} {
		t.Run(end.name, func(t *testing.T) {
			for _, length := range []time.Duration{47 * time.Hour, 49 * time.Hour} {
				r := &stepsRead{Reader: store}
				rep, err := Evaluate(ctx, r, Options{From: end.to.Add(-length), To: end.to, Rules: rules, Cost: priced, Flush: flush})
				if err != nil {
					t.Fatal(err)
				}
				// The hour path must have read the agent's hours from
				// hour rows: otherwise this test proves nothing.
				readHours := slices.ContainsFunc(r.hours, func(f ledger.Filter) bool {
					return !f.From.After(ledger.Hour(start)) && !f.To.Before(ledger.Hour(stop))
				})
				if byHour := length > MinuteSteps; readHours != byHour {
					t.Fatalf("over %s: read the agent's hours from hour rows: %v, want %v (hour reads %v)", length, readHours, byHour, r.hours)
				}
				got := map[key]*Finding{}
				for i := range rep.Findings {
					f := &rep.Findings[i]
					got[key{f.Rule, cmpWho(f), fmt.Sprint(indexes(f.GPUs))}] = f
				}
				var missing []string
				for _, w := range wants {
					f := got[w.key]
					delete(got, w.key)
					if f == nil {
						missing = append(missing, fmt.Sprintf("%s %s %s", w.rule, w.who, w.gpus))
						continue
					}
					if d := f.Since.Sub(w.since).Abs(); d >= time.Hour {
						t.Errorf("over %s: %s %s since %s, want %s to the hour", length, w.rule, w.who, f.Since.Format(time.TimeOnly), w.since.Format(time.TimeOnly))
					}
					if active := w.active && end.live; f.Active != active {
						t.Errorf("over %s: %s %s active %v, want %v", length, w.rule, w.who, f.Active, active)
					}
				}
				if len(missing) > 0 {
					t.Errorf("over %s: no finding %s; got:\n%s", length, strings.Join(missing, ", "), dump(rep))
				}
				for k := range got {
					t.Errorf("over %s: unwanted finding %s %s %s; got:\n%s", length, k.rule, k.who, k.gpus, dump(rep))
				}
			}
		})
	}
}
