package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestCLIAuthEndToEnd: a token made by `token create` and pasted into the
// agent's config lets the CLI in over HTTP, from the environment or the
// client config; the socket lets the agent's own user in without one.
func TestCLIAuthEndToEnd(t *testing.T) {
	out, stderr, code := harness.RunCLI(t, nil, "token", "create", "--user", "alice", "--role", "user", "--name", "alice-1", "--format", "json")
	if code != 0 {
		t.Fatalf("token create exited %d: %s", code, stderr)
	}
	// What token create prints as JSON, as a script would read it.
	var tok struct {
		Token      string `json:"token"`
		ConfigLine string `json:"config_line"`
	}
	if err := json.Unmarshal([]byte(out), &tok); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	dir := t.TempDir()
	cfg := harness.WriteFile(t, filepath.Join(dir, "gpumeter.yaml"), "auth:\n  tokens:\n    "+tok.ConfigLine+"\n", 0o600)
	// The socket's path must stay short.
	data, err := os.MkdirTemp("", "gpm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(data) })
	a := harness.Serve(t, []string{"GPUMETER_DATA_DIR=" + data}, "--config", cfg, "--sim", harness.RepoFile("testdata/shared.yaml"), "--interval", "100ms")

	// No client settings but those each case gives.
	clean := []string{"GPUMETER_URL=", "GPUMETER_TOKEN=", "GPUMETER_CA_FILE=", "GPUMETER_CLIENT_CONFIG=", "XDG_CONFIG_HOME=" + t.TempDir()}
	client := harness.WriteFile(t, filepath.Join(dir, "client.yaml"), "url: "+a.URL+"\ntoken: "+tok.Token+"\n", 0o600)
	tests := []struct {
		name string
		env  []string
		args []string
		code int
		want []string
	}{
		{"token from the environment", []string{"GPUMETER_TOKEN=" + tok.Token}, []string{"whoami", "--url", a.URL},
			0, []string{"user:             alice", "authenticated by: token alice-1"}},
		{"token from the client config", []string{"GPUMETER_CLIENT_CONFIG=" + client}, []string{"whoami"},
			0, []string{"authenticated by: token alice-1", "agent:            " + a.URL}},
		{"the socket", []string{"GPUMETER_URL=unix://" + filepath.Join(data, "api.sock")}, []string{"whoami"},
			0, []string{"role:             admin", "authenticated by: the agent's socket"}},
		{"the socket by default", []string{"GPUMETER_DATA_DIR=" + data}, []string{"whoami"},
			0, []string{"agent:            unix://" + filepath.Join(data, "api.sock")}},
		{"a user sees their own", []string{"GPUMETER_TOKEN=" + tok.Token}, []string{"ps", "--url", a.URL},
			0, []string{"alice-train"}},
		{"no token", nil, []string{"ps", "--url", a.URL},
			1, []string{"401 Unauthorized", "no token was sent"}},
		{"wrong token", []string{"GPUMETER_TOKEN=gpm_" + strings.Repeat("x", 43)}, []string{"whoami", "--url", a.URL},
			1, []string{"401 Unauthorized", "not accepted", "the token came from GPUMETER_TOKEN"}},
		{"users may not read the audit log", []string{"GPUMETER_TOKEN=" + tok.Token}, []string{"audit", "--url", a.URL},
			1, []string{"403 Forbidden"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, code := harness.RunCLI(t, append(clean, tt.env...), tt.args...)
			if code != tt.code {
				t.Fatalf("exit status %d, want %d; stdout:\n%s\nstderr:\n%s", code, tt.code, out, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(out+stderr, w) {
					t.Errorf("the output does not say %q; stdout:\n%s\nstderr:\n%s", w, out, stderr)
				}
			}
			if strings.Contains(out, "bob-notebook") {
				t.Errorf("alice sees bob's container:\n%s", out)
			}
		})
	}

	if err := os.Chmod(client, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = harness.RunCLI(t, append(clean, "GPUMETER_CLIENT_CONFIG="+client), "whoami")
	if code == 0 || !strings.Contains(stderr, "chmod 600 "+client) {
		t.Errorf("a client config others may read: exit %d, stderr %s", code, stderr)
	}
}
