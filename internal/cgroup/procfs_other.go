//go:build !linux

package cgroup

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// procDir is a /proc/<pid> directory. Only Linux has a procfs; elsewhere
// the package still works on a copied or fake tree.
type procDir struct{ path string }

func openProcDir(path string) (procDir, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return procDir{}, err
	}
	if !fi.IsDir() {
		return procDir{}, &fs.PathError{Op: "open", Path: path, Err: errors.New("not a directory")}
	}
	return procDir{path: path}, nil
}

func (d procDir) close() {}

func (d procDir) readFile(name string, buf []byte, _ func([]byte) bool) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(d.path, name))
	if err != nil {
		return nil, err
	}
	return append(buf[:0], b...), nil
}

func (d procDir) openStat(buf []byte) (statFile, []byte, error) {
	b, err := d.readFile("stat", buf, nil)
	if err != nil {
		return statFile{}, nil, err
	}
	return statFile{path: filepath.Join(d.path, "stat")}, b, nil
}

// statFile is the stat file of one resolved process. Without a procfs
// nothing is held open: every read opens the file by its path.
type statFile struct{ path string }

func (f statFile) isOpen() bool               { return false }
func (f statFile) close()                     {}
func (f statFile) unheld() statFile           { return f }
func (f statFile) read(b []byte) (int, error) { return readOnce(f.path, b) }

func readOnce(path string, buf []byte) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := f.Read(buf)
	if err == io.EOF {
		err = nil
	}
	return n, err
}

func gone(err error) bool { return errors.Is(err, fs.ErrNotExist) }
