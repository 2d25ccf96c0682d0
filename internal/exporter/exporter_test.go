package exporter

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
	"github.com/gpumeter/gpumeter/internal/sampler/samplertest"
	"github.com/gpumeter/gpumeter/internal/sim"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// playScenario runs a scenario through the real sampler and meter on a
// virtual clock for the given number of one-second samples, and hands
// each tick to the sinks.
func playScenario(t testing.TB, path string, samples int, sinks ...func(*sampler.Tick)) *sampler.Sampler {
	t.Helper()
	sc, err := sim.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s := samplertest.Scenario(sc, sampler.Config{})
	for i := 0; i < samples; i++ {
		s.Step(context.Background(), sc.Start.Add(time.Duration(i)*time.Second))
		for _, sink := range sinks {
			sink(s.Latest())
		}
	}
	return s
}

// timing metrics depend on how fast this machine is; they are checked
// for presence, not value.
var timing = []string{"gpumeter_source_duration_seconds", "gpumeter_tick_duration_seconds"}

// scrape renders the latest tick and drops the timing families' samples.
func scrape(t *testing.T, s *sampler.Sampler) string {
	t.Helper()
	var keep []string
	for _, line := range strings.SplitAfter(string(Render(nil, s.Latest())), "\n") {
		skip := false
		for _, n := range timing {
			if strings.HasPrefix(line, n+"{") {
				skip = true
			}
		}
		if !skip {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "")
}

// gatherer parses the rendered text with Prometheus' own parser, so the
// tests compare through client_golang's testutil and prove the output is
// valid exposition.
type gatherer struct{ s *sampler.Sampler }

func (g gatherer) Gather() ([]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(Render(nil, g.s.Latest())))
	if err != nil {
		return nil, err
	}
	// Sorted as a registry would.
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		slices.SortFunc(f.Metric, func(a, b *dto.Metric) int {
			return strings.Compare(a.String(), b.String())
		})
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

func TestCollectGolden(t *testing.T) {
	// 61 samples at 1 s: 60 s booked.
	s := playScenario(t, "../../testdata/shared.yaml", 61)
	got := scrape(t, s)
	golden := "testdata/shared.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("scrape differs from %s (run go test ./internal/exporter -update and review the diff):\n%s", golden, lineDiff(string(want), got))
	}
}

// TestCollectValues checks the figures of the golden file that a reader
// can work out by hand, so that a regenerated golden file cannot quietly
// accept wrong numbers.
func TestCollectValues(t *testing.T) {
	s := playScenario(t, "../../testdata/shared.yaml", 61)
	// GPU 0: alice (60 %) and bob (20 %) share it: each is allocated 1/2
	// for 60 s (30 s) and holds it all the time (60 s).
	// GPU 1: carol holds it alone, idle; dave's host process uses 50 %.
	// Power: idle 100 W + 400 W · util: GPU 0 at 80 % = 420 W, GPU 1 at
	// 50 % = 300 W. Energy over 60 s: 25,200 J and 18,000 J.
	// GPU 0: idle part 100 W · 60 s = 6,000 J split 1/2 each; active
	// 19,200 J split 60:20 of util 80 → alice 14,400 + 3,000 = 17,400 J,
	// bob 4,800 + 3,000 = 7,800 J.
	// GPU 1: idle 6,000 J to carol (the holder); active 12,000 J to dave.
	want := `
# HELP gpumeter_container_gpu_allocated_seconds_total GPU time allocated to the container: its share of the GPU times seconds.
# TYPE gpumeter_container_gpu_allocated_seconds_total counter
gpumeter_container_gpu_allocated_seconds_total{Hostname="lab-1",UUID="%[1]s",container="alice-train",container_id="%[3]s",gpu="0",image="pytorch/pytorch:2.4.0-cuda12.1",job_id="",project="llm",team="nlp",user="alice"} 30
gpumeter_container_gpu_allocated_seconds_total{Hostname="lab-1",UUID="%[1]s",container="bob-notebook",container_id="%[4]s",gpu="0",image="jupyter/base-notebook",job_id="",project="",team="vision",user="bob"} 30
gpumeter_container_gpu_allocated_seconds_total{Hostname="lab-1",UUID="%[2]s",container="carol-idle",container_id="%[5]s",gpu="1",image="nvcr.io/nvidia/pytorch:24.10-py3",job_id="",project="",team="",user="carol"} 60
# HELP gpumeter_container_gpu_held_seconds_total Time the container held the GPU, not split among the containers that share it: efficiency is used over held seconds.
# TYPE gpumeter_container_gpu_held_seconds_total counter
gpumeter_container_gpu_held_seconds_total{Hostname="lab-1",UUID="%[1]s",container="alice-train",container_id="%[3]s",gpu="0",image="pytorch/pytorch:2.4.0-cuda12.1",job_id="",project="llm",team="nlp",user="alice"} 60
gpumeter_container_gpu_held_seconds_total{Hostname="lab-1",UUID="%[1]s",container="bob-notebook",container_id="%[4]s",gpu="0",image="jupyter/base-notebook",job_id="",project="",team="vision",user="bob"} 60
gpumeter_container_gpu_held_seconds_total{Hostname="lab-1",UUID="%[2]s",container="carol-idle",container_id="%[5]s",gpu="1",image="nvcr.io/nvidia/pytorch:24.10-py3",job_id="",project="",team="",user="carol"} 60
# HELP gpumeter_container_gpu_energy_joules_total GPU energy attributed to the container.
# TYPE gpumeter_container_gpu_energy_joules_total counter
gpumeter_container_gpu_energy_joules_total{Hostname="lab-1",UUID="%[1]s",container="alice-train",container_id="%[3]s",gpu="0",image="pytorch/pytorch:2.4.0-cuda12.1",job_id="",project="llm",team="nlp",user="alice"} 17400
gpumeter_container_gpu_energy_joules_total{Hostname="lab-1",UUID="%[1]s",container="bob-notebook",container_id="%[4]s",gpu="0",image="jupyter/base-notebook",job_id="",project="",team="vision",user="bob"} 7800
gpumeter_container_gpu_energy_joules_total{Hostname="lab-1",UUID="%[2]s",container="carol-idle",container_id="%[5]s",gpu="1",image="nvcr.io/nvidia/pytorch:24.10-py3",job_id="",project="",team="",user="carol"} 6000
# HELP gpumeter_host_gpu_energy_joules_total GPU energy attributed to a user's processes outside containers.
# TYPE gpumeter_host_gpu_energy_joules_total counter
gpumeter_host_gpu_energy_joules_total{Hostname="lab-1",UUID="%[2]s",gpu="1",user="dave"} 12000
# HELP gpumeter_host_gpu_used_seconds_total SM-weighted GPU time used by a user's processes outside containers.
# TYPE gpumeter_host_gpu_used_seconds_total counter
gpumeter_host_gpu_used_seconds_total{Hostname="lab-1",UUID="%[2]s",gpu="1",user="dave"} 30
# HELP gpumeter_gpu_idle_energy_joules_total Energy booked to no owner: the idle pool.
# TYPE gpumeter_gpu_idle_energy_joules_total counter
gpumeter_gpu_idle_energy_joules_total{Hostname="lab-1",UUID="%[1]s",gpu="0"} 0
gpumeter_gpu_idle_energy_joules_total{Hostname="lab-1",UUID="%[2]s",gpu="1"} 0
`
	short := func(name string) string { return sim.ContainerID("lab-1", name)[:12] }
	want = sprintf(want, sim.GPUUUID("lab-1", 0), sim.GPUUUID("lab-1", 1), short("alice-train"), short("bob-notebook"), short("carol-idle"))
	if err := testutil.GatherAndCompare(gatherer{s}, strings.NewReader(want),
		"gpumeter_container_gpu_allocated_seconds_total", "gpumeter_container_gpu_held_seconds_total", "gpumeter_container_gpu_energy_joules_total",
		"gpumeter_host_gpu_energy_joules_total", "gpumeter_host_gpu_used_seconds_total",
		"gpumeter_gpu_idle_energy_joules_total"); err != nil {
		t.Error(err)
	}
}

func TestRenderBeforeFirstTick(t *testing.T) {
	s := sampler.New(sampler.Config{})
	if out := Render(nil, s.Latest()); len(out) != 0 {
		t.Errorf("rendered %q before the first tick, want nothing", out)
	}
}

// TestRenderValidExposition renders the load scenario and a tick with
// hostile names, and parses both with Prometheus' parser.
func TestRenderValidExposition(t *testing.T) {
	s := playScenario(t, "../../testdata/bench-8gpu-64ctr.yaml", 3)
	fams, err := gatherer{s}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) < 40 {
		t.Errorf("%d families, want at least 40", len(fams))
	}
	// 64 containers × 4 GPUs: 256 rows of each per-container GPU family.
	for _, f := range fams {
		if f.GetName() == "gpumeter_container_gpu_used_seconds_total" && len(f.GetMetric()) != 256 {
			t.Errorf("%s has %d series, want 256", f.GetName(), len(f.GetMetric()))
		}
	}

	tick := s.Latest()
	odd := *tick
	mt := *tick.Tick
	mt.Containers = append([]meter.Container(nil), tick.Containers...)
	mt.Containers[0].Name = "we\"ird\\name\nwith\xffbytes"
	mt.Containers[0].Labels = nil
	odd.Tick = &mt
	p := expfmt.NewTextParser(model.LegacyValidation)
	parsed, err := p.TextToMetricFamilies(bytes.NewReader(Render(nil, &odd)))
	if err != nil {
		t.Fatalf("hostile names break the exposition: %v", err)
	}
	found := false
	for _, m := range parsed["gpumeter_container_running"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "container" && l.GetValue() == "we\"ird\\name\nwith\uFFFDbytes" {
				found = true
			}
		}
	}
	if !found {
		t.Error("the hostile container name did not survive the round trip")
	}
}

func BenchmarkRender(b *testing.B) {
	s := playScenario(b, "../../testdata/bench-8gpu-64ctr.yaml", 3)
	tick := s.Latest()
	buf := Render(nil, tick)
	b.ReportAllocs()
	for b.Loop() {
		buf = Render(buf[:0], tick)
	}
	b.ReportMetric(float64(len(buf)), "bytes/scrape")
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
