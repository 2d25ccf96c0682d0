package listener

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Socket listens on a Unix socket at path that only the agent's user (and
// root) may connect to. A socket file left by an agent that died is
// replaced; one another agent still answers on is an error.
func Socket(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("api.socket: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("api.socket: another agent is serving on %s", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("api.socket: remove the stale %s: %w", path, err)
		}
	}
	// The socket is made in a directory only this user may enter, made
	// 0600 there and only then moved into place, so that there is no
	// moment in which another user could connect; the process umask,
	// which every goroutine shares, is left alone.
	dir, err := os.MkdirTemp(filepath.Dir(path), ".api-sock-")
	if err != nil {
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		var se *net.OpError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("api.socket: listen on %s: %w", path, se.Err)
		}
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	return &socket{UnixListener: ln, addr: &net.UnixAddr{Name: path, Net: "unix"}}, nil
}

// socket is a Unix listener whose file was moved to its place after it
// was made: it says where it is now, and removes that file when closed.
type socket struct {
	*net.UnixListener
	addr *net.UnixAddr
}

func (s *socket) Addr() net.Addr { return s.addr }

func (s *socket) Close() error {
	err := s.UnixListener.Close()
	if rerr := os.Remove(s.addr.Name); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}
