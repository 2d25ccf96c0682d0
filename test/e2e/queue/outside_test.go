package queue

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/dockertest"
)

// TestQueueOutsideContainer: a container started by hand on GPU 2,
// outside the queue, keeps GPU 2 out of it: no job is placed there, the
// fourth of four one-GPU jobs waits with outside_use naming the
// container, and once the container is gone the job gets GPU 2.
func TestQueueOutsideContainer(t *testing.T) {
	t.Parallel()
	h := newHost(t, "")
	a := h.start(t)
	gpu2 := a.gpuUUID(t, 2)
	outside, name := dockertest.Container(t, h.cli, dockertest.Spec{
		Name:   "notebook",
		Labels: map[string]string{"gpumeter.user": "bob", "gpumeter.sim.util": "40", "gpumeter.sim.memory": "20GiB"},
		Env:    []string{"NVIDIA_VISIBLE_DEVICES=2"},
		Cmd:    []string{"exit-after", "10m", "0"},
	})
	dockertest.WaitFor(t, 30*time.Second, "GPU 2 counted outside the queue", func() (bool, string) {
		g := a.queueGPUs(t)
		return g["outside"] == 1, fmtGPUs(g)
	})

	var ids []string
	for range 4 {
		ids = append(ids, a.submit(t, h.alice, h.request(1, "5m", long...)).ID)
	}
	for _, id := range ids[:3] {
		if j := a.await(t, id, 30*time.Second, "running"); slices.Contains(j.GPUs, gpu2) {
			t.Errorf("%s was placed on GPU 2 (%s), which %s holds", id, gpu2, name)
		}
	}
	var j apitype.Job
	dockertest.WaitFor(t, 10*time.Second, ids[3]+" queued for outside_use, naming "+name, func() (bool, string) {
		j = a.job(t, ids[3])
		return j.State == "queued" && j.Reason == "outside_use" && strings.Contains(j.ReasonText, name), j.State + " " + j.Reason + ": " + j.ReasonText
	})
	t.Logf("%s waits: %s", ids[3], j.ReasonText)
	dockertest.WaitFor(t, 10*time.Second, "gpumeter_queue_gpus held 3, free 0, outside 1", func() (bool, string) {
		g := a.queueGPUs(t)
		return g["held"] == 3 && g["free"] == 0 && g["outside"] == 1, fmtGPUs(g)
	})

	// The person is done: GPU 2 is the queue's again.
	dockertest.Remove(t, h.cli, outside)
	if j := a.await(t, ids[3], 30*time.Second, "running"); !slices.Equal(j.GPUs, []string{gpu2}) {
		t.Errorf("%s runs on %v once GPU 2 was given back, want [%s]", ids[3], j.GPUs, gpu2)
	}
}

var uuidRE = regexp.MustCompile(`UUID="([^"]+)"`)

// gpuUUID is the UUID of GPU index i of the agent's scenario, from the
// labels of its metrics.
func (a *agent) gpuUUID(t *testing.T, i int) string {
	t.Helper()
	want := `gpu="` + string(rune('0'+i)) + `"`
	for k := range a.Scrape(t) {
		if m := uuidRE.FindStringSubmatch(k); m != nil && strings.Contains(k, want) && !strings.Contains(k, "container=") {
			return m[1]
		}
	}
	t.Fatalf("no series of /metrics names GPU %d with its UUID", i)
	return ""
}
