package agent

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/listener"
)

// files lists what lies under dir, relative to it; nil for a missing dir.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

// TestDemoKeepsToItsOwnDirectory is the demo run as root (or anyone)
// beside a real install: its socket, ledger and audit log are in a
// directory of its own, the data_dir the config names stays untouched,
// and the CLI, with no flag, finds it through the record in the user's
// runtime directory, which its exit removes with the rest.
func TestDemoKeepsToItsOwnDirectory(t *testing.T) {
	runtime, home, install := t.TempDir(), t.TempDir(), t.TempDir()
	// A socket's path has at most about 100 bytes: the demo's directory
	// goes in a short one of its own.
	tmp, err := os.MkdirTemp("", "gpm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	for k, v := range map[string]string{
		"XDG_RUNTIME_DIR": runtime, "HOME": home, "TMPDIR": tmp,
		"XDG_CACHE_HOME": "", "XDG_STATE_HOME": "", "XDG_CONFIG_HOME": "",
	} {
		t.Setenv(k, v)
	}
	// The real install's data directory, with its agent stopped.
	dataDir := filepath.Join(install, "var", "lib", "gpumeter")
	cfg := config.Default()
	cfg.Source, cfg.DataDir, cfg.DockerEnabled = "demo", dataDir, false
	cfg.Listen, cfg.Interval = "127.0.0.1:0", 50*time.Millisecond

	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Listen(); err != nil {
		a.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	socket := a.Socket()
	if filepath.Dir(filepath.Dir(socket)) != tmp {
		t.Errorf("the demo's socket is %s, want it in a directory of its own under %s", socket, tmp)
	}
	own := files(t, tmp)
	for _, f := range []string{"api.sock", "ledger.db", "audit.jsonl"} {
		if !strings.Contains(strings.Join(own, " "), filepath.Base(filepath.Dir(socket))+"/"+f) {
			t.Errorf("the demo's directory holds %v, want %s among them", own, f)
		}
	}
	record := filepath.Join(runtime, "gpumeter", "demo-socket")
	if got := listener.Advertised(record); got != socket {
		t.Errorf("the record %s names %q, want the demo's socket %s", record, got, socket)
	}
	if got := files(t, install); got != nil {
		t.Errorf("the demo made %v under the install's directory, want nothing", got)
	}
	if got := files(t, home); got != nil {
		t.Errorf("the demo made %v in the home directory, want nothing", got)
	}

	// The CLI: no flag, no GPUMETER_URL, no agent's socket where the
	// config says; the demo's record names its socket.
	s, err := client.Resolve(client.Flags{}, client.Env{
		Getenv: func(string) string { return "" }, Socket: cfg.SocketPath(), DemoSocket: listener.Advertised(listener.DemoRecord()),
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.URLFrom != client.URLFromDemo || s.URL != "unix://"+socket {
		t.Errorf("the CLI resolved %s (from %s), want unix://%s from %s", s.URL, s.URLFrom, socket, client.URLFromDemo)
	}
	c, err := client.New(s.Options)
	if err != nil {
		t.Fatal(err)
	}
	if who, err := c.Whoami(ctx); err != nil {
		t.Errorf("whoami over the demo's socket: %v", err)
	} else if who.Role != "admin" {
		t.Errorf("whoami over the demo's socket: %+v, want this user as admin", who)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of its context ending")
	}
	for dir, what := range map[string]string{tmp: "the temporary directory", runtime: "the runtime directory", install: "the install's directory", home: "the home directory"} {
		if got := files(t, dir); got != nil {
			t.Errorf("after the demo, %s holds %v, want nothing", what, got)
		}
	}
}

func TestDemoSocket(t *testing.T) {
	tests := []struct {
		socket, want string
	}{
		{"", "/tmp/gpumeter-demo1/api.sock"},
		{"none", ""},
		{"/run/me/demo.sock", "/run/me/demo.sock"},
		{"/var/lib/gpumeter/api.sock", "/tmp/gpumeter-demo1/api.sock"},
		{"/var/lib/gpumeter/../gpumeter/api.sock", "/tmp/gpumeter-demo1/api.sock"},
		{"/etc/gpumeter/api.sock", "/tmp/gpumeter-demo1/api.sock"},
		{"/var/lib/gpumeter-demo/api.sock", "/var/lib/gpumeter-demo/api.sock"},
	}
	for _, tt := range tests {
		a := &Agent{tempDir: "/tmp/gpumeter-demo1", log: slog.New(slog.DiscardHandler)}
		a.cfg.API.Socket = tt.socket
		if got := a.demoSocket(); got != tt.want {
			t.Errorf("api.socket %q: the demo's socket is %q, want %q", tt.socket, got, tt.want)
		}
	}
}
