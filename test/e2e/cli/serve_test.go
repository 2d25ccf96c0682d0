package cli

// How serve fails on a bad config, environment, flag or scenario, and on
// a port it cannot have; the version; a bare boolean flag.

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestServeErrors(t *testing.T) {
	dir := t.TempDir()
	badConfig := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badConfig, []byte("listen: :9400\ninterval: soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badScenario := filepath.Join(dir, "bad-scenario.yaml")
	if err := os.WriteFile(badScenario, []byte("version: 1\nduration: 1h\ngpus:\n  - count: 2\n    model: A100\n    memory: 40GiB\n    idle_power: 50W\n    max_power: 400W\ncontainers:\n  - name: x\n    gpus: [0, 7]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"no driver", nil, []string{"serve", "--listen", "127.0.0.1:0", "--nvml-library", "/nonexistent/libnvidia-ml.so.1"}, []string{"no NVIDIA driver found", "--demo", "--sim FILE"}},
		{"bad config", nil, []string{"serve", "--config", badConfig}, []string{badConfig + ":2: interval:", `"soon" is not a duration`}},
		{"bad env", []string{"GPUMETER_INTERVAL=-3s"}, []string{"serve", "--demo"}, []string{"GPUMETER_INTERVAL", "negative"}},
		{"bad flag value", nil, []string{"serve", "--demo", "--docker-enabled=perhaps"}, []string{"--docker-enabled", `"perhaps" is not true or false`}},
		{"bad scenario", nil, []string{"serve", "--sim", badScenario}, []string{badScenario + ":11", "GPU index 7 out of range"}},
		{"missing scenario", nil, []string{"serve", "--sim", filepath.Join(dir, "nope.yaml")}, []string{"nope.yaml"}},
		{"demo and sim", nil, []string{"serve", "--demo", "--sim", badScenario}, []string{"--demo and --sim exclude each other"}},
		{"bad listen", nil, []string{"serve", "--demo", "--listen", "nowhere"}, []string{`listen: "nowhere" is not host:port`}},
		{"ps unreachable", nil, []string{"ps", "--url", "http://127.0.0.1:1"}, []string{"is `gpumeter serve` running?"}},
		{"ps bad format", nil, []string{"ps", "--format", "xml"}, []string{`--format: "xml" is not table or json`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := harness.RunCLI(t, tt.env, tt.args...)
			if code == 0 {
				t.Fatalf("exit status 0, want failure; stderr:\n%s", stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Errorf("stderr shows a crash:\n%s", stderr)
			}
		})
	}
}

// TestServeBusyPortLeavesNothing: a demo that cannot listen removes the
// ledger it made for itself, as a demo that stops does.
func TestServeBusyPortLeavesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tmp := t.TempDir()
	_, stderr, code := harness.RunCLI(t, []string{"TMPDIR=" + tmp}, "serve", "--demo", "--listen", ln.Addr().String())
	if code == 0 || !strings.Contains(stderr, "address already in use") {
		t.Fatalf("exit status %d, want a failure to listen; stderr:\n%s", code, stderr)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left behind in $TMPDIR: %s", e.Name())
	}
}

func TestVersion(t *testing.T) {
	out, _, code := harness.RunCLI(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "gpumeter ") {
		t.Errorf("version printed %q with status %d", out, code)
	}
}

// TestBareBoolFlag checks that a true/false setting given as a bare flag
// means true, and that =false turns it off.
func TestBareBoolFlag(t *testing.T) {
	a := harness.Serve(t, nil, "--demo", "--interval", "100ms", "--ledger-enabled=false")
	resp, err := harness.GetAs(a.URL+"/api/v1/usage", a.Token)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("with --ledger-enabled=false /api/v1/usage answered %d, want 503", resp.StatusCode)
	}
	b := harness.Serve(t, nil, "--demo", "--interval", "100ms", "--ledger-enabled")
	harness.WaitFor(t, 20*time.Second, "a usage report from the demo's ledger", func() bool {
		resp, err := harness.GetAs(b.URL+"/api/v1/usage?since=1h", b.Token)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
