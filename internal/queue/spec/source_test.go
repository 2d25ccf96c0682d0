package spec

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpenSource(t *testing.T) {
	h := newHostTree(t)
	in := func(p string) string { return filepath.Join(h.root, p) }
	// A directory inside the root reached through a symlink that stays
	// inside it: Check resolves it, OpenSource refuses the unresolved
	// name.
	if err := os.MkdirAll(in("shared/deep/er"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(in("shared/fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		path  string
		who   Identity
		write bool
		dir   bool   // want a directory (when text is "")
		text  string // a part of the refusal; "" to open
	}{
		{"a directory", in("shared"), alice, false, true, ""},
		{"a directory read-write", in("scratch"), alice, true, true, ""},
		{"a file", in("shared/weights.bin"), alice, false, false, ""},
		{"the root itself", h.root, alice, false, true, ""},
		{"deep below the root", in("shared/deep/er"), alice, false, true, ""},
		{"an open directory in a locked one, as root", in("locked/open"), Identity{}, true, true, ""},
		{"a trailing symlink inside the root", in("models"), alice, false, false, "is a symlink"},
		{"a trailing symlink out of the root", in("escape"), alice, false, false, "is a symlink"},
		{"a symlink in the middle", in("models/weights.bin"), alice, false, false, in("models") + " on the host is a symlink"},
		{"a symlink to / in the middle", in("slash/etc"), alice, false, false, "is a symlink"},
		{"..", h.root + "/shared/../../secret", alice, false, false, "without .."},
		{"a relative path", "data/shared", alice, false, false, "absolute"},
		{"outside the roots", h.out, alice, false, false, "outside queue.mount_roots"},
		{"/", "/", alice, false, false, "outside queue.mount_roots"},
		{"missing", in("shared/nothing/here"), alice, false, false, in("shared/nothing") + " does not exist"},
		{"through a file", in("shared/weights.bin/x"), alice, false, false, "is not a directory"},
		{"a named pipe", in("shared/fifo"), alice, false, false, "is a named pipe"},
		{"a locked directory on the way", in("locked/open"), alice, true, false, "may not enter " + in("locked")},
		{"unreadable", in("private"), alice, false, false, "uid 4242 may not read " + in("private")},
		{"unreadable file", in("key"), alice, false, false, "mode -rw-------"},
		{"read-only asked read-write", in("shared"), alice, true, false, "or add :ro"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := OpenSource(tt.path, []string{h.root}, tt.who, tt.write)
			if tt.text != "" {
				var r *Refusal
				if err == nil {
					s.Close()
				}
				if !errors.As(err, &r) || r.Reason != MountNotAllowed || !strings.Contains(r.Text, tt.text) {
					t.Fatalf("OpenSource(%s): %v, want a mount_not_allowed refusal saying %q", tt.path, err, tt.text)
				}
				return
			}
			if err != nil {
				t.Fatalf("OpenSource(%s): %v", tt.path, err)
			}
			defer s.Close()
			if s.Dir != tt.dir || s.Path != filepath.Clean(tt.path) {
				t.Errorf("dir %v, path %s; want %v, %s", s.Dir, s.Path, tt.dir, tt.path)
			}
			assertSame(t, s.FD(), tt.path)
		})
	}
}

// TestOpenSourceRootThroughSymlink: a mount root configured as a symlink
// (an admin's /home -> /data/home) is resolved once, and sources under
// it are opened by their real path.
func TestOpenSourceRootThroughSymlink(t *testing.T) {
	h := newHostTree(t)
	link := filepath.Join(filepath.Dir(h.root), "rootlink")
	if err := os.Symlink(h.root, link); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSource(filepath.Join(h.root, "shared"), []string{link}, alice, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if want := filepath.Join(h.root, "shared"); s.Path != want {
		t.Errorf("path %s, want %s", s.Path, want)
	}
}

// TestOpenSourceHoldsAgainstASwap: once opened, the descriptor names the
// directory that was checked, whatever the name comes to point at; and
// a second open after the swap is refused.
func TestOpenSourceHoldsAgainstASwap(t *testing.T) {
	h := newHostTree(t)
	x, xl := filepath.Join(h.root, "scratch", "x"), filepath.Join(h.root, "scratch", "x.l")
	if err := os.Mkdir(x, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(x, "marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", xl); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSource(x, []string{h.root}, alice, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var before unix.Stat_t
	if err := unix.Fstat(s.FD(), &before); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, x, unix.AT_FDCWD, xl, unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	var after unix.Stat_t
	if err := unix.Fstat(s.FD(), &after); err != nil {
		t.Fatal(err)
	}
	if before.Ino != after.Ino || after.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Errorf("the descriptor's inode %d (mode %o) after the swap, want the directory's %d", after.Ino, after.Mode, before.Ino)
	}
	if _, err := os.Stat(filepath.Join("/proc/self/fd", strconv.Itoa(s.FD()), "marker")); err != nil {
		t.Errorf("the marker through the descriptor after the swap: %v", err)
	}
	if s2, err := OpenSource(x, []string{h.root}, alice, false); err == nil || !strings.Contains(err.Error(), "is a symlink") {
		if err == nil {
			s2.Close()
		}
		t.Errorf("OpenSource after the swap: %v, want a symlink refused", err)
	}
}

// assertSame checks that fd is the file at path.
func assertSame(t *testing.T, fd int, path string) {
	t.Helper()
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(path, &b); err != nil {
		t.Fatal(err)
	}
	if a.Dev != b.Dev || a.Ino != b.Ino {
		t.Errorf("descriptor is %d:%d, %s is %d:%d", a.Dev, a.Ino, path, b.Dev, b.Ino)
	}
}
