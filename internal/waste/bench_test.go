package waste

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sampler/samplertest"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// loadSampler is the sampler of BenchmarkTick in internal/sampler: 8 GPUs,
// 64 containers, 256 GPU processes, on a virtual clock.
func loadSampler(b *testing.B) (*sampler.Sampler, time.Time) {
	sc, err := sim.Load("../../testdata/bench-8gpu-64ctr.yaml")
	if err != nil {
		b.Fatal(err)
	}
	s := samplertest.Scenario(sc, sampler.Config{})
	return s, sc.Start
}

// BenchmarkTick is internal/sampler's BenchmarkTick, run here so that
// BenchmarkTickWithWaste has its baseline from the same run.
func BenchmarkTick(b *testing.B) {
	s, now := loadSampler(b)
	ctx := context.Background()
	s.Step(ctx, now)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		s.Step(ctx, now)
	}
}

// BenchmarkTickWithWaste is the same tick with the live rules fed by it,
// as the agent chains them; the rules run once a minute of ticks.
func BenchmarkTickWithWaste(b *testing.B) {
	s, now := loadSampler(b)
	live := NewLive(LiveConfig{Rules: config.DefaultWasteRules(), Cost: priced})
	ctx := context.Background()
	live.Add(s.Step(ctx, now))
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		live.Add(s.Step(ctx, now))
	}
}

// BenchmarkLiveAdd measures Live.Add alone on the load's ticks: ten
// minutes of them, replayed later and later, with the rules running on
// every minute's bucket.
func BenchmarkLiveAdd(b *testing.B) {
	s, now := loadSampler(b)
	ctx := context.Background()
	const n = 600
	ticks := make([]*sampler.Tick, n)
	times := make([]time.Time, n)
	for i := range ticks {
		ticks[i] = s.Step(ctx, now)
		times[i] = now
		now = now.Add(time.Second)
	}
	live := NewLive(LiveConfig{Rules: config.DefaultWasteRules(), Cost: priced})
	b.ReportAllocs()
	i, round := 0, 0
	for b.Loop() {
		if i == n {
			i, round = 0, round+1
			for j, t := range ticks {
				t.Time = times[j].Add(time.Duration(round*n) * time.Second)
			}
		}
		live.Add(ticks[i])
		i++
	}
	if len(live.all) < 64 {
		b.Fatalf("%d subjects, want the 64 containers and more", len(live.all))
	}
}

// monthLedger opens the SQLite ledger of ledgertest.Fill30Days: 8 GPUs,
// 2,000 containers, 30 days at minute resolution. It is the file that
// internal/ledger/sqlite's benchmarks keep in os.TempDir(), built here
// when missing.
func monthLedger(b *testing.B) (*sqlite.Store, ledgertest.Month) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("gpumeter-ledger-30d-fill%d-schema%d.db", ledgertest.FillVersion, sqlite.SchemaVersion()))
	if _, err := os.Stat(path); err != nil {
		tmp := path + ".building"
		for _, p := range []string{tmp, tmp + "-wal", tmp + "-shm"} {
			os.Remove(p)
		}
		s, err := sqlite.Open(context.Background(), tmp)
		if err != nil {
			b.Fatal(err)
		}
		ledgertest.Fill30Days(b, s)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			b.Fatal(err)
		}
	}
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, ledgertest.Plan30Days()
}

// BenchmarkEvaluate30Days evaluates every rule over the 30-day ledger, as
// `gpumeter waste --since 30d` does (hour steps), over two days of it
// (minute steps), and, for comparison, over the whole month at minute
// steps.
func BenchmarkEvaluate30Days(b *testing.B) {
	s, m := monthLedger(b)
	rules := config.DefaultWasteRules()
	rules.TooOld.MaxAge = 3 * time.Hour
	ctx := context.Background()
	for _, w := range []struct {
		name     string
		from, to time.Time
		step     time.Duration
	}{
		{"Month", m.From, m.To, 0},
		{"TwoDays", m.From.Add(10 * 24 * time.Hour), m.From.Add(12 * 24 * time.Hour), 0},
		{"MonthByMinute", m.From, m.To, time.Minute},
	} {
		b.Run(w.name, func(b *testing.B) {
			opt := Options{From: w.from, To: w.to, Rules: rules, Cost: priced}
			var rep *Report
			for b.Loop() {
				var err error
				if w.step == 0 {
					rep, err = Evaluate(ctx, s, opt)
				} else {
					rep, err = evaluateBy(ctx, s, opt, w.step)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(rep.Findings)), "findings")
		})
	}
}

func evaluateBy(ctx context.Context, s *sqlite.Store, opt Options, step time.Duration) (*Report, error) {
	f := ledger.Filter{From: opt.From, To: opt.To}
	points, err := s.Series(ctx, f, step)
	if err != nil {
		return nil, err
	}
	cpu, err := s.ContainerSeries(ctx, f, step)
	if err != nil {
		return nil, err
	}
	l := byMinute(opt.From, opt.To)
	if step == time.Hour {
		l.hourFrom, l.hourTo = l.from, l.to
	}
	return evaluate(points, cpu, l, opt), nil
}
