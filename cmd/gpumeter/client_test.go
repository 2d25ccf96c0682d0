package main

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// writeFile writes text to dir/name with exactly mode, whatever the umask.
func writeFile(t *testing.T, dir, name, text string, mode os.FileMode) string {
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

// listenUnix listens on a socket in a fresh directory short enough for a
// socket path.
func listenUnix(t *testing.T) (net.Listener, string) {
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

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}
