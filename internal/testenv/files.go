package testenv

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// WriteFile writes text to dir/name with exactly mode, whatever the umask,
// and returns the path.
func WriteFile(t testing.TB, dir, name, text string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// ListenUnix listens on api.sock in a fresh directory under /tmp, removed
// when t ends: socket paths are limited to about 100 bytes, and
// t.TempDir's can be longer.
func ListenUnix(t testing.TB) (net.Listener, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, path
}
