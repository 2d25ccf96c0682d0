package listener_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/listener"
)

// None of these tests run in parallel: one of them sets the process
// umask to check that Socket leaves it alone.

// socketPath is a path for a socket in a fresh directory, short enough
// for sun_path's 108 bytes.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "agent.sock")
}

func openSocket(t *testing.T, path string) net.Listener {
	t.Helper()
	ln, err := listener.Socket(path)
	if err != nil {
		t.Fatalf("Socket(%s): %v", path, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dial connects to the socket at path and sees the connection accepted.
func dial(t *testing.T, ln net.Listener, path string) {
	t.Helper()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	c.Close()
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatalf("accept on %s: %v", path, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the listener on %s accepted nothing", path)
	}
}

func TestSocket(t *testing.T) {
	path := socketPath(t)
	ln := openSocket(t, path)

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		t.Errorf("%s has mode %s, want a socket", path, fi.Mode())
	}
	if got, want := fi.Mode().Perm(), fs.FileMode(0o600); got != want {
		t.Errorf("%s has permissions %#o, want %#o", path, got, want)
	}
	if got, want := ln.Addr().String(), path; got != want {
		t.Errorf("Addr() = %q, want %q", got, want)
	}
	dial(t, ln, path)

	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Close, Lstat(%s) = %v, want it gone", path, err)
	}
}

func TestSocketReplacesStale(t *testing.T) {
	path := socketPath(t)
	// A listener that died without removing its socket file.
	old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	old.SetUnlinkOnClose(false)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the stale socket is not there: %v", err)
	}

	ln := openSocket(t, path)
	dial(t, ln, path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fi.Mode().Perm(), fs.FileMode(0o600); got != want {
		t.Errorf("%s has permissions %#o, want %#o", path, got, want)
	}
}

func TestSocketRefuses(t *testing.T) {
	t.Run("live socket", func(t *testing.T) {
		path := socketPath(t)
		live, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer live.Close()

		ln, err := listener.Socket(path)
		if err == nil {
			ln.Close()
			t.Fatalf("Socket(%s) with another listener on it succeeded", path)
		}
		for _, want := range []string{"api.socket", "another agent is serving", path} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Socket error %q does not say %q", err, want)
			}
		}
		// The other agent keeps its socket.
		dial(t, live, path)
	})

	t.Run("regular file", func(t *testing.T) {
		path := socketPath(t)
		writeFile(t, path, []byte("keep me\n"))

		ln, err := listener.Socket(path)
		if err == nil {
			ln.Close()
			t.Fatalf("Socket(%s) over a regular file succeeded", path)
		}
		for _, want := range []string{"api.socket", path, "not a socket"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Socket error %q does not say %q", err, want)
			}
		}
		if data, err := os.ReadFile(path); err != nil || string(data) != "keep me\n" {
			t.Errorf("the file at %s was changed: %q, %v", path, data, err)
		}
	})

	t.Run("directory", func(t *testing.T) {
		path := socketPath(t)
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		ln, err := listener.Socket(path)
		if err == nil {
			ln.Close()
			t.Fatalf("Socket(%s) over a directory succeeded", path)
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("Socket error %q does not name %s", err, path)
		}
	})

	t.Run("parent is a file", func(t *testing.T) {
		parent := socketPath(t)
		writeFile(t, parent, nil)
		path := filepath.Join(parent, "agent.sock")
		ln, err := listener.Socket(path)
		if err == nil {
			ln.Close()
			t.Fatalf("Socket(%s) under a regular file succeeded", path)
		}
		if !strings.Contains(err.Error(), "api.socket") || !strings.Contains(err.Error(), parent) {
			t.Errorf("Socket error %q does not name api.socket and %s", err, parent)
		}
	})
}

func TestSocketCreatesParent(t *testing.T) {
	root := filepath.Dir(socketPath(t))
	path := filepath.Join(root, "run", "gpumeter", "agent.sock")
	ln := openSocket(t, path)
	dial(t, ln, path)

	umask := syscall.Umask(0)
	syscall.Umask(umask)
	want := fs.FileMode(0o750) &^ fs.FileMode(umask)
	for _, dir := range []string{filepath.Join(root, "run"), filepath.Dir(path)} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.IsDir() || fi.Mode().Perm() != want {
			t.Errorf("%s has mode %s, want a directory with permissions %#o", dir, fi.Mode(), want)
		}
	}
}

// Socket leaves the process umask alone (every goroutine shares it) and
// nothing but the socket in its directory.
func TestSocketLeavesUmaskAndDirectory(t *testing.T) {
	before := syscall.Umask(0o022)
	defer syscall.Umask(before)
	path := socketPath(t)
	openSocket(t, path)
	if got := syscall.Umask(before); got != 0o022 {
		t.Errorf("umask after Socket = %#o, want %#o", got, 0o022)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != filepath.Base(path) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the socket's directory holds %v, want only %s", names, filepath.Base(path))
	}
}
