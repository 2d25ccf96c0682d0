package api

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestLivePageInBrowser loads the agent's overview in a real headless
// Chromium, signed in with the token in the address as the demo prints
// it, and checks the demo's GPUs and their holders on it. The console's
// own suite (test/e2e/console) checks every page further.
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
	gpu0 := section(dom, `id="gpu-0"`, "</li>")
	for _, want := range []string{"NVIDIA H100 80GB HBM3", "90 %", "60 GiB of 80 GiB", "alice-llama-finetune", "carol-notebook"} {
		if !strings.Contains(gpu0, want) {
			t.Errorf("GPU 0's tile does not show %q:\n%s", want, gpu0)
		}
	}
	gpu3 := section(dom, `id="gpu-3"`, "</li>")
	for _, want := range []string{"erin-dev", "bob (host)"} {
		if !strings.Contains(gpu3, want) {
			t.Errorf("GPU 3's tile does not show %q:\n%s", want, gpu3)
		}
	}
	header := section(dom, `<header`, "</header>")
	for _, want := range []string{`<span class="node">demo</span>`, "signed in as e2e (admin)"} {
		if !strings.Contains(header, want) {
			t.Errorf("the header does not show %q:\n%s", want, header)
		}
	}
	if strings.Contains(dom, `id="login"`) {
		t.Errorf("the page still asks to sign in:\n%s", dom)
	}
}

// section returns the part of dom from the start of attr (an attribute
// or a tag) to the first end after it.
func section(dom, attr, end string) string {
	i := strings.Index(dom, attr)
	if i < 0 {
		return ""
	}
	rest := dom[i:]
	if j := strings.Index(rest, end); j >= 0 {
		return rest[:j]
	}
	return rest
}
