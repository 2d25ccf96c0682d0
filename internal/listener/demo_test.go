package listener_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpumeter/gpumeter/internal/listener"
	"github.com/gpumeter/gpumeter/internal/testenv"
)

// notMine is a directory this user does not own.
func notMine(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return "/"
	}
	dir := t.TempDir()
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDemoRecord(t *testing.T) {
	runtime, home := t.TempDir(), t.TempDir()
	cache := filepath.Join(home, ".cache") // missing: the demo makes it
	tests := []struct {
		name    string
		runtime string // XDG_RUNTIME_DIR
		want    string
	}{
		{"the runtime directory", runtime, filepath.Join(runtime, "gpumeter", "demo-socket")},
		{"no runtime directory", "", filepath.Join(cache, "gpumeter", "demo-socket")},
		{"a relative runtime directory", "run", filepath.Join(cache, "gpumeter", "demo-socket")},
		{"another user's runtime directory, kept by sudo", notMine(t), filepath.Join(cache, "gpumeter", "demo-socket")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("XDG_RUNTIME_DIR", tt.runtime)
			t.Setenv("XDG_CACHE_HOME", "")
			t.Setenv("HOME", home)
			if got := listener.DemoRecord(); got != tt.want {
				t.Errorf("DemoRecord() = %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("neither is this user's", func(t *testing.T) {
		t.Setenv("XDG_RUNTIME_DIR", "")
		t.Setenv("XDG_CACHE_HOME", notMine(t))
		if got := listener.DemoRecord(); got != "" {
			t.Errorf("DemoRecord() = %q, want none", got)
		}
	})
}

func TestAdvertise(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gpumeter")
	record := filepath.Join(dir, "demo-socket")
	if got := listener.Advertised(record); got != "" {
		t.Errorf("Advertised() before any demo = %q, want none", got)
	}
	withdraw, err := listener.Advertise(record, "/tmp/gpumeter-demo1/api.sock")
	if err != nil {
		t.Fatal(err)
	}
	if got := listener.Advertised(record); got != "/tmp/gpumeter-demo1/api.sock" {
		t.Errorf("Advertised() = %q, want the demo's socket", got)
	}
	fi, err := os.Stat(record)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the record's mode is %v, want 0600", fi.Mode())
	}

	// A second demo takes the record over; the first one's exit leaves it.
	withdraw2, err := listener.Advertise(record, "/tmp/gpumeter-demo2/api.sock")
	if err != nil {
		t.Fatal(err)
	}
	if err := withdraw(); err != nil {
		t.Fatal(err)
	}
	if got := listener.Advertised(record); got != "/tmp/gpumeter-demo2/api.sock" {
		t.Errorf("Advertised() after the first demo's exit = %q, want the second's socket", got)
	}
	if err := withdraw2(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("the record's directory is left after the last demo's exit (%v)", err)
	}
}

func TestAdvertisedRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string { return testenv.WriteFile(t, dir, name, body, mode) }
	link := filepath.Join(dir, "link")
	if err := os.Symlink(write("target", "/tmp/s.sock\n", 0o600), link); err != nil {
		t.Fatal(err)
	}
	for name, record := range map[string]string{
		"writable by others": write("open", "/tmp/s.sock\n", 0o622),
		"a relative path":    write("relative", "s.sock\n", 0o600),
		"empty":              write("empty", "", 0o600),
		"a symbolic link":    link,
		"a directory":        dir,
	} {
		if got := listener.Advertised(record); got != "" {
			t.Errorf("%s: Advertised() = %q, want none", name, got)
		}
	}
}
