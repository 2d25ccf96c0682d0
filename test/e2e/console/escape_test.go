package console

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// The names a scenario gives its container, user and project: markup
// that would run a script or open a dialog if any page put it into HTML
// unescaped.
const (
	xssContainer = `<script>alert(1)</script>`
	xssUser      = `<img src=x onerror=alert(2)>`
	xssProject   = `"><svg onload=alert(3)>`
)

// TestConsoleEscapesNames plays a container named as markup, with a user
// and a project named so too: every page shows them as text, and no page
// runs them.
func TestConsoleEscapesNames(t *testing.T) {
	scenario := filepath.Join(t.TempDir(), "xss.yaml")
	err := os.WriteFile(scenario, fmt.Appendf(nil, `version: 1
node: e2e-xss
duration: 1h
gpus:
  - count: 2
    model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    idle_power: 70W
    max_power: 700W
containers:
  - name: %q
    image: pytorch/pytorch:2.4.0
    labels: {gpumeter.user: %q, gpumeter.team: %q, gpumeter.project: %q}
    gpus: [0]
    phases: [{at: 0s, util: 0, memory: 10GiB}]
  - name: idle-one
    labels: {gpumeter.user: %q}
    gpus: [1]
    phases: [{at: 0s, util: 0, memory: 1GiB}]
`, xssContainer, xssUser, xssProject, xssProject, xssUser), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	a := harness.Serve(t, []string{"GPUMETER_WASTE_IDLE_WINDOW=2s", "GPUMETER_LEDGER_FLUSH_INTERVAL=1s"}, "--sim", scenario, "--interval", "200ms")
	b := harness.NewBrowser(t)
	ctx := b.Ctx
	harness.SignIn(t, ctx, a.URL, a.Token, "e2e (admin)")
	emulate(t, ctx, viewports[0], "light")
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			path := cmp.Or(p.xss, p.path)
			var st pageState
			check := func() bool {
				if status := open(t, ctx, a.URL+path); status != 200 {
					t.Errorf("%s: status %d, want 200", path, status)
				}
				st = state(t, ctx)
				return p.xss == "" || strings.Contains(st.Text, xssContainer)
			}
			if !check() {
				// The waste page shows the container once the idle rule
				// has found it.
				deadline := time.Now().Add(20 * time.Second)
				for !check() && time.Now().Before(deadline) {
					time.Sleep(500 * time.Millisecond)
				}
				if !strings.Contains(st.Text, xssContainer) {
					t.Errorf("%s does not show the container %s as text:\n%s", path, xssContainer, st.Text)
				}
			}
			injected := evaluate[[]string](t, ctx, "injected elements", `[
				...[...document.scripts].filter(s => !s.src.endsWith("/static/console.js")).map(s => "script " + s.outerHTML.slice(0, 80)),
				...[...document.querySelectorAll("img[src='x'], [onerror], [onload]")].map(e => e.outerHTML.slice(0, 80)),
			]`)
			for _, e := range injected {
				t.Errorf("%s holds an element made of a name: %s", path, e)
			}
			noErrors(t, b, path)
		})
	}
	// A dialog a page opens is seen: the test above can fail.
	evaluate[bool](t, ctx, "open a dialog", `(setTimeout(() => alert("probe"), 0), true)`)
	harness.WaitFor(t, 5*time.Second, "the probe's dialog", func() bool {
		return slices.ContainsFunc(b.Dialogs(), func(d string) bool { return strings.Contains(d, `"probe"`) })
	})
}
