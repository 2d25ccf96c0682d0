package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/dockertest"
)

// memRequest is a job asking for memory on one shared GPU, whose sim
// process holds simMemory ("" for none).
func (h *host) memRequest(memory, simMemory string) apitype.JobRequest {
	r := apitype.JobRequest{GPUMemory: memory, TimeLimit: "5m", Image: h.image, Command: long}
	if simMemory != "" {
		r.Labels = []string{"gpumeter.sim.memory=" + simMemory, "gpumeter.sim.util=30"}
	}
	return r
}

// TestQueueMemoryJobs: on GPU 0, shared (80 GiB, 0.9 of it usable: 72
// GiB), a job whose process holds more than it declared (12 GiB of 10,
// its labels set with submit --label) is warned and, after the grace,
// stopped; then two jobs of 30 GiB share GPU 0 and a third, which would
// bring it to 90 GiB, waits with resources while GPUs 1 to 3, exclusive,
// stay free.
func TestQueueMemoryJobs(t *testing.T) {
	t.Parallel()
	h := newHost(t, fairQueue(`  shared_gpus: [0]
  memory_overrun_grace: 3s
`))
	a := h.start(t)
	gpu0 := a.gpuUUID(t, 0)

	out, errOut, code := h.rootCLI(t, "submit", "--as", "alice", "--gpu-memory", "10GiB", "--time-limit", "5m", "--image", h.image,
		"--label", "gpumeter.sim.memory=12GiB", "--label", "gpumeter.sim.util=50", "--", "exit-after", "10m", "0")
	over := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(over, "j-") {
		t.Fatalf("gpumeter submit --gpu-memory 10GiB --label ...: exit %d: %s%s", code, out, errOut)
	}
	j := a.await(t, over, 30*time.Second, "running")
	if len(j.GPUs) != 1 || j.GPUs[0] != gpu0 || j.GPUMemoryRequested != 10<<30 {
		t.Errorf("%s runs on %v asking %d bytes, want GPU 0 (%s) and 10 GiB", over, j.GPUs, j.GPUMemoryRequested, gpu0)
	}
	dockertest.WaitFor(t, 15*time.Second, over+" warned of its memory", func() (bool, string) {
		j = a.job(t, over)
		return j.State == "running" && strings.Contains(j.ReasonText, "more than the 10GiB it declared"), j.State + ": " + j.ReasonText
	})
	t.Logf("%s warned: %s", over, j.ReasonText)
	if n := h.auditCount(t, "jobs.memory_warn", over); n != 1 {
		t.Errorf("%d jobs.memory_warn audit rows for %s, want 1", n, over)
	}
	j = a.await(t, over, 30*time.Second, "failed")
	if j.Reason != "memory_overrun" || !strings.Contains(j.ReasonText, "queue.memory_overrun_grace") {
		t.Errorf("%s: failed %s %q, want memory_overrun naming the grace", over, j.Reason, j.ReasonText)
	}
	if d := j.EndedAt.Sub(*j.StartedAt); d < 3*time.Second {
		t.Errorf("%s stopped %s after its start, before the 3s grace", over, d)
	}
	if n := h.auditCount(t, "jobs.memory_overrun", over); n != 1 {
		t.Errorf("%d jobs.memory_overrun audit rows for %s, want 1", n, over)
	}

	// Two of 30 GiB fit in GPU 0's 72 GiB; a third does not.
	m1 := a.submit(t, h.alice, h.memRequest("30GiB", "20GiB"))
	m2 := a.submit(t, h.bob, h.memRequest("30GiB", ""))
	for _, id := range []string{m1.ID, m2.ID} {
		if j := a.await(t, id, 30*time.Second, "running"); len(j.GPUs) != 1 || j.GPUs[0] != gpu0 {
			t.Errorf("%s runs on %v, want the shared GPU 0 (%s)", id, j.GPUs, gpu0)
		}
	}
	m3 := a.submit(t, h.alice, h.memRequest("30GiB", ""))
	// The pass after the submit writes why it waits (until then the
	// reason is resources too, with "waiting for the scheduler's first
	// look").
	dockertest.WaitFor(t, 10*time.Second, m3.ID+" queued for resources, for memory on a shared GPU", func() (bool, string) {
		j = a.job(t, m3.ID)
		return j.State == "queued" && j.Reason == "resources" && strings.Contains(j.ReasonText, "on a shared GPU"), j.State + " " + j.Reason + ": " + j.ReasonText
	})
	t.Logf("%s waits: %s", m3.ID, j.ReasonText)
	time.Sleep(time.Second) // GPUs 1 to 3 are free and exclusive: a pass must not use them
	if j = a.job(t, m3.ID); j.State != "queued" || len(j.GPUs) != 0 {
		t.Errorf("%s: %s on %v, want queued: the exclusive GPUs serve no memory job", m3.ID, j.State, j.GPUs)
	}
	// Memory over the shared GPU's usable 72 GiB is refused at submit.
	a.refused(t, h.alice, h.memRequest("73GiB", ""), apitype.CodeRefused, "too_big")

	// One ends: the third fits.
	mustPost(t, a, m2.ID, "cancel", h.admin)
	if j := a.await(t, m3.ID, 30*time.Second, "running"); len(j.GPUs) != 1 || j.GPUs[0] != gpu0 {
		t.Errorf("%s runs on %v, want GPU 0", m3.ID, j.GPUs)
	}
}
