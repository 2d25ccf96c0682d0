package api

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestLivePageInBrowser loads the agent's page in a real headless
// Chromium, signed in with the token in the address as the demo prints
// it, and checks what its script rendered from the API.
func TestLivePageInBrowser(t *testing.T) {
	browser := harness.Chromium(t)
	a := harness.Serve(t, nil, "--demo", "--interval", "200ms")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", a.URL+"/#token="+a.Token).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	dom := string(out)
	gpus, usage := section(dom, `id="gpus"`), section(dom, `id="usage"`)
	for _, want := range []string{"NVIDIA H100 80GB HBM3", "90 %", "60.0 GiB / 80.0 GiB"} {
		if !strings.Contains(gpus, want) {
			t.Errorf("the GPU table does not show %q:\n%s", want, gpus)
		}
	}
	for _, want := range []string{"alice-llama-finetune", "carol-notebook", "0.50", "(outside containers)", "bob"} {
		if !strings.Contains(usage, want) {
			t.Errorf("the usage table does not show %q:\n%s", want, usage)
		}
	}
	status := section(dom, `id="status"`)
	for _, want := range []string{"node demo", "signed in as e2e (admin)"} {
		if !strings.Contains(status, want) {
			t.Errorf("the status line does not show %q:\n%s", want, status)
		}
	}
	for _, bad := range []string{"cannot reach the agent", "not signed in"} {
		if strings.Contains(status, bad) {
			t.Errorf("the status line shows %q:\n%s", bad, status)
		}
	}
}

// section returns the element of dom that starts with the attribute attr,
// up to the end of its table or div.
func section(dom, attr string) string {
	i := strings.Index(dom, attr)
	if i < 0 {
		return ""
	}
	rest := dom[i:]
	for _, end := range []string{"</table>", "</div>"} {
		if j := strings.Index(rest, end); j >= 0 {
			return rest[:j]
		}
	}
	return rest
}
