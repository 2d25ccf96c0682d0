package console

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/testenv"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestWastePageStopsContainer: an admin signed in with the demo's kind
// of link opens /waste, finds the idle finding of a real container with
// its Stop button, confirms in the dialog, and Docker stops the
// container; the audit page then shows the stop. The page throws no
// error on the way.
func TestWastePageStopsContainer(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.LockGPUs(t)
	idle := harness.StartSleeper(t, cli, dockertest.Spec{Name: "con-idle", Labels: map[string]string{"gpumeter.user": "alice"},
		Env: []string{"NVIDIA_VISIBLE_DEVICES=0"}})
	if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", idle.PID)); err != nil || !strings.Contains(string(cg), idle.ID) {
		testenv.SkipUnlessCI(t, "container processes are not visible in /proc (/proc/%d/cgroup: %q, %v)", idle.PID, cg, err)
	}
	scenario := filepath.Join(t.TempDir(), "scenario.yaml")
	if err := os.WriteFile(scenario, fmt.Appendf(nil, `version: 1
node: e2e-console
duration: 1h
interval: 100ms
gpus:
  - count: 1
    model: NVIDIA A100-SXM4-80GB
    memory: 80GiB
    idle_power: 60W
    max_power: 400W
containers:
  - {name: con-idle, pid: %d, gpus: [0], phases: [{at: 0s, util: 0, memory: 1GiB}]}
`, idle.PID), 0o644); err != nil {
		t.Fatal(err)
	}
	// The policy stays a dry run: only the page's button stops.
	a := harness.Serve(t, []string{"GPUMETER_WASTE_IDLE_WINDOW=2s",
		"GPUMETER_WASTE_STALLED_ENABLED=false", "GPUMETER_WASTE_OVER_ALLOCATED_ENABLED=false",
		"GPUMETER_WASTE_LOW_EFFICIENCY_ENABLED=false", "GPUMETER_WASTE_OUTSIDE_ENABLED=false",
	}, "--sim", scenario, "--interval", "100ms", "--docker-host", cli.DaemonHost())

	b := harness.NewBrowser(t)
	ctx := b.Ctx
	run := func(what string, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		harness.Step(t, ctx, what, a)
	}
	eval := func(what, js string) string {
		t.Helper()
		return harness.Step(t, ctx, what, chromedp.Evaluate[string](js))
	}
	run("sign in by the link", chromedp.Navigate(a.URL+"/waste#token="+a.Token))
	// The page signs in after it loads and then loads itself again: a
	// navigation before then would cut the sign-in off.
	harness.WaitFor(t, 20*time.Second, "the sign-in", func() bool {
		return strings.Contains(eval("read the status", `(document.getElementById("status") || {}).textContent || ""`), "signed in as")
	})
	button := fmt.Sprintf(`button[data-path="/api/v1/containers/%s/stop"]`, idle.ID)
	harness.WaitFor(t, 30*time.Second, "the idle finding's Stop button", func() bool {
		run("reload the waste page", chromedp.Navigate(a.URL+"/waste"))
		return eval("find the button", fmt.Sprintf(`document.querySelector(%q) ? "yes" : "no"`, button)) == "yes"
	})
	if got := eval("the button's body", fmt.Sprintf(`document.querySelector(%q).dataset.body`, button)); got != `{"reason":"waste: idle"}` {
		t.Errorf("the button's body is %s", got)
	}
	run("press Stop", chromedp.Click(chromedp.CSS(button)))
	run("the dialog opens", chromedp.WaitVisible(chromedp.ID("confirm")))
	if got := eval("the dialog's question", `document.getElementById("confirm-text").textContent`); !strings.HasPrefix(got, "Stop container "+idle.Name+" of alice? It is idle (SM 0.0%") {
		t.Errorf("the dialog asks %q", got)
	}
	if !dockertest.Inspect(t, cli, idle.ID).State.Running {
		t.Fatal("the container stopped before the confirmation")
	}
	run("confirm", chromedp.Click(chromedp.ID("confirm-ok")))
	dockertest.WaitFor(t, 30*time.Second, "the container to stop", func() (bool, string) {
		st := dockertest.Inspect(t, cli, idle.ID).State
		return !st.Running, string(st.Status)
	})
	if st := dockertest.Inspect(t, cli, idle.ID).State; st.ExitCode != dockertest.SleeperExitCode {
		t.Errorf("exit code %d, want %d: a stop, not a kill", st.ExitCode, dockertest.SleeperExitCode)
	}

	harness.WaitFor(t, 20*time.Second, "the stop in the audit page", func() bool {
		run("open the audit page", chromedp.Navigate(a.URL+"/audit?window=1h"))
		return strings.Contains(eval("read the audit table", `(document.getElementById("audit") || {}).textContent || ""`), "containers.stop")
	})
	for _, e := range b.Errors() {
		t.Errorf("the page: %s", e)
	}
}
