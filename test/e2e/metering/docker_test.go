package metering

// The agent against the real Docker engine: real containers play the GPU
// processes of a scenario through their host PIDs, so that serve finds
// their owners through /proc/<pid>/cgroup and the Engine API as it does on
// a GPU host, and the engine's socket is cut and restored under it.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	apiclient "github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/testenv"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

const gib = 1 << 30

// seriesKey renders a series the way harness.Series keys it: the exposition
// writes labels sorted by name.
func seriesKey(name string, labels map[string]string) string {
	var b strings.Builder
	b.WriteString(name + "{")
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, labels[k])
	}
	b.WriteString("}")
	return b.String()
}

// mismatches lists how got differs from want, with the series of the same
// name for a missing one, so that a wrong label shows.
func mismatches(got, want map[string]float64) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[k]
		switch {
		case !ok:
			name, _, _ := strings.Cut(k, "{")
			var same []string
			for s := range got {
				if strings.HasPrefix(s, name+"{") {
					same = append(same, s)
				}
			}
			slices.Sort(same)
			out = append(out, fmt.Sprintf("missing %s; present: %v", k, same))
		case g != want[k]:
			out = append(out, fmt.Sprintf("%s = %g, want %g", k, g, want[k]))
		}
	}
	return strings.Join(out, "\n")
}

func TestServeAgainstDocker(t *testing.T) {
	cli := dockertest.Client(t)
	engine := dockertest.EngineSocket(cli)
	if engine == "" {
		testenv.SkipUnlessCI(t, "the engine at %s is not a Unix socket, which the proxy needs", cli.DaemonHost())
	}
	// The agent counts every container on the engine that requests a GPU;
	// no other test's may run meanwhile.
	dockertest.LockGPUs(t)
	image := dockertest.SleeperImage(t, cli)
	const node = "e2e-docker"
	begin := time.Now()
	step := func(what string) { t.Logf("%5.1fs %s", time.Since(begin).Seconds(), what) }

	alice := harness.StartSleeper(t, cli, dockertest.Spec{
		Name:   "alice",
		Labels: map[string]string{"gpumeter.user": "alice", "gpumeter.team": "nlp", "gpumeter.project": "llm"},
		Env:    []string{"NVIDIA_VISIBLE_DEVICES=0"},
	})
	bob := harness.StartSleeper(t, cli, dockertest.Spec{
		Name:   "bob",
		Labels: map[string]string{"gpumeter.user": "bob", "gpumeter.team": "vision"},
		Env:    []string{"NVIDIA_VISIBLE_DEVICES=0"},
	})
	// The agent finds a container's processes in this machine's /proc,
	// which an engine in a VM or another PID namespace hides.
	if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", alice.PID)); err != nil || !strings.Contains(string(cg), alice.ID) {
		testenv.SkipUnlessCI(t, "container processes are not visible in /proc (/proc/%d/cgroup: %q, %v)", alice.PID, cg, err)
	}
	// No owner label: the owner is Config.User's uid, named by the
	// password file the agent is given.
	carol := harness.StartSleeper(t, cli, dockertest.Spec{Name: "carol", User: "4242", Env: []string{"NVIDIA_VISIBLE_DEVICES=1"}})

	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	if err := os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/sh\ncarol:x:4242:4242::/home/carol:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	scenario := filepath.Join(dir, "scenario.yaml")
	err := os.WriteFile(scenario, fmt.Appendf(nil, `version: 1
node: %s
duration: 1h
gpus:
  - count: 2
    model: NVIDIA A100-SXM4-80GB
    memory: 80GiB
    idle_power: 60W
    max_power: 400W
containers:
  - name: alice
    pid: %d
    gpus: [0]
    phases: [{at: 0s, util: 60, memory: 10GiB}]
  - name: bob
    pid: %d
    gpus: [0]
    phases: [{at: 0s, util: 20, memory: 4GiB}]
  - name: carol
    pid: %d
    gpus: [1]
    phases: [{at: 0s, util: 0, memory: 1GiB}]
`, node, alice.PID, bob.PID, carol.PID), 0o644)
	if err != nil {
		t.Fatal(err)
	}

	step("containers started")
	proxy := dockertest.NewSocketProxy(t, engine)
	a := harness.Serve(t, nil, "--sim", scenario, "--interval", "200ms",
		"--docker-host", "unix://"+proxy.Path(), "--host-passwd-file", passwd)
	agent := apiclient.Client{URL: a.URL, Token: a.Token}
	ctx := context.Background()

	gpus, err := agent.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus.GPUs) != 2 {
		t.Fatalf("/api/v1/gpus lists %d GPUs, want 2", len(gpus.GPUs))
	}
	uuid := []string{gpus.GPUs[0].UUID, gpus.GPUs[1].UUID}

	// labels are a container's series labels; with a GPU, those of its
	// series for that GPU.
	labels := func(c harness.Sleeper, user, team, project string, gpu ...int) map[string]string {
		l := map[string]string{
			"Hostname": node, "container": c.Name, "container_id": c.ID[:12], "image": image,
			"user": user, "team": team, "project": project, "job_id": "",
		}
		for _, g := range gpu {
			l["gpu"], l["UUID"] = strconv.Itoa(g), uuid[g]
		}
		return l
	}
	perGPU := func(metric string, gpu int) string {
		return seriesKey(metric, map[string]string{"Hostname": node, "UUID": uuid[gpu], "gpu": strconv.Itoa(gpu)})
	}
	perNode := func(metric string) string { return seriesKey(metric, map[string]string{"Hostname": node}) }
	const (
		share = "gpumeter_container_gpu_allocation_share"
		util  = "gpumeter_container_gpu_utilization_ratio"
		mem   = "gpumeter_container_gpu_memory_bytes"
		alloc = "gpumeter_container_gpu_allocated_seconds_total"
	)
	dockerUp := seriesKey("gpumeter_source_up", map[string]string{"Hostname": node, "source": "docker"})
	ticks := perNode("gpumeter_ticks_total")
	aliceOn0 := func(metric string) string { return seriesKey(metric, labels(alice, "alice", "nlp", "llm", 0)) }
	bobOn0 := func(metric string) string { return seriesKey(metric, labels(bob, "bob", "vision", "", 0)) }
	carolOn1 := func(metric string) string { return seriesKey(metric, labels(carol, "carol", "", "", 1)) }

	// Whatever else happens, alice is never booked bob's process.
	never := map[string]float64{aliceOn0(mem): 10 * gib, aliceOn0(util): 0.6}
	scrape := func() map[string]float64 {
		t.Helper()
		m := harness.Series(harness.Get(t, a.URL+"/metrics"))
		for k, want := range never {
			if got, ok := m[k]; ok && got != want {
				t.Errorf("%s = %g, want %g at every scrape", k, got, want)
				delete(never, k)
			}
		}
		return m
	}
	waitSeries := func(what string, want map[string]float64) map[string]float64 {
		t.Helper()
		var m map[string]float64
		dockertest.WaitFor(t, harness.Settle, what, func() (bool, string) {
			m = scrape()
			d := mismatches(m, want)
			return d == "", d
		})
		return m
	}
	containers := func() map[string]apitype.Container {
		t.Helper()
		resp, err := agent.Containers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]apitype.Container{}
		for _, c := range resp.Containers {
			out[c.ID] = c
		}
		return out
	}

	step("serving")
	// 1. The shares, SM and memory of each container, under its Docker
	// name, ID, image and owner.
	waitSeries("the three containers on /metrics", map[string]float64{
		aliceOn0(share): 0.5, aliceOn0(util): 0.6, aliceOn0(mem): 10 * gib,
		bobOn0(share): 0.5, bobOn0(util): 0.2, bobOn0(mem): 4 * gib,
		carolOn1(share): 1, carolOn1(util): 0, carolOn1(mem): 1 * gib,
		perGPU("gpumeter_gpu_holders", 0):        2,
		perGPU("gpumeter_gpu_holders", 1):        1,
		perNode("gpumeter_unresolved_processes"): 0,
		dockerUp:                                 1,
	})

	step("shares on /metrics")
	psWant := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^` + alice.ID[:12] + `\s+` + regexp.QuoteMeta(alice.Name) + `\s+alice\s+nlp\s+0\s+0\.50\s+60%\s+10\.0 GiB\s`),
		regexp.MustCompile(`(?m)^` + bob.ID[:12] + `\s+` + regexp.QuoteMeta(bob.Name) + `\s+bob\s+vision\s+0\s+0\.50\s+20%\s+4\.0 GiB\s`),
		regexp.MustCompile(`(?m)^` + carol.ID[:12] + `\s+` + regexp.QuoteMeta(carol.Name) + `\s+carol\s+-\s+1\s+1\.00\s+0%\s+1\.0 GiB\s`),
	}
	dockertest.WaitFor(t, harness.Settle, "gpumeter ps to show the three containers", func() (bool, string) {
		out, stderr, code := harness.RunCLI(t, a.CLIEnv(), "ps", "--url", a.URL)
		if code != 0 {
			return false, fmt.Sprintf("exit %d: %s", code, stderr)
		}
		for _, re := range psWant {
			if !re.MatchString(out) {
				return false, fmt.Sprintf("no line matches %s:\n%s", re, out)
			}
		}
		return true, ""
	})

	type shareView struct {
		GPU       int
		Share, SM float64
		Memory    uint64
		Processes int
	}
	type ctrView struct {
		Name, Image, User, Team, Project, GPURequest string
		Running, Resolved                            bool
		GPUs                                         []shareView
	}
	view := func(c apitype.Container) ctrView {
		v := ctrView{Name: c.Name, Image: c.Image, User: c.User, Team: c.Team, Project: c.Project, GPURequest: c.GPURequest, Running: c.Running, Resolved: c.Resolved}
		for _, s := range c.GPUs {
			v.GPUs = append(v.GPUs, shareView{s.GPU, s.Share, s.SMPercent, s.MemoryBytes, s.Processes})
		}
		return v
	}
	listed := containers()
	for _, w := range []struct {
		c    harness.Sleeper
		want ctrView
	}{
		{alice, ctrView{alice.Name, image, "alice", "nlp", "llm", "0", true, true, []shareView{{0, 0.5, 60, 10 * gib, 1}}}},
		{bob, ctrView{bob.Name, image, "bob", "vision", "", "0", true, true, []shareView{{0, 0.5, 20, 4 * gib, 1}}}},
		{carol, ctrView{carol.Name, image, "carol", "", "", "1", true, true, []shareView{{1, 1, 0, 1 * gib, 1}}}},
	} {
		c, ok := listed[w.c.ID]
		if !ok {
			t.Errorf("/api/v1/containers does not list %s", w.c.Name)
			continue
		}
		if diff := cmp.Diff(w.want, view(c)); diff != "" {
			t.Errorf("/api/v1/containers entry of %s (-want +got):\n%s", w.c.Name, diff)
		}
	}

	step("ps and API checked")
	// 2. bob stops. His process is gone but the scenario still shows one on
	// GPU 0: it is nobody's, never alice's, and alice holds GPU 0 alone.
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	grace := 10
	_, err = cli.ContainerStop(stopCtx, bob.ID, client.ContainerStopOptions{Timeout: &grace})
	cancel()
	if err != nil {
		t.Fatalf("stop bob: %v", err)
	}
	m := waitSeries("alice alone on GPU 0 after bob stopped", map[string]float64{
		aliceOn0(share): 1, aliceOn0(util): 0.6, aliceOn0(mem): 10 * gib,
		bobOn0(share): 0, bobOn0(util): 0, bobOn0(mem): 0,
		carolOn1(share): 1,
		seriesKey("gpumeter_container_running", labels(alice, "alice", "nlp", "llm")): 1,
		seriesKey("gpumeter_container_running", labels(bob, "bob", "vision", "")):     0,
		perGPU("gpumeter_gpu_holders", 0):                                             1,
		perGPU("gpumeter_unresolved_gpu_memory_bytes", 0):                             4 * gib,
		perNode("gpumeter_unresolved_processes"):                                      1,
		dockerUp:                                                                      1,
	})
	step("bob stopped and settled")
	bob1, alice1, ticks1 := m[bobOn0(alloc)], m[aliceOn0(alloc)], m[ticks]
	if bob1 <= 0 {
		t.Errorf("%s = %g after bob ran, want > 0", bobOn0(alloc), bob1)
	}
	dockertest.WaitFor(t, harness.Settle, "five more ticks", func() (bool, string) {
		m = scrape()
		return m[ticks] >= ticks1+5, fmt.Sprintf("%g ticks, from %g", m[ticks], ticks1)
	})
	if got := m[bobOn0(alloc)]; got != bob1 {
		t.Errorf("bob's allocated seconds went from %g to %g after he stopped, want no change", bob1, got)
	}
	if got := m[aliceOn0(alloc)]; got <= alice1 {
		t.Errorf("alice's allocated seconds went from %g to %g, want them to grow", alice1, got)
	}
	resp, err := agent.Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var unresolved []shareView
	for _, s := range resp.Unresolved {
		unresolved = append(unresolved, shareView{s.GPU, s.Share, s.SMPercent, s.MemoryBytes, s.Processes})
	}
	if diff := cmp.Diff([]shareView{{0, 0, 20, 4 * gib, 1}}, unresolved); diff != "" {
		t.Errorf("/api/v1/containers unresolved (-want +got):\n%s", diff)
	}
	i := slices.IndexFunc(resp.Containers, func(c apitype.Container) bool { return c.ID == bob.ID })
	if i < 0 {
		t.Errorf("/api/v1/containers does not list bob after he stopped")
	} else if c := resp.Containers[i]; c.Running || !c.Resolved || c.ExitCode == nil || *c.ExitCode != dockertest.SleeperExitCode {
		t.Errorf("bob after stop: running %v, resolved %v, exit code %v; want stopped, resolved, exit code %d", c.Running, c.Resolved, c.ExitCode, dockertest.SleeperExitCode)
	}
	if gpus, err = agent.GPUs(ctx); err != nil {
		t.Fatal(err)
	}
	owners := map[uint32]string{}
	for _, p := range gpus.GPUs[0].Processes {
		owners[p.PID] = p.OwnerKind + ":" + p.Owner
	}
	if want := map[uint32]string{uint32(alice.PID): "container:" + alice.ID, uint32(bob.PID): "none:"}; !maps.Equal(owners, want) {
		t.Errorf("GPU 0 process owners = %v, want %v", owners, want)
	}

	step("bob checked")
	// 3. The engine goes away: sampling goes on over the cached inventory.
	proxy.Stop()
	m = waitSeries("the docker source down", map[string]float64{
		dockerUp:        0,
		aliceOn0(share): 1, aliceOn0(mem): 10 * gib,
		carolOn1(share): 1, carolOn1(mem): 1 * gib,
	})
	step("docker source down")
	if gpus, err = agent.GPUs(ctx); err != nil {
		t.Fatal(err)
	}
	ticks1, time1 := m[ticks], gpus.Time
	dockertest.WaitFor(t, harness.Settle, "sampling to go on while cut", func() (bool, string) {
		m = scrape()
		g, err := agent.GPUs(ctx)
		if err != nil {
			return false, err.Error()
		}
		return m[ticks] >= ticks1+3 && g.Time.After(time1), fmt.Sprintf("%g ticks (from %g), GPUs at %v (from %v)", m[ticks], ticks1, g.Time, time1)
	})

	step("sampling goes on")
	// A container started meanwhile is found once the engine is back.
	dave := harness.StartSleeper(t, cli, dockertest.Spec{Name: "dave", Env: []string{"NVIDIA_VISIBLE_DEVICES=1"}})
	if _, ok := containers()[dave.ID]; ok {
		t.Errorf("dave listed while the engine is cut off")
	}
	step("dave started")
	proxy.Start(t)
	waitSeries("the docker source back, with dave", map[string]float64{
		dockerUp:        1,
		aliceOn0(share): 1,
		carolOn1(share): 0.5,
		// No owner label and no Config.User: the main process's owner.
		seriesKey(share, labels(dave, "root", "", "", 1)): 0.5,
		perGPU("gpumeter_gpu_holders", 1):                 2,
	})
	step("reconnected")
	if diff := cmp.Diff(ctrView{dave.Name, image, "root", "", "", "1", true, true, []shareView{{1, 0.5, 0, 0, 0}}}, view(containers()[dave.ID])); diff != "" {
		t.Errorf("/api/v1/containers entry of dave (-want +got):\n%s", diff)
	}
}
