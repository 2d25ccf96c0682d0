package console

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/sim"
	"github.com/gpumeter/gpumeter/internal/testenv"
	"github.com/gpumeter/gpumeter/internal/waste"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestConsoleStopsContainer stops a real container from the page that
// lists waste: the agent sees the container (a sleeper of the real
// Docker engine) hold GPU 0 and do nothing on it, the idle rule finds it
// after 2 s; a viewer sees the finding and no button, and an admin's
// Stop, confirmed in the dialog, stops it.
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
	roles, tokens := demoRoles(t)
	admin, viewer := roles[0], roles[2]
	a := harness.Serve(t, append(env, tokens), "--sim", scenario, "--interval", "200ms", "--docker-host", cli.DaemonHost())
	dockertest.WaitFor(t, harness.Settle, "the idle finding of "+idle.Name, func() (bool, string) {
		var rep waste.Report
		resp, err := harness.GetAs(a.URL+"/api/v1/waste", admin.secret)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		body := string(raw)
		if err == nil {
			err = json.Unmarshal(raw, &rep)
		}
		if err != nil {
			t.Fatalf("/api/v1/waste: %v\n%s", err, body)
		}
		return slices.ContainsFunc(rep.Findings, func(f waste.Finding) bool {
			return f.Rule == config.RuleIdle && f.ContainerID != "" && strings.HasPrefix(idle.ID, f.ContainerID)
		}), body
	})

	i := slices.IndexFunc(pages, func(p page) bool { return p.stops })
	if i < 0 {
		t.Fatal("no page of the table has stops set: which page stops containers?")
	}
	path := pages[i].path
	emulate(t, ctx, viewports[0], "light")

	// A viewer sees the finding and no button.
	harness.SignIn(t, ctx, a.URL, viewer.secret, viewer.as)
	var st pageState
	harness.WaitFor(t, 20*time.Second, path+" to show "+idle.Name+" to a viewer", func() bool {
		open(t, ctx, a.URL+path)
		st = state(t, ctx)
		return strings.Contains(st.Text, idle.Name)
	})
	if len(st.Buttons) > 0 {
		t.Errorf("%s shows a viewer buttons: %v", path, st.Buttons)
	}

	harness.SignIn(t, ctx, a.URL, admin.secret, admin.as)
	var sel string
	harness.WaitFor(t, 20*time.Second, path+" to show a Stop for "+idle.Name, func() bool {
		open(t, ctx, a.URL+path)
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
