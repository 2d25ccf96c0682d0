package cgroup

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"
)

// procDir is an open /proc/<pid> directory. Files opened through it belong
// to the process the directory was opened for: once that process is gone,
// opening them fails even when a new process has taken its PID, so the
// files of one cold resolve never mix two processes.
type procDir struct {
	fd   int
	path string
}

func openProcDir(path string) (procDir, error) {
	fd, err := retry(func() (int, error) {
		return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return procDir{}, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return procDir{fd: fd, path: path}, nil
}

func (d procDir) close() { unix.Close(d.fd) }

// readFile reads the directory's file called name into buf[:0], growing
// buf as needed, up to the end of the file or until enough, when given,
// says the data read so far is all the caller needs.
func (d procDir) readFile(name string, buf []byte, enough func([]byte) bool) ([]byte, error) {
	fd, err := retry(func() (int, error) {
		return unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path + "/" + name, Err: err}
	}
	defer unix.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := retry(func() (int, error) { return unix.Read(fd, buf[len(buf):cap(buf)]) })
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: d.path + "/" + name, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
		if enough != nil && enough(buf) {
			return buf, nil
		}
	}
}

// readOnce opens path, reads it once into buf and closes it: the cheapest
// look at a small procfs file, which the kernel hands over whole in one
// read when buf is large enough.
func readOnce(path string, buf []byte) (int, error) {
	fd, err := retry(func() (int, error) {
		return unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	n, err := retry(func() (int, error) { return unix.Read(fd, buf) })
	unix.Close(fd)
	if err != nil {
		return 0, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return n, nil
}

// gone reports whether err says the process no longer exists: its files
// are missing, or the kernel refuses to read a dead task's file.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH)
}

func retry(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != unix.EINTR {
			return n, err
		}
	}
}
