package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Source is a mount source opened once beneath its mount root: an O_PATH
// descriptor of the very file or directory whose access was checked.
// Whatever is renamed or swapped for a symlink on the host afterwards,
// the descriptor still names what was checked, so binding it (see
// internal/queue/stage) leaves runc no name to re-resolve.
type Source struct {
	fd   int
	Path string // the host path it was opened by, from /
	Dir  bool   // a directory; otherwise a regular file
}

// FD is the O_PATH descriptor; it stays valid until Close.
func (s *Source) FD() int { return s.fd }

// Close closes the descriptor.
func (s *Source) Close() error {
	if s.fd < 0 {
		return nil
	}
	err := unix.Close(s.fd)
	s.fd = -1
	return err
}

// OpenSource opens path, a mount source that Check or Build resolved into
// one of roots, one component at a time from /, never following a
// symlink (openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, O_PATH), and
// checks who's access on each descriptor as it goes: who must be able to
// enter every directory on the way and read the source (write it too when
// write is set; enter it too when it is a directory). Nothing is checked
// by name, so a component renamed or swapped for a symlink between
// checks is either refused or never seen. A refused source is a
// *Refusal; the caller closes the Source it gets.
func OpenSource(path string, roots []string, who Identity, write bool) (*Source, error) {
	if !filepath.IsAbs(path) || hasDotDot(path) {
		return nil, refuse(MountNotAllowed, "mounts", "mount source %q is not an absolute path without ..", path)
	}
	path = filepath.Clean(path)
	root, ok := rootOf(path, roots)
	if !ok {
		return nil, refuse(MountNotAllowed, "mounts", "mount source %s is outside queue.mount_roots (%s); mount a path under one of them",
			path, strings.Join(roots, ", "))
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(path, root), "/")
	comps := append(splitPath(root), splitPath(rel)...)
	full := "/" + strings.Join(comps, "/")

	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /: %w", err)
	}
	dir := "/"
	for _, c := range comps {
		st, err := fstat(fd, dir)
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
		if !st.Mode.IsDir() {
			unix.Close(fd)
			return nil, refuse(MountNotAllowed, "mounts", "%s on the host is not a directory, so it may not hold %s", dir, full)
		}
		if !mayAccess(who, st, permExec) {
			unix.Close(fd)
			return nil, refuse(MountNotAllowed, "mounts", "uid %d may not enter %s on the host, so it may not mount %s; mount a path you can reach", who.UID, dir, full)
		}
		next, err := openat2(fd, c)
		unix.Close(fd)
		dir = filepath.Join(dir, c)
		switch {
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
			return nil, refuse(MountNotAllowed, "mounts", "%s on the host is a symlink (or became one after it was checked), and mount sources are opened without following symlinks; mount the path it points to", dir)
		case errors.Is(err, unix.ENOENT):
			return nil, refuse(MountNotAllowed, "mounts", "mount source %s: %s does not exist on the host (any more); give an existing path under queue.mount_roots", full, dir)
		case errors.Is(err, unix.ENOSYS):
			return nil, fmt.Errorf("open %s: openat2 is missing (mounts need Linux 5.6 or later): %w", dir, err)
		case err != nil:
			return nil, refuse(MountNotAllowed, "mounts", "cannot open %s on the host (%v)", dir, err)
		}
		fd = next
	}
	st, err := fstat(fd, full)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if !st.Mode.IsDir() && !st.Mode.IsRegular() {
		unix.Close(fd)
		return nil, refuse(MountNotAllowed, "mounts", "mount source %s is a %s, not a directory or a regular file", full, fileType(st.Mode))
	}
	want, what := fs.FileMode(permRead), "read"
	if write {
		want, what = permRead|permWrite, "read and write"
	}
	if st.Mode.IsDir() {
		want |= permExec
	}
	if !mayAccess(who, st, want) {
		unix.Close(fd)
		how := "mount a path you may " + what
		if write {
			how += ", or add :ro"
		}
		return nil, refuse(MountNotAllowed, "mounts", "uid %d may not %s %s on the host (mode %s, owner %d:%d); %s", who.UID, what, full, st.Mode.Perm(), st.UID, st.GID, how)
	}
	return &Source{fd: fd, Path: full, Dir: st.Mode.IsDir()}, nil
}

// rootOf returns the resolved mount root that holds path, which names
// the root as resolved (Check resolves the source before it is stored).
// A missing root, or one that resolves to /, holds nothing.
func rootOf(path string, roots []string) (string, bool) {
	for _, root := range roots {
		r, err := filepath.EvalSymlinks(filepath.Clean(root))
		if err != nil || r == "/" {
			continue
		}
		if within(path, r) {
			return r, true
		}
	}
	return "", false
}

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// openat2 opens one component beneath dirfd as O_PATH, refusing a
// symlink (the trailing one too) and any step out of dirfd.
func openat2(dirfd int, name string) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(dirfd, name, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue // EAGAIN: a rename raced the lookup; look again
		}
		return fd, err
	}
}

// fstat is the mode and owner of the file fd refers to; name is for the
// message.
func fstat(fd int, name string) (fileStat, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileStat{}, refuse(MountNotAllowed, "mounts", "cannot stat %s on the host (%v)", name, err)
	}
	mode := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFREG:
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	default:
		mode |= fs.ModeIrregular
	}
	return fileStat{Mode: mode, UID: st.Uid, GID: st.Gid}, nil
}

func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}
