package console

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/sim"
	"github.com/gpumeter/gpumeter/internal/testenv"
	"github.com/gpumeter/gpumeter/internal/waste"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestConsoleStopsContainer stops a real container from the page that
// lists waste: the agent sees the container (a sleeper of the real
// Docker engine) hold GPU 0 and do nothing on it, the idle rule finds it
// after 2 s, and an admin's Stop, confirmed in the dialog, stops it.
func TestConsoleStopsContainer(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.LockGPUs(t)
	idle := harness.StartSleeper(t, cli, dockertest.Spec{
		Name:   "console-idle",
		Labels: map[string]string{"gpumeter.user": "alice", sim.UtilLabel: "0", sim.MemoryLabel: "1GiB"},
		Env:    []string{"NVIDIA_VISIBLE_DEVICES=0"},
	})
	if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", idle.PID)); err != nil || !strings.Contains(string(cg), idle.ID) {
		testenv.SkipUnlessCI(t, "container processes are not visible in /proc (/proc/%d/cgroup: %q, %v)", idle.PID, cg, err)
	}
	b := harness.NewBrowser(t)
	ctx := b.Ctx

	scenario := filepath.Join(t.TempDir(), "scenario.yaml")
	err := os.WriteFile(scenario, []byte(`version: 1
node: e2e-console
duration: 1h
docker:
  containers: from_labels
gpus:
  - count: 1
    model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    idle_power: 70W
    max_power: 700W
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// The agent itself only reports (dry run, its default): the stop is
	// the page's.
	env := []string{
		"GPUMETER_WASTE_IDLE_WINDOW=2s",
		"GPUMETER_WASTE_STALLED_ENABLED=false", "GPUMETER_WASTE_OVER_ALLOCATED_ENABLED=false",
		"GPUMETER_WASTE_LOW_EFFICIENCY_ENABLED=false", "GPUMETER_WASTE_OUTSIDE_ENABLED=false",
	}
	a := harness.Serve(t, env, "--sim", scenario, "--interval", "200ms", "--docker-host", cli.DaemonHost())
	dockertest.WaitFor(t, harness.Settle, "the idle finding of "+idle.Name, func() (bool, string) {
		var rep waste.Report
		body := harness.Get(t, a.URL+"/api/v1/waste")
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			t.Fatalf("/api/v1/waste: %v\n%s", err, body)
		}
		return slices.ContainsFunc(rep.Findings, func(f waste.Finding) bool {
			return f.Rule == waste.RuleIdle && f.ContainerID != "" && strings.HasPrefix(idle.ID, f.ContainerID)
		}), body
	})

	path, spoil := "/", ""
	if i := slices.IndexFunc(pages, func(p page) bool { return p.stops }); i >= 0 {
		path = pages[i].path
	} else {
		// Until the waste page is built, its button is put on the
		// overview as the console's pages draw one: console.js, the
		// dialog, the CSRF token, the API and Docker are all real.
		t.Logf("no page has Stop buttons yet: the test puts one on %s", path)
		spoil = fmt.Sprintf(`(() => {
			const b = document.createElement("button");
			b.type = "button";
			b.textContent = "Stop";
			Object.assign(b.dataset, {method: "POST", path: %q, confirm: %q, body: '{"reason":"idle on the console test"}', doing: "stopping", done: "stopped"});
			document.querySelector("main").append(b);
		})()`, "/api/v1/containers/"+idle.ID[:12]+"/stop", "Stop container "+idle.Name+"?")
	}
	harness.SignIn(t, ctx, a.URL, a.Token, "e2e (admin)")
	emulate(t, ctx, viewports[0], "light")
	var sel string
	harness.WaitFor(t, 20*time.Second, path+" to show a Stop for "+idle.Name, func() bool {
		open(t, ctx, a.URL+path)
		if spoil != "" {
			evaluate[any](t, ctx, "put the button on the page", spoil)
		}
		sel = evaluate[string](t, ctx, "the stop button", fmt.Sprintf(`(() => {
			const b = [...document.querySelectorAll("button[data-path]")].find(b =>
				/\/stop$/.test(b.dataset.path) && (b.dataset.path.includes(%q) || b.dataset.path.includes(%q)));
			if (!b) return "";
			b.id = b.id || "stop-under-test";
			return "#" + b.id;
		})()`, idle.ID[:12], idle.Name))
		return sel != ""
	})
	harness.Step(t, ctx, "click Stop", chromedp.Click(chromedp.CSS(sel)))
	harness.Step(t, ctx, "the confirmation", chromedp.WaitVisible(chromedp.CSS("dialog#confirm[open]")))
	if text := evaluate[string](t, ctx, "the question", `document.getElementById("confirm-text").textContent`); !strings.Contains(text, idle.Name) && !strings.Contains(text, idle.ID[:12]) {
		t.Errorf("the confirmation asks %q: it does not name the container %s", text, idle.Name)
	}
	harness.Step(t, ctx, "confirm", chromedp.Click(chromedp.ID("confirm-ok")))
	dockertest.WaitFor(t, harness.Settle, idle.Name+" to stop", func() (bool, string) {
		st := dockertest.Inspect(t, cli, idle.ID).State
		return !st.Running, string(st.Status)
	})
	if st := dockertest.Inspect(t, cli, idle.ID).State; st.ExitCode != dockertest.SleeperExitCode {
		t.Errorf("%s exited with %d, want %d (stopped by SIGTERM)", idle.Name, st.ExitCode, dockertest.SleeperExitCode)
	}
	noErrors(t, b, path)
}
