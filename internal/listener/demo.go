package listener

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// The demo keeps its socket in a directory of its own, which no config
// names, and says where in a record of its user's: gpumeter/demo-socket
// in the user's runtime directory, else in the user's cache directory.
// The CLI reads the record when no agent's socket is where the config
// says, so that the README's later commands find the demo without flags.
const demoRecordName = "demo-socket"

// DemoRecord is the file in which a running demo names its socket for
// its user's CLI: gpumeter/demo-socket in $XDG_RUNTIME_DIR when that is
// this user's, else in the user's cache directory (os.UserCacheDir) when
// this user owns it or would make it; "" when neither is this user's (a
// root demo under sudo that kept another user's XDG_RUNTIME_DIR writes
// nothing there).
func DemoRecord() string {
	var bases []string
	if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		bases = append(bases, d)
	}
	if d, err := os.UserCacheDir(); err == nil && filepath.IsAbs(d) {
		bases = append(bases, d)
	}
	for _, b := range bases {
		if ownedByMe(b) {
			return filepath.Join(b, "gpumeter", demoRecordName)
		}
	}
	return ""
}

// ownedByMe says whether dir, or the nearest of its parents that exists
// when it does not, is a directory this user owns.
func ownedByMe(dir string) bool {
	for {
		fi, err := os.Lstat(dir)
		if err == nil {
			st, ok := fi.Sys().(*syscall.Stat_t)
			return fi.IsDir() && ok && int(st.Uid) == os.Geteuid()
		}
		parent := filepath.Dir(dir)
		if !errors.Is(err, fs.ErrNotExist) || parent == dir {
			return false
		}
		dir = parent
	}
}

// Advertise writes the path of socket to record, replacing a record an
// earlier demo left. The function it returns removes the record, unless
// a later demo has written its own there since, and the record's
// directory when that is then empty.
func Advertise(record, socket string) (withdraw func() error, err error) {
	dir := filepath.Dir(record)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("demo record: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+demoRecordName+"-*")
	if err != nil {
		return nil, fmt.Errorf("demo record: %w", err)
	}
	_, werr := f.WriteString(socket + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), record)
	}
	if werr != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("demo record: %w", werr)
	}
	return func() error {
		if Advertised(record) != socket {
			return nil
		}
		if err := os.Remove(record); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("demo record: %w", err)
		}
		// The directory stays when anything else is in it.
		_ = os.Remove(dir)
		return nil
	}, nil
}

// Advertised is the socket a demo's record names, or "" when there is no
// record or it cannot be trusted: a record that is not a regular file of
// this user's, that others may write, or that names no absolute path.
// Whether a socket is there, and answers, is the caller's to find out.
func Advertised(record string) string {
	if record == "" {
		return ""
	}
	f, err := os.OpenFile(record, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o022 != 0 {
		return ""
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return ""
	}
	path, _, _ := bytes.Cut(b, []byte("\n"))
	if p := string(path); filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return ""
}
