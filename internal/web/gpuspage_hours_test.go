package web_test

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
)

// ledgerHistory is History over a real ledger, as the agent's is: the
// stored windows read the node's GPU series; the last hour, held in the
// agent's memory, is none here.
type ledgerHistory struct {
	store ledger.GPUSeriesStore
	node  string
}

func (h ledgerHistory) Recent(from, to time.Time, step time.Duration) []ledger.GPUHistory {
	return nil
}

func (h ledgerHistory) Stored(ctx context.Context, from, to time.Time, step time.Duration) ([]ledger.GPUHistory, error) {
	return h.store.GPUSeries(ctx, h.node, from, to, step)
}

// gpuLedger writes to a new SQLite ledger node n1's two GPUs, read every
// minute of [from, to), as an agent that ran all along would have.
func gpuLedger(t *testing.T, from, to time.Time) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	gpus := []ledger.GPU{{Node: "n1", UUID: "GPU-0", Index: 0, Model: "H100", MemoryTotal: 80 << 30},
		{Node: "n1", UUID: "GPU-1", Index: 1, Model: "H100", MemoryTotal: 80 << 30}}
	b := ledger.Batch{Nodes: []ledger.Node{{Name: "n1", FirstSeen: from, LastSeen: to}}, GPUs: gpus}
	for m := from; m.Before(to); m = m.Add(time.Minute) {
		for k, g := range gpus {
			util := float64(20 + 30*k + m.Minute()%7)
			b.GPUUsage = append(b.GPUUsage, ledger.GPUUsage{Node: "n1", Start: m, GPU: g.UUID,
				GPUSums: ledger.GPUSums{Seconds: 60, AllocatedSeconds: 60, UsedSeconds: util * 0.6, EnergyJoules: 60 * 300},
				Gauges: ledger.GPUGauges{Samples: 12, UtilSum: 12 * util, UtilMax: util, MemorySum: 12 * float64(8<<30), MemoryMax: 8 << 30,
					PowerSum: 12 * 300, PowerMax: 300, TempSum: 12 * 50, TempMax: 50}})
		}
		if len(b.GPUUsage) >= 360*len(gpus) {
			if err := store.Write(ctx, b); err != nil {
				t.Fatal(err)
			}
			b = ledger.Batch{}
		}
	}
	if err := store.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	return store
}

var linePathRE = regexp.MustCompile(`<path class="line [^"]*" d="([^"]*)"><title>([^<]*)</title>`)

// chartLines are the points of each line of the chart figure id in a
// page, by the line's name.
func chartLines(t *testing.T, body []byte, id string) map[string]int {
	t.Helper()
	s := string(body)
	i := strings.Index(s, `id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no chart %q in the page", id)
	}
	s = s[i:]
	if j := strings.Index(s, "</figure>"); j >= 0 {
		s = s[:j]
	}
	out := map[string]int{}
	for _, m := range linePathRE.FindAllStringSubmatch(s, -1) {
		out[m[2]] = strings.Count(m[1], "M") + strings.Count(m[1], "L")
	}
	return out
}

// TestGPUsPageAtAnyHour: with the ledger read up to the minute now is in,
// as a running agent leaves it, the 24h and 7d windows give every GPU one
// point per step of the window that holds readings, whatever the hour and
// minute of the day (the console's 30-day ledger test runs at the hour CI
// does; this one runs at the hours that matter: a day's first and last
// minutes, an hour's first, middle and last quarter).
func TestGPUsPageAtAnyHour(t *testing.T) {
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{
		10 * time.Minute, 5*time.Hour + 45*time.Minute, 20*time.Hour + 45*time.Minute,
		21*time.Hour + 15*time.Minute, 21*time.Hour + 40*time.Minute, 23*time.Hour + 59*time.Minute,
		12 * time.Hour,
	} {
		now := day.Add(at).Add(17 * time.Second)
		t.Run(now.Format("15:04"), func(t *testing.T) {
			// The readings of the last 8 days, up to the minute in
			// progress, which the agent has not written yet.
			dataFrom, dataTo := now.Add(-8*24*time.Hour).Truncate(time.Minute), now.Truncate(time.Minute)
			store := gpuLedger(t, dataFrom, dataTo)
			f := newFixture(t, func(c *server.Config) { c.History = ledgerHistory{store: store, node: "n1"} })
			f.clock.mu.Lock()
			f.clock.t = now
			f.clock.mu.Unlock()
			for _, w := range []struct {
				window     string
				span, step time.Duration
			}{{"24h", 24 * time.Hour, 5 * time.Minute}, {"7d", 7 * 24 * time.Hour, time.Hour}} {
				to := now.Truncate(w.step).Add(w.step)
				from := to.Add(-w.span)
				want := 0
				for s := from; s.Before(to); s = s.Add(w.step) {
					if s.Add(w.step).After(dataFrom) && s.Before(dataTo) {
						want++
					}
				}
				a := f.get(t, asAdmin, "/gpus?window="+w.window)
				if a.status != 200 {
					t.Fatalf("%s: %d %s", w.window, a.status, a.body)
				}
				for _, chart := range []string{"util", "memory", "power", "temperature"} {
					got := chartLines(t, a.body, chart)
					if len(got) != 2 {
						t.Errorf("%s %s: lines %v, want GPU 0 and GPU 1", w.window, chart, got)
					}
					for _, g := range []string{"GPU 0", "GPU 1"} {
						if got[g] != want {
							t.Errorf("%s %s: %s has %d points, want %d (%s to %s in steps of %v)", w.window, chart, g, got[g], want,
								from.Format(time.RFC3339), to.Format(time.RFC3339), w.step)
						}
					}
				}
			}
			// The API's series, which the page draws, say the same.
			var h apitype.HistoryResponse
			f.get(t, asAdmin, "/api/v1/gpus/history?window=7d").decode(t, &h)
			for _, g := range h.GPUs {
				if n := len(g.Points); n < 167 || n > 168 {
					t.Errorf("7d API: %s has %d points, want 167 or 168", g.UUID, n)
				}
			}
		})
	}
}
