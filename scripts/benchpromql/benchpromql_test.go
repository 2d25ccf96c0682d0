package main

import (
	"bytes"
	"context"
	"database/sql"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
)

var update = flag.Bool("update", false, "rewrite testdata/ledger.om")

var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// The test ledger's minutes, [firstMinute, lastMinute): the first hour's
// are compacted into chunks when the second hour's come.
const firstMinute, lastMinute = 56, 64

// writeLedger writes a small ledger: a container on two GPUs across the
// end of an hour, a host user's process, the GPUs' minutes and the
// container's CPU and RAM.
func writeLedger(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gpus := []ledger.GPU{
		{Node: "n1", UUID: "GPU-a", Index: 0, Model: "Simulated GPU", MemoryTotal: 80 << 30},
		{Node: "n1", UUID: "GPU-b", Index: 1, Model: "Simulated GPU", MemoryTotal: 80 << 30},
	}
	meta := ledger.Batch{
		Nodes: []ledger.Node{{Name: "n1", FirstSeen: t0, LastSeen: t0.Add(lastMinute * time.Minute)}},
		GPUs:  gpus,
		Containers: []ledger.Container{{Node: "n1", ID: "0123456789abcdef0123", Name: `train "big"`, Image: "pytorch",
			Labels: map[string]string{"gpumeter.user": "alice", "gpumeter.team": "nlp"}, User: "alice", Team: "nlp",
			StartedAt: t0, FirstSeen: t0, LastSeen: t0.Add(lastMinute * time.Minute)}},
	}
	if err := s.Write(ctx, meta); err != nil {
		t.Fatal(err)
	}
	for _, span := range [][2]int{{firstMinute, 60}, {60, lastMinute}} {
		var b ledger.Batch
		for m := span[0]; m < span[1]; m++ {
			start := t0.Add(time.Duration(m) * time.Minute)
			for i, g := range gpus {
				b.Usage = append(b.Usage, ledger.Usage{Node: "n1", Start: start, OwnerKind: ledger.KindContainer,
					OwnerID: "0123456789abcdef0123", GPU: g.UUID, Sums: ledger.Sums{
						AllocatedSeconds: 30, HeldSeconds: 60, PresentSeconds: 60, UsedSeconds: float64(m%7) + 0.25*float64(i),
						MemoryByteSeconds: 60 << 30, EnergyJoules: 1234.5, PeakMemoryBytes: 1 << 30, PeakUtil: 42.25}})
				b.GPUUsage = append(b.GPUUsage, ledger.GPUUsage{Node: "n1", Start: start, GPU: g.UUID,
					GPUSums: ledger.GPUSums{Seconds: 60, AllocatedSeconds: 60, UsedSeconds: 20, EnergyJoules: 3000, PeakUtil: 50},
					Gauges: ledger.GPUGauges{Samples: 60, UtilSum: 60 * 33.5, UtilMax: 50, MemorySum: 60 * (2 << 30),
						MemoryMax: 2 << 30, PowerSum: 60 * 150.5, PowerMax: 300, TempSum: 60 * 41.25, TempMax: 45}})
			}
			if m >= lastMinute-2 {
				b.Usage = append(b.Usage, ledger.Usage{Node: "n1", Start: start, OwnerKind: ledger.KindHost, OwnerID: "bob",
					GPU: "GPU-b", Sums: ledger.Sums{PresentSeconds: 60, UsedSeconds: 6}})
			}
			b.ContainerUsage = append(b.ContainerUsage, ledger.ContainerUsage{Node: "n1", Start: start,
				ContainerID: "0123456789abcdef0123", CPUSeconds: 90, RAMByteSeconds: 60 << 20})
		}
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func TestReadMinutes(t *testing.T) {
	path := writeLedger(t)
	// The first hour's minutes are in chunks, which SQL on the minute
	// tables would miss.
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var chunks int
	err = db.QueryRow("SELECT count(*) FROM usage_chunk").Scan(&chunks)
	db.Close()
	if err != nil || chunks == 0 {
		t.Fatalf("usage_chunk holds %d chunks (%v); the test wants the first hour compacted", chunks, err)
	}
	m, err := readMinutes(context.Background(), path, t0, t0.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	n := lastMinute - firstMinute
	if got, want := len(m.Usage), 2*n+2; got != want {
		t.Errorf("%d usage minutes, want %d", got, want)
	}
	if got, want := len(m.GPU), 2*n; got != want {
		t.Errorf("%d GPU minutes, want %d", got, want)
	}
	if got, want := len(m.Containers), n; got != want {
		t.Errorf("%d container minutes, want %d", got, want)
	}
	// Each series whole and in time order, as the families want.
	seen := map[int64]bool{}
	for i := range m.Usage {
		r := &m.Usage[i]
		if i > 0 && r.series() != m.Usage[i-1].series() {
			if seen[r.series()] {
				t.Fatalf("usage series %d comes in two runs", r.Series)
			}
		} else if i > 0 && r.Start <= m.Usage[i-1].Start {
			t.Fatalf("usage series %d: minute %d after %d", r.Series, r.Start, m.Usage[i-1].Start)
		}
		seen[r.series()] = true
	}
	var alloc, used int64
	for _, r := range m.Usage {
		alloc += r.AllocatedUS
		used += r.UsedUS
	}
	if want := int64(2 * n * 30e6); alloc != want {
		t.Errorf("allocated %d µs, want %d", alloc, want)
	}
	var wantUsed int64
	for mi := firstMinute; mi < lastMinute; mi++ {
		wantUsed += 2*int64(mi%7)*1e6 + 250000
	}
	wantUsed += 2 * 6e6
	if used != wantUsed {
		t.Errorf("used %d µs, want %d", used, wantUsed)
	}
}

func TestWriteOpenMetrics(t *testing.T) {
	path := writeLedger(t)
	m, err := readMinutes(context.Background(), path, t0, t0.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	conv, err := writeOpenMetrics(&b, m)
	if err != nil {
		t.Fatal(err)
	}
	if conv.Bytes != int64(b.Len()) {
		t.Errorf("counted %d bytes, wrote %d", conv.Bytes, b.Len())
	}
	if !strings.HasSuffix(b.String(), "\n# EOF\n") {
		t.Errorf("does not end in # EOF")
	}
	// Every family once, its TYPE line first.
	types := map[string]int{}
	for _, l := range strings.Split(b.String(), "\n") {
		if f, ok := strings.CutPrefix(l, "# TYPE "); ok {
			types[strings.Fields(f)[0]]++
		}
	}
	if got, want := len(types), len(usageColumns)+len(gpuColumns)+len(containerColumns); got != want || conv.Families != want {
		t.Errorf("%d families (%d counted), want %d", got, conv.Families, want)
	}
	for f, n := range types {
		if n != 1 {
			t.Errorf("family %s has %d TYPE lines", f, n)
		}
	}
	// The allocated series: the container's two, a 0 and then a minute's
	// 30 s each; the host user's, which holds nothing, is all zeros.
	var alloc float64
	first, last := t0.Unix()+firstMinute*60, t0.Unix()+lastMinute*60
	n := lastMinute - firstMinute
	for _, s := range conv.Allocated {
		if s.User == "alice" {
			alloc += s.Value
			if s.Samples != n+1 || s.First != first || s.Last != last {
				t.Errorf("alice's series: %+v, want %d samples from %d to %d", s, n+1, first, last)
			}
		}
	}
	if alloc != float64(2*n*30) {
		t.Errorf("alice's allocated seconds %g, want %d", alloc, 2*n*30)
	}

	golden := filepath.Join("testdata", "ledger.om")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("OpenMetrics differs from %s (go test -update rewrites it); got:\n%s", golden, head(b.String(), 40))
	}
}

func head(s string, lines int) string {
	l := strings.SplitN(s, "\n", lines+1)
	return strings.Join(l[:min(len(l), lines)], "\n")
}

func TestIncrease(t *testing.T) {
	start, end := t0.Unix(), t0.Unix()+86400
	for _, tc := range []struct {
		name string
		s    counterSeries
		want float64
	}{
		// From 0 at the range's start to its end: exact.
		{"whole range", counterSeries{First: start, Last: end, Samples: 1441, Value: 86400}, 86400},
		// Ends an hour early: half a sample interval more at the end,
		// 30 s at full rate.
		{"ends inside", counterSeries{First: start, Last: end - 3600, Samples: 1381, Value: 82800}, 82800 + 30},
		// Starts inside, from 0: the zero point caps the start.
		{"starts inside", counterSeries{First: start + 600, Last: end, Samples: 1431, Value: 85800}, 85800},
		// Half a GPU from minute 10 to 20: 300 s, and 15 s more.
		{"shared, inside", counterSeries{First: start + 600, Last: start + 1200, Samples: 11, Value: 300}, 315},
		{"one sample", counterSeries{First: start, Last: start, Samples: 1, Value: 0}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := increase(tc.s, start, end)
			if err != nil {
				t.Fatal(err)
			}
			if !agree(got, tc.want) {
				t.Errorf("increase = %.9g, want %.9g", got, tc.want)
			}
		})
	}
	if _, err := increase(counterSeries{First: start - 60, Last: end, Samples: 2, Value: 1}, start, end); err == nil {
		t.Error("a series that starts before the range: no error")
	}
}

func TestCompareAnswers(t *testing.T) {
	from, to := t0, t0.Add(24*time.Hour)
	series := []counterSeries{
		{User: "alice", First: from.Unix(), Last: to.Unix(), Samples: 1441, Value: 86400},
		{User: "alice", First: from.Unix(), Last: from.Unix() + 3600, Samples: 61, Value: 1800},
		{User: "bob", First: from.Unix(), Last: from.Unix() + 600, Samples: 11, Value: 600},
	}
	report := []byte(`{"rows": [{"key": "alice", "gpu_hours_allocated": 24.5}, {"key": "bob", "gpu_hours_allocated": 0.16666666666666666},
		{"key": "(unattributed)", "gpu_hours_allocated": 0}]}`)
	prom := map[string]float64{"alice": (86400 + 1800 + 15) / 3600.0, "bob": 630 / 3600.0}
	users, problems, err := compareAnswers(report, prom, series, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Errorf("problems: %q", problems)
	}
	if len(users) != 2 || users[0].User != "alice" || users[0].Series != 2 || users[0].EndInside != 1 || !agree(users[0].Model-users[0].Exact, 15) {
		t.Errorf("users: %+v", users)
	}

	prom["bob"] = 600 / 3600.0 // as if Prometheus were exact: not what 2.42 does
	if _, problems, _ = compareAnswers(report, prom, series, from, to); len(problems) != 1 || !strings.HasPrefix(problems[0], "bob:") {
		t.Errorf("problems: %q, want one about bob", problems)
	}
}
