package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/testenv"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestQueueJobForksPastItsPIDLimit: a job that forks a thousand children
// under a PID limit of 64 is held to it by the kernel's pids cgroup, the
// fork that would pass it fails inside the job, and the agent's API
// answers all the while. A request for more than queue.max_pids is
// refused, by the API and by the command line's --pids.
func TestQueueJobForksPastItsPIDLimit(t *testing.T) {
	t.Parallel()
	const maxPids, asked, forks = 256, 64, 1000
	h := newHost(t, fmt.Sprintf("  max_pids: %d\n  max_open_files: 1024\n", maxPids))
	a := h.start(t)
	probe := dockertest.ProbeImage(t, h.cli)

	e := a.refused(t, h.alice, map[string]any{"gpus": 1, "time_limit": "5m", "image": probe, "pids": maxPids + 1, "command": []string{"fork", "1"}},
		apitype.CodeRefused, "too_big")
	if want := fmt.Sprintf("queue.max_pids (%d)", maxPids); !strings.Contains(e.Message, want) {
		t.Errorf("refusal %q does not name %s", e.Message, want)
	}
	_, errOut, code := a.userCLI(t, h.alice, "submit", "--gpus", "1", "--time-limit", "5m", "--image", probe,
		"--pids", strconv.Itoa(maxPids+1), "--", "fork", "1")
	if code == 0 || !strings.Contains(errOut, "--pids: refused (too_big)") {
		t.Errorf("gpumeter submit --pids %d: exit %d, stderr %q; want a refusal naming --pids", maxPids+1, code, errOut)
	}

	job := a.submit(t, h.alice, apitype.JobRequest{GPUs: 1, TimeLimit: "10m", Image: probe, Pids: asked,
		Command: []string{"fork", strconv.Itoa(forks)}})
	j := a.await(t, job.ID, 2*time.Minute, "running")
	got := dockertest.Inspect(t, h.cli, j.ContainerID)
	if hc := got.HostConfig; hc.PidsLimit == nil || *hc.PidsLimit != asked || len(hc.Ulimits) != 1 ||
		hc.Ulimits[0].Name != "nofile" || hc.Ulimits[0].Soft != 1024 || hc.Ulimits[0].Hard != 1024 {
		t.Errorf("engine's limits: pids %v, ulimits %v; want %d and nofile 1024", hc.PidsLimit, hc.Ulimits, asked)
	}
	cg := pidsCgroup(t, j.ContainerID)
	if max := strings.TrimSpace(readFile(t, filepath.Join(cg, "pids.max"))); max != strconv.Itoa(asked) {
		t.Errorf("%s/pids.max = %q, want %d", cg, max, asked)
	}

	// While the job forks, the agent answers and the job never holds
	// more tasks than its limit.
	most, answered := 0, 0
	var out string
	dockertest.WaitFor(t, 5*time.Minute, "the probe to finish forking", func() (bool, string) {
		if n := tasks(t, cg); n > most {
			most = n
		}
		if a.job(t, job.ID).State == "running" {
			answered++
		}
		out = logs(t, h.cli, j.ContainerID)
		return strings.Contains(out, dockertest.ProbeForked), fmt.Sprintf("%d tasks at most, output %q", most, out)
	})
	if n := tasks(t, cg); n > most {
		most = n
	}
	current, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(cg, "pids.current"))))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probe: %s; tasks in the job's pids cgroup: %d at most, pids.current %d; the API answered %d times meanwhile", strings.TrimSpace(out[strings.Index(out, dockertest.ProbeForked):]), most, current, answered)
	if most > asked || current > asked {
		t.Errorf("the job held %d tasks (pids.current %d), over its limit %d", most, current, asked)
	}
	var started, tried int
	line := out[strings.Index(out, dockertest.ProbeForked):]
	if _, err := fmt.Sscanf(line, dockertest.ProbeForked+" %d of %d:", &started, &tried); err != nil {
		t.Fatalf("probe output %q: %v", out, err)
	}
	if _, why, _ := strings.Cut(line, ": "); started >= forks || !strings.Contains(why, "resource temporarily unavailable") {
		t.Errorf("probe started %d of %d children (%s); want the limit to stop it with EAGAIN", started, tried, why)
	}
	if answered == 0 {
		t.Error("the API never answered while the job forked")
	}
	if st := a.job(t, job.ID); st.State != "running" {
		t.Errorf("job %s after forking: %s %s, want running", job.ID, st.State, st.ReasonText)
	}
}

// pidsCgroup is the directory of container id's pids cgroup on this
// host: cgroup v1 with the cgroupfs or systemd driver, or v2.
func pidsCgroup(t *testing.T, id string) string {
	t.Helper()
	candidates := []string{
		"/sys/fs/cgroup/pids/docker/" + id,
		"/sys/fs/cgroup/pids/system.slice/docker-" + id + ".scope",
		"/sys/fs/cgroup/system.slice/docker-" + id + ".scope",
		"/sys/fs/cgroup/docker/" + id,
	}
	for _, d := range candidates {
		if _, err := os.Stat(filepath.Join(d, "pids.max")); err == nil {
			return d
		}
	}
	testenv.SkipUnlessCI(t, "container %.12s has no pids cgroup at %s: the engine runs elsewhere", id, strings.Join(candidates, ", "))
	return ""
}

// tasks counts the tasks (threads) in the pids cgroup dir: cgroup v1's
// tasks file, or v2's cgroup.threads.
func tasks(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "tasks"))
	if errors.Is(err, os.ErrNotExist) {
		b, err = os.ReadFile(filepath.Join(dir, "cgroup.threads"))
	}
	if err != nil {
		t.Fatalf("tasks of %s: %v", dir, err)
	}
	return bytes.Count(b, []byte("\n"))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// logs is what container id has printed so far.
func logs(t *testing.T, cli *client.Client, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("logs of %.12s: %v", id, err)
	}
	defer rc.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(rc)
	return b.String()
}

// TestQueueRefusesANetworkItDidNotMake: a network named as the node's
// isolated one that the agent did not make keeps the agent from starting,
// with the command that removes it; jobs never join a network someone
// else controls.
func TestQueueRefusesANetworkItDidNotMake(t *testing.T) {
	t.Parallel()
	h := newHost(t, "")
	name := spec.NetworkName(h.node)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := h.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge", Labels: map[string]string{dockertest.Label: "1"}}); err != nil {
		t.Fatal(err)
	}
	// newHost's clean-up removes only a network labelled as the node's.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := h.cli.NetworkRemove(ctx, name, client.NetworkRemoveOptions{}); err != nil {
			t.Errorf("remove network %s: %v", name, err)
		}
	})
	_, errOut, code := harness.RunCLI(t, []string{"GPUMETER_DATA_DIR=" + h.dataDir, harness.AdminEnv()},
		"serve", "--listen", "127.0.0.1:0", "--config", h.config, "--sim", filepath.Join(h.dir, "scenario.yaml"))
	if code == 0 || !strings.Contains(errOut, "queue.network isolated: network "+name+" exists but gpumeter did not create it") ||
		!strings.Contains(errOut, "docker network rm "+name) {
		t.Errorf("serve over a foreign %s: exit %d, stderr %q; want a refusal naming the fix", name, code, errOut)
	}
}
