package exporter

import (
	"bytes"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// queueStats: six jobs on four GPUs, four running and two queued; three
// started after 0.5 s, 2 s and 40 s.
func queueStats() QueueStats {
	return QueueStats{
		Jobs: map[string]int{"queued": 2, "starting": 0, "running": 4, "succeeded": 1,
			"failed": 0, "timeout": 0, "cancelled": 0, "lost": 0},
		GPUsHeld: 3, GPUsFree: 0, GPUsOutside: 1,
		WaitBounds: []float64{1, 10, 60},
		WaitCounts: []uint64{1, 2, 3},
		WaitSum:    42.5, WaitCount: 3,
	}
}

type textGatherer []byte

func (g textGatherer) Gather() ([]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(g))
	if err != nil {
		return nil, err
	}
	out := slices.Collect(maps.Values(fams))
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

func TestRenderQueue(t *testing.T) {
	got := RenderQueue(nil, "lab-1", queueStats())
	want := `
# HELP gpumeter_queue_jobs Jobs of the GPU queue in each state (queued, starting, running and the ended ones).
# TYPE gpumeter_queue_jobs gauge
gpumeter_queue_jobs{Hostname="lab-1",state="cancelled"} 0
gpumeter_queue_jobs{Hostname="lab-1",state="failed"} 0
gpumeter_queue_jobs{Hostname="lab-1",state="lost"} 0
gpumeter_queue_jobs{Hostname="lab-1",state="queued"} 2
gpumeter_queue_jobs{Hostname="lab-1",state="running"} 4
gpumeter_queue_jobs{Hostname="lab-1",state="starting"} 0
gpumeter_queue_jobs{Hostname="lab-1",state="succeeded"} 1
gpumeter_queue_jobs{Hostname="lab-1",state="timeout"} 0
# HELP gpumeter_queue_wait_seconds How long jobs of the GPU queue waited from submission to start.
# TYPE gpumeter_queue_wait_seconds histogram
gpumeter_queue_wait_seconds_bucket{Hostname="lab-1",le="1"} 1
gpumeter_queue_wait_seconds_bucket{Hostname="lab-1",le="10"} 2
gpumeter_queue_wait_seconds_bucket{Hostname="lab-1",le="60"} 3
gpumeter_queue_wait_seconds_bucket{Hostname="lab-1",le="+Inf"} 3
gpumeter_queue_wait_seconds_sum{Hostname="lab-1"} 42.5
gpumeter_queue_wait_seconds_count{Hostname="lab-1"} 3
# HELP gpumeter_queue_gpus GPUs by what the queue may do with them: held by a job, free to start one, or kept out by use outside the queue.
# TYPE gpumeter_queue_gpus gauge
gpumeter_queue_gpus{Hostname="lab-1",state="free"} 0
gpumeter_queue_gpus{Hostname="lab-1",state="held"} 3
gpumeter_queue_gpus{Hostname="lab-1",state="outside"} 1
`
	if err := testutil.GatherAndCompare(textGatherer(got), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// The histogram as Prometheus reads it.
	h := parse(t, string(got))["gpumeter_queue_wait_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 3 || h.GetSampleSum() != 42.5 || len(h.GetBucket()) != 4 || !math.IsInf(h.GetBucket()[3].GetUpperBound(), 1) || h.GetBucket()[1].GetUpperBound() != 10 || h.GetBucket()[1].GetCumulativeCount() != 2 {
		t.Errorf("histogram read back as %v", h)
	}
	if again := RenderQueue(nil, "lab-1", queueStats()); !bytes.Equal(again, got) {
		t.Error("the same figures render different bytes")
	}
}

// TestHandlerQueue: the queue's series are in the scrape while the queue
// is on, and gone when it is off or not configured.
func TestHandlerQueue(t *testing.T) {
	s := playScenario(t, "../../testdata/shared.yaml", 3)
	on := true
	queue := func() (QueueStats, bool) { return queueStats(), on }
	h := NewHandler(s, Config{Version: "test", Queue: queue})
	_, body := get(t, h, "")
	fams := parse(t, body)
	for _, name := range []string{"gpumeter_queue_jobs", "gpumeter_queue_wait_seconds", "gpumeter_queue_gpus", "gpumeter_container_running", "go_goroutines"} {
		if fams[name] == nil {
			t.Errorf("queue on: no %s", name)
		}
	}
	if got := fams["gpumeter_queue_jobs"].GetMetric(); len(got) != 8 {
		t.Errorf("queue on: %d gpumeter_queue_jobs series, want 8 (one per state)", len(got))
	}

	on = false
	_, body = get(t, h, "")
	for _, hh := range []struct {
		name string
		body string
	}{{"queue off", body}, {"no queue", func() string { _, b := get(t, Handler(s, "test", nil), ""); return b }()}} {
		if strings.Contains(hh.body, "gpumeter_queue_") {
			t.Errorf("%s: the scrape has queue series", hh.name)
		}
	}

	// Before the first tick there is nothing of gpumeter's, the queue
	// included.
	on = true
	_, body = get(t, NewHandler(sampler.New(sampler.Config{}), Config{Queue: queue}), "")
	if strings.Contains(body, "gpumeter_queue_") {
		t.Error("the queue's series are served before the first tick")
	}
}

// TestJobIDLabel: a job's container carries its job ID in job_id on its
// own series and on its per-GPU ones; another node's job's container (two
// agents on one engine) carries node/id, so that its series never merge
// with those of this node's job of the same id; other containers have
// job_id="".
func TestJobIDLabel(t *testing.T) {
	s := playScenario(t, "../../testdata/shared.yaml", 3)
	st := *s.Latest()
	mt := *st.Tick
	mt.Containers = slices.Clone(mt.Containers)
	job := &mt.Containers[0]
	job.Labels = maps.Clone(job.Labels)
	job.Labels[container.JobLabel] = "j-000012"
	theirs := &mt.Containers[1]
	theirs.Labels = maps.Clone(theirs.Labels)
	if theirs.Labels == nil {
		theirs.Labels = map[string]string{}
	}
	theirs.Labels[container.JobLabel], theirs.Labels[container.NodeLabel] = "j-000012", "node2"
	st.Tick = &mt

	fams := parse(t, string(Render(nil, &st)))
	for _, name := range []string{"gpumeter_container_running", "gpumeter_container_gpu_used_seconds_total"} {
		jobs := map[string]int{}
		for _, m := range fams[name].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			id, ok := labels["job_id"]
			if !ok {
				t.Errorf("%s%v has no job_id", name, labels)
			}
			switch want := ""; labels["container"] {
			case job.Name, theirs.Name:
				want = map[string]string{job.Name: "j-000012", theirs.Name: "node2/j-000012"}[labels["container"]]
				if id != want {
					t.Errorf("%s of %s: job_id=%q, want %q", name, labels["container"], id, want)
				}
			default:
				if id != want {
					t.Errorf("%s of %s: job_id=%q, want \"\"", name, labels["container"], id)
				}
			}
			jobs[id]++
		}
		if jobs["j-000012"] == 0 || jobs["node2/j-000012"] == 0 {
			t.Errorf("%s: no series with this node's job's ID or node2's: %v", name, jobs)
		}
	}

	// A container the inventory does not know has no job.
	mt.Containers = nil
	mt.Usage = []meter.Usage{{Owner: container.Owner{Kind: container.OwnerContainer, ID: job.ID}, GPU: 0, UUID: "GPU-x"}}
	if out := string(Render(nil, &st)); !strings.Contains(out, `job_id="",project="",team="",user="unresolved"`) {
		t.Errorf("an unresolved container's series do not have job_id=\"\":\n%s", out)
	}
}

func TestRenderQueueStartSteps(t *testing.T) {
	q := queueStats()
	q.StartSteps = []StepHistogram{{Step: "start_call", Bounds: []float64{0.1, 1}, Counts: []uint64{1, 3}, Sum: 1.5, Count: 4}}
	got := string(RenderQueue(nil, "lab-1", q))
	for _, want := range []string{
		"# TYPE gpumeter_queue_start_step_seconds histogram\n",
		`gpumeter_queue_start_step_seconds_bucket{Hostname="lab-1",step="start_call",le="0.1"} 1` + "\n",
		`gpumeter_queue_start_step_seconds_bucket{Hostname="lab-1",step="start_call",le="+Inf"} 4` + "\n",
		`gpumeter_queue_start_step_seconds_sum{Hostname="lab-1",step="start_call"} 1.5` + "\n",
		`gpumeter_queue_start_step_seconds_count{Hostname="lab-1",step="start_call"} 4` + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
}

// TestRenderFleet: a fleet agent serves whether it leads, its passes and,
// as the leader, the nodes by state; a single node serves none of them.
func TestRenderFleet(t *testing.T) {
	if got := string(RenderQueue(nil, "lab-1", queueStats())); strings.Contains(got, "gpumeter_fleet_") {
		t.Errorf("one node serves fleet series:\n%s", got)
	}
	q := queueStats()
	q.Fleet = &FleetStats{Leader: true, Nodes: map[string]int{"up": 2, "lost": 1}, PassSum: 0.25, PassCount: 10}
	fams := parse(t, string(RenderQueue(nil, "lab-1", q)))
	if v := fams["gpumeter_fleet_scheduler_leader"].GetMetric()[0].GetGauge().GetValue(); v != 1 {
		t.Errorf("leader: gpumeter_fleet_scheduler_leader %v, want 1", v)
	}
	nodes := map[string]float64{}
	for _, m := range fams["gpumeter_fleet_nodes"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "state" {
				nodes[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	if nodes["up"] != 2 || nodes["lost"] != 1 || nodes["draining"] != 0 || len(nodes) != 3 {
		t.Errorf("gpumeter_fleet_nodes by state: %v, want up 2, lost 1, draining 0", nodes)
	}
	if s := fams["gpumeter_fleet_pass_seconds"].GetMetric()[0].GetSummary(); s.GetSampleCount() != 10 || s.GetSampleSum() != 0.25 {
		t.Errorf("gpumeter_fleet_pass_seconds: %v, want 10 passes, 0.25 s", s)
	}
	q.Fleet.Leader = false
	fams = parse(t, string(RenderQueue(nil, "lab-1", q)))
	if fams["gpumeter_fleet_nodes"] != nil || fams["gpumeter_fleet_scheduler_leader"].GetMetric()[0].GetGauge().GetValue() != 0 {
		t.Error("a follower serves the nodes, or says it leads")
	}
}
