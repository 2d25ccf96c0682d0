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
	fd, err := d.openFile(name)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	b, err := readAll(fd, buf, enough)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: d.path + "/" + name, Err: err}
	}
	return b, nil
}

// openStat reads the directory's stat file like readFile, and keeps it
// open for the warm lookups of the process.
func (d procDir) openStat(buf []byte) (statFile, []byte, error) {
	fd, err := d.openFile("stat")
	if err != nil {
		return statFile{fd: -1}, nil, err
	}
	path := d.path + "/stat"
	b, err := readAll(fd, buf, endsLine)
	if err != nil {
		unix.Close(fd)
		return statFile{fd: -1}, nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return statFile{fd: fd, path: path}, b, nil
}

func (d procDir) openFile(name string) (int, error) {
	fd, err := retry(func() (int, error) {
		return unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: d.path + "/" + name, Err: err}
	}
	return fd, nil
}

// readAll reads fd into buf[:0] as readFile does.
func readAll(fd int, buf []byte, enough func([]byte) bool) ([]byte, error) {
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := retry(func() (int, error) { return unix.Read(fd, buf[len(buf):cap(buf)]) })
		if err != nil {
			return nil, err
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

// statFile is the /proc/<pid>/stat file of one resolved process, read
// again on every warm lookup. While fd is open the read is one pread at
// offset 0, for which procfs builds the file afresh; the descriptor stays
// tied to the process it was opened for, so the read fails with ESRCH
// once that process has been reaped, even when a new process has taken
// its PID. With fd -1 (a cache past its cap of open files) each read
// opens path, reads and closes.
type statFile struct {
	fd   int
	path string
}

func (f statFile) isOpen() bool { return f.fd >= 0 }

// close closes the descriptor, which no read may be using.
func (f statFile) close() {
	if f.fd >= 0 {
		unix.Close(f.fd)
	}
}

// unheld returns the file without its descriptor, after closing it.
func (f statFile) unheld() statFile {
	f.close()
	return statFile{fd: -1, path: f.path}
}

// read reads the file from its start into buf, once: procfs hands a small
// file over whole when buf is large enough.
func (f statFile) read(buf []byte) (int, error) {
	if f.fd < 0 {
		return readOnce(f.path, buf)
	}
	n, err := retry(func() (int, error) { return unix.Pread(f.fd, buf, 0) })
	if err != nil {
		return 0, &fs.PathError{Op: "read", Path: f.path, Err: err}
	}
	return n, nil
}

// readOnce opens path, reads it once into buf and closes it: the cheapest
// look at a small procfs file without a held descriptor, which the kernel
// hands over whole in one read when buf is large enough.
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
