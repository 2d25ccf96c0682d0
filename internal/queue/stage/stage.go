// Package stage binds a job's mount sources onto paths that only the
// agent controls, and hands Docker those paths instead of the user's.
//
// runc opens a bind mount's source by name at `docker start`, and follows
// whatever is at that name then; a job of the same user can swap a
// checked directory for a symlink to / in between. The agent therefore
// opens each source once beneath its root (spec.OpenSource, an O_PATH
// descriptor), binds that descriptor (mount of /proc/self/fd/N) onto
// DATA_DIR/stage/<job>/<n>, an agent-owned 0700 directory, and gives
// Docker the staging path: nobody but the agent can change what is there.
// The bind must land in the mount namespace dockerd uses, which Probe
// checks.
package stage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Dir is the staging directory: one 0700 directory per job holding one
// bind mount per mount of the job, named by its index.
type Dir struct {
	path string
	// classic binds through mount(2) alone, as on a kernel without the
	// mount API; for the tests of that path.
	classic bool
}

// Open makes path the staging directory, creating it 0700 when missing;
// a symlink or a non-directory there is refused.
func Open(path string) (*Dir, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("stage dir %q is not an absolute path", path)
	}
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("stage dir: %w", err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("stage dir: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("stage dir %s is not a directory (%s)", path, fi.Mode().Type())
	}
	if err := os.Chmod(path, 0o700); err != nil {
		return nil, fmt.Errorf("stage dir: %w", err)
	}
	return &Dir{path: path}, nil
}

// Path is the staging directory's path.
func (d *Dir) Path() string { return d.path }

// Bind binds the file or directory that fd (an O_PATH descriptor) refers
// to onto <dir>/<job>/<n>, a directory for a directory and a file for a
// file, read-only when readOnly is set, and returns that path. The bind
// is not recursive: mounts below the source are not carried over, so a
// read-only bind has nothing writable beneath it. It is made private, so
// that mounts made later below the source do not show in it either.
func (d *Dir) Bind(job string, n int, fd int, isDir, readOnly bool) (string, error) {
	if !validJob(job) {
		return "", fmt.Errorf("stage: job id %q is not a directory name", job)
	}
	jobDir := filepath.Join(d.path, job)
	if err := os.Mkdir(jobDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("stage %s: %w", job, err)
	}
	if fi, err := os.Lstat(jobDir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("stage %s: %s is not a directory (%v)", job, jobDir, err)
	}
	target := filepath.Join(jobDir, strconv.Itoa(n))
	if isDir {
		if err := os.Mkdir(target, 0o700); err != nil {
			return "", fmt.Errorf("stage %s: %w", job, err)
		}
	} else {
		f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return "", fmt.Errorf("stage %s: %w", job, err)
		}
		f.Close()
	}
	do := bind
	if d.classic {
		do = bindClassic
	}
	if err := do(fd, target, readOnly); err != nil {
		_ = unmount(target)
		_ = os.Remove(target)
		return "", fmt.Errorf("stage %s: bind its mount %d onto %s: %w", job, n, target, err)
	}
	return target, nil
}

// bind clones the mount of the file fd refers to, at that file, marks
// the clone read-only (when asked) and private while it is still
// detached, and only then attaches it at target (open_tree, mount_setattr,
// move_mount): the mount arrives with its flags wherever the attach
// propagates, dockerd's namespace included, and is never writable there
// for an instant. A kernel without the mount API (before 5.12) gets the
// same through mount(2).
func bind(fd int, target string, readOnly bool) error {
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.ENOSYS) {
		return bindClassic(fd, target, readOnly)
	}
	if err != nil {
		return mountErr("open_tree", err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Propagation: unix.MS_PRIVATE}
	if readOnly {
		attr.Attr_set = unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); errors.Is(err, unix.ENOSYS) {
		return bindClassic(fd, target, readOnly)
	} else if err != nil {
		return mountErr("mount_setattr", err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return mountErr("move_mount", err)
	}
	return sameFile(fd, target)
}

// bindClassic binds through mount(2): a bind of /proc/self/fd/N, then
// a read-only remount and a private one.
func bindClassic(fd int, target string, readOnly bool) error {
	src := "/proc/self/fd/" + strconv.Itoa(fd)
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return mountErr("mount", err)
	}
	if readOnly {
		// A remount keeps the flags the source's mount has locked
		// (nosuid, nodev, noexec), or the kernel refuses it.
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
		var sfs unix.Statfs_t
		if err := unix.Fstatfs(fd, &sfs); err == nil {
			flags |= uintptr(sfs.Flags) & (unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
		}
		if err := unix.Mount("", target, "", flags, ""); err != nil {
			return mountErr("remount read-only", err)
		}
	}
	if err := unix.Mount("", target, "", unix.MS_PRIVATE, ""); err != nil {
		return mountErr("make private", err)
	}
	return sameFile(fd, target)
}

func mountErr(op string, err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%s: %w (staging mounts needs CAP_SYS_ADMIN and the mount system calls)", op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// sameFile checks that target now shows the file fd refers to.
func sameFile(fd int, target string) error {
	var want, got unix.Stat_t
	if err := unix.Fstat(fd, &want); err != nil {
		return fmt.Errorf("stat the source: %w", err)
	}
	if err := unix.Lstat(target, &got); err != nil {
		return fmt.Errorf("stat the bind: %w", err)
	}
	if want.Dev != got.Dev || want.Ino != got.Ino {
		return fmt.Errorf("the bind shows %d:%d, the source is %d:%d", got.Dev, got.Ino, want.Dev, want.Ino)
	}
	return nil
}

// Unstage detaches every bind of job and removes its staging directory;
// a job with nothing staged is fine. Nothing is removed recursively: a
// bind that would not detach keeps its directory (rmdir fails on it),
// so the job's data is never deleted through it.
func (d *Dir) Unstage(job string) error {
	if !validJob(job) {
		return fmt.Errorf("unstage: job id %q is not a directory name", job)
	}
	jobDir := filepath.Join(d.path, job)
	entries, err := os.ReadDir(jobDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unstage %s: %w", job, err)
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(jobDir, e.Name())
		if err := unmount(p); err != nil {
			errs = append(errs, fmt.Errorf("unstage %s: %w", job, err))
			continue
		}
		if err := os.Remove(p); err != nil {
			errs = append(errs, fmt.Errorf("unstage %s: %w", job, err))
		}
	}
	if len(errs) == 0 {
		if err := os.Remove(jobDir); err != nil {
			errs = append(errs, fmt.Errorf("unstage %s: %w", job, err))
		}
	}
	return errors.Join(errs...)
}

// unmount detaches every mount stacked on p (a start tried twice may
// have bound twice); p not being a mount point ends it.
func unmount(p string) error {
	for range 16 {
		err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		default:
			return fmt.Errorf("detach %s: %w", p, err)
		}
	}
	return fmt.Errorf("detach %s: still a mount point after 16 detaches", p)
}

// Jobs returns the ids of the jobs that have a staging directory.
func (d *Dir) Jobs() ([]string, error) {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return nil, fmt.Errorf("stage dir: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && validJob(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// validJob accepts a job id as one path component.
func validJob(job string) bool {
	return job != "" && job != "." && job != ".." && filepath.Base(job) == job && len(job) < 256
}
