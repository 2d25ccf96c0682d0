package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"github.com/gpumeter/gpumeter/internal/config"
)

// dataFiles says how the agent's own files under data_dir are kept: the
// ledger (whose -wal and -shm SQLite makes with the ledger's mode and
// owner), the audit log and the ledger's lock. They hold every user's
// usage and the audit trail, so they are the owner's alone (0600), or
// also readable by data_group (0640) for a group of CLI readers.
type dataFiles struct {
	dir  string
	mode fs.FileMode // of files
	gid  int         // data_group's, or -1
}

// prepareDataDir makes data_dir when missing and checks it. A root agent
// refuses a directory that another user owns or that others may write:
// whoever can write it can swap the ledger or plant a symlink where the
// audit log goes. One that others may only read is taken, with a warning.
func prepareDataDir(dir, group string, log *slog.Logger) (dataFiles, error) {
	d := dataFiles{dir: dir, mode: 0o600, gid: -1}
	dirMode := fs.FileMode(0o700)
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			return d, fmt.Errorf("data_group: %w", err)
		}
		if d.gid, err = strconv.Atoi(g.Gid); err != nil {
			return d, fmt.Errorf("data_group: group %s has gid %q", group, g.Gid)
		}
		d.mode, dirMode = 0o640, 0o750
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return d, notWritable(dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return d, fmt.Errorf("data_dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return d, fmt.Errorf("data_dir %s is not a directory", dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if os.Geteuid() == 0 && ok {
		perm := fi.Mode().Perm()
		switch {
		case st.Uid != 0:
			return d, fmt.Errorf("data_dir %s is owned by uid %d, not root: whoever owns it can replace the ledger and the audit log; chown root it, or give another data_dir", dir, st.Uid)
		case perm&0o022 != 0:
			return d, fmt.Errorf("data_dir %s has mode %v: others may write it, and so replace the ledger or point the audit log anywhere; chmod go-w it, or give another data_dir", dir, fi.Mode())
		case perm&0o044 != 0 && group == "":
			log.Warn("data_dir is readable by others; its files are not (0600), but consider chmod 0700", "dir", dir, "mode", fi.Mode().String())
		}
		if d.gid >= 0 && int(st.Gid) != d.gid {
			if err := os.Chown(dir, 0, d.gid); err != nil {
				return d, fmt.Errorf("data_dir %s: %w", dir, err)
			}
			if err := os.Chmod(dir, dirMode); err != nil {
				return d, fmt.Errorf("data_dir %s: %w", dir, err)
			}
		}
	}
	if err := writable(dir); err != nil {
		return d, err
	}
	return d, nil
}

// errNotWritable marks a data_dir the agent's user may not write.
var errNotWritable = errors.New("data_dir cannot be written")

// writable proves that dir can be written, so that a directory the
// agent's user may not write is named with the setting that moves it,
// before the ledger or the audit log fail on it with a path alone.
func writable(dir string) error {
	f, err := os.CreateTemp(dir, ".write-check-")
	if err != nil {
		// The file made to check is no name the user knows.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return notWritable(dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

func notWritable(dir string, err error) error {
	return &notWritableError{dir: dir, err: err}
}

// notWritableError says that data_dir cannot be written, why, and how
// to name another.
type notWritableError struct {
	dir string
	err error
}

func (e *notWritableError) Error() string {
	return fmt.Sprintf("data_dir %s cannot be written (%v): set data_dir in the config file, GPUMETER_DATA_DIR or --data-dir to a directory this user can write", e.dir, e.err)
}

func (e *notWritableError) Unwrap() []error { return []error{errNotWritable, e.err} }

// useDataDir says whether the agent keeps files in data_dir. The SQLite
// ledger needs it; without that ledger it is only where the audit log
// and the local socket go, and the agent runs without them when it may
// not write there, unless the policy would then act unaudited.
func (a *Agent) useDataDir(cfg config.Config) (bool, error) {
	_, err := a.files()
	switch {
	case err == nil:
		return true, nil
	case !errors.Is(err, errNotWritable), cfg.LedgerEnabled && cfg.LedgerDSN == "":
		return false, err
	case !cfg.LedgerEnabled && actsForReal(cfg):
		return false, fmt.Errorf("%w; the policy's actions are audited, and with the ledger off only the audit log in data_dir records them", err)
	}
	a.log.Warn("running without an audit log file and the local socket", "err", err)
	return false, nil
}

// actsForReal says whether the policy would notify or stop.
func actsForReal(cfg config.Config) bool {
	if !cfg.WasteEnabled || cfg.Policy.DryRun {
		return false
	}
	for _, r := range config.RuleNames() {
		if cfg.Policy.Actions.For(r) != config.ActionReport {
			return true
		}
	}
	return false
}

// ensure makes path an empty file of the right mode when it is missing,
// and gives an existing one the right mode and group (a ledger made by an
// older release was 0644). A symbolic link is refused, not followed.
func (d dataFiles) ensure(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|syscall.O_NOFOLLOW, d.mode)
	if errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("%s is a symbolic link: refusing to follow it (whoever made it could have the agent write anywhere); remove it", path)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return d.secure(f, path)
}

// secure gives an open file of data_dir the mode and group it should have.
func (d dataFiles) secure(f *os.File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if d.gid >= 0 {
		if err := f.Chown(-1, d.gid); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if fi.Mode().Perm() != d.mode {
		if err := f.Chmod(d.mode); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

// ensureLedger gives the SQLite ledger and its -wal and -shm files, those
// that exist, the right mode, making the ledger first when missing so that
// SQLite never creates it with the umask's mode (SQLite makes -wal and
// -shm with the ledger's mode, and a root process gives them its owner).
func (d dataFiles) ensureLedger(path string) error {
	if err := d.ensure(path); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	for _, p := range []string{path + "-wal", path + "-shm"} {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := d.ensure(p); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
	}
	return nil
}

// files checks data_dir the first time a part of the agent needs it. The
// demo's data_dir is the directory New made for it, set there and never
// checked.
func (a *Agent) files() (dataFiles, error) {
	if a.dataFiles == nil {
		d, err := prepareDataDir(a.cfg.DataDir, a.cfg.DataGroup, a.log)
		if err != nil {
			return d, err
		}
		a.dataFiles = &d
	}
	return *a.dataFiles, nil
}
