package listener

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
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
	// The socket is created with no access for anyone else, so that there
	// is no moment in which another user could connect.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		var se *net.OpError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("api.socket: listen on %s: %w", path, se.Err)
		}
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	return ln, nil
}
