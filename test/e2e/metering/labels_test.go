package metering

// A scenario with docker.containers: from_labels against the real Docker
// engine: real containers show the GPU use their gpumeter.sim.* labels
// give on the GPUs they were given, found through their host PIDs as on
// a GPU host, which is how the queue's jobs look busy in tests and demos.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	apiclient "github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/sim"
	"github.com/gpumeter/gpumeter/internal/testenv"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestServePlaysContainerLabels(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.LockGPUs(t)
	image := dockertest.SleeperImage(t, cli)
	const node = "e2e-labels"

	// job asks for GPU 1 by UUID, as the queue passes GPUs.
	job := harness.StartSleeper(t, cli, dockertest.Spec{
		Name:   "labels-job",
		Labels: map[string]string{"gpumeter.user": "alice", sim.UtilLabel: "80", sim.MemoryLabel: "2GiB"},
		Env:    []string{"NVIDIA_VISIBLE_DEVICES=" + sim.GPUUUID(node, 1)},
	})
	if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", job.PID)); err != nil || !strings.Contains(string(cg), job.ID) {
		testenv.SkipUnlessCI(t, "container processes are not visible in /proc (/proc/%d/cgroup: %q, %v)", job.PID, cg, err)
	}
	bad := harness.StartSleeper(t, cli, dockertest.Spec{
		Name:   "labels-bad",
		Labels: map[string]string{"gpumeter.user": "bob", sim.UtilLabel: "lots", sim.MemoryLabel: "1GiB"},
		Env:    []string{"NVIDIA_VISIBLE_DEVICES=0"},
	})
	// own is the scenario's own container: its phases play it, not its labels.
	own := harness.StartSleeper(t, cli, dockertest.Spec{
		Name:   "labels-own",
		Labels: map[string]string{"gpumeter.user": "carol", sim.UtilLabel: "90", sim.MemoryLabel: "9GiB"},
		Env:    []string{"NVIDIA_VISIBLE_DEVICES=2"},
	})

	scenario := filepath.Join(t.TempDir(), "scenario.yaml")
	err := os.WriteFile(scenario, fmt.Appendf(nil, `version: 1
node: %s
duration: 1h
docker:
  containers: from_labels
gpus:
  - count: 3
    memory: 80GiB
    idle_power: 60W
    max_power: 400W
containers:
  - name: own
    pid: %d
    gpus: [2]
    phases: [{at: 0s, util: 10, memory: 1GiB}]
`, node, own.PID), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	a := harness.Serve(t, nil, "--sim", scenario, "--interval", "200ms")
	agent := apiclient.Client{URL: a.URL, Token: a.Token}
	ctx := context.Background()

	series := func(metric string, c harness.Sleeper, user string, gpu int) string {
		return seriesKey(metric, map[string]string{
			"Hostname": node, "container": c.Name, "container_id": c.ID[:12], "image": image,
			"user": user, "team": "", "project": "", "job_id": "",
			"gpu": strconv.Itoa(gpu), "UUID": sim.GPUUUID(node, gpu),
		})
	}
	const (
		util = "gpumeter_container_gpu_utilization_ratio"
		mem  = "gpumeter_container_gpu_memory_bytes"
		used = "gpumeter_container_gpu_used_seconds_total"
	)
	var m map[string]float64
	dockertest.WaitFor(t, harness.Settle, "the labelled container's use on /metrics", func() (bool, string) {
		m = harness.Series(harness.Get(t, a.URL+"/metrics"))
		d := mismatches(m, map[string]float64{
			series(util, job, "alice", 1): 0.8, series(mem, job, "alice", 1): 2 * gib,
			series(util, own, "carol", 2): 0.1, series(mem, own, "carol", 2): 1 * gib,
			series(util, bad, "bob", 0): 0, series(mem, bad, "bob", 0): 0,
		})
		if d == "" && m[series(used, job, "alice", 1)] <= 0 {
			d = fmt.Sprintf("%s = %g, want > 0", series(used, job, "alice", 1), m[series(used, job, "alice", 1)])
		}
		return d == "", d
	})
	if got := m[series(used, bad, "bob", 0)]; got != 0 {
		t.Errorf("%s = %g, want 0 for a container whose label does not parse", series(used, bad, "bob", 0), got)
	}

	gpus, err := agent.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type gpuView struct {
		Util   float64
		Memory uint64
		Power  float64
		Procs  int
	}
	want := []gpuView{
		{0, 0, 60, 0},
		{80, 2 * gib, 60 + 340*0.8, 1},
		{10, 1 * gib, 60 + 340*0.1, 1},
	}
	if len(gpus.GPUs) != len(want) {
		t.Fatalf("/api/v1/gpus lists %d GPUs, want %d", len(gpus.GPUs), len(want))
	}
	for i, g := range gpus.GPUs {
		var got gpuView
		if g.UtilPercent != nil {
			got.Util = *g.UtilPercent
		}
		if g.PowerWatts != nil {
			got.Power = *g.PowerWatts
		}
		got.Memory, got.Procs = g.MemoryUsedBytes, len(g.Processes)
		if got != want[i] {
			t.Errorf("GPU %d: %+v, want %+v", i, got, want[i])
		}
	}

	log := a.Stderr.String()
	if n := strings.Count(log, bad.ID[:12]); n != 1 {
		t.Errorf("the agent's log names the container with a bad label %d times, want once:\n%s", n, log)
	}
	for _, w := range []string{"label=" + sim.UtilLabel, "value=lots"} {
		if !strings.Contains(log, w) {
			t.Errorf("the agent's log does not contain %q:\n%s", w, log)
		}
	}
}
