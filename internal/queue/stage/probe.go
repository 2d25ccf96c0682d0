package stage

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// capSysAdmin is CAP_SYS_ADMIN's bit in /proc/<pid>/status's CapEff.
const capSysAdmin = 21

// Probe says why this agent cannot stage mounts where dockerd sees them,
// or "" when it can: it needs CAP_SYS_ADMIN, and either dockerd (the peer
// of dockerSocket, a Unix socket path; "" when Docker is reached some
// other way) runs in the agent's own mount namespace, or the mount that
// holds dataDir is shared, so that a bind made under it propagates to
// the host. The sentence is meant for a job's submitter and the
// operator alike; the agent probes once, at start.
func Probe(dataDir, dockerSocket string) string {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Sprintf("this agent cannot stage mounts: it cannot read its capabilities (%v); submit without mounts", err)
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Sprintf("this agent cannot stage mounts: it cannot read its mounts (%v); submit without mounts", err)
	}
	if d, err := filepath.EvalSymlinks(dataDir); err == nil {
		dataDir = d
	}
	return probe(status, mountinfo, dataDir, sameNamespace(dockerSocket))
}

// probe is Probe over the contents of /proc/self/status and
// /proc/self/mountinfo.
func probe(status, mountinfo []byte, dataDir string, sameNS bool) string {
	const fix = "run the agent's container as root (--user 0:0) with --cap-add SYS_ADMIN and -v /var/lib/gpumeter:/var/lib/gpumeter:rshared (data_dir the same path inside and out), or run the agent from the systemd unit in deploy/systemd"
	has, err := hasCap(status, capSysAdmin)
	if err != nil {
		return fmt.Sprintf("this agent cannot stage mounts: %v; submit without mounts", err)
	}
	if !has {
		return "this agent cannot stage job mounts (it binds each source itself so that no job can swap it for a symlink, which needs CAP_SYS_ADMIN, and it runs without it); submit without mounts, or ask the operator to " + fix
	}
	if sameNS {
		return ""
	}
	point, shared, ok := mountOf(mountinfo, dataDir)
	switch {
	case !ok:
		return fmt.Sprintf("this agent cannot stage job mounts: no mount of its own holds its data directory %s; submit without mounts, or ask the operator to %s", dataDir, fix)
	case !shared:
		return fmt.Sprintf("this agent cannot stage job mounts: it runs in a mount namespace of its own, and its data directory %s (on the mount at %s) is not a shared mount, so what it binds there never reaches dockerd; submit without mounts, or ask the operator to %s", dataDir, point, fix)
	}
	return ""
}

// hasCap reports whether the CapEff line of a /proc/<pid>/status holds
// capability bit.
func hasCap(status []byte, bit uint) (bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return false, fmt.Errorf("CapEff %q in /proc/self/status is not hexadecimal", strings.TrimSpace(v))
		}
		return mask&(1<<bit) != 0, nil
	}
	return false, fmt.Errorf("/proc/self/status has no CapEff line")
}

// mountOf finds the mount that holds path in a mountinfo (the one with
// the longest mount point above it, the last of equals since later
// mounts cover earlier ones) and whether it is shared (an optional field
// shared:N).
func mountOf(mountinfo []byte, path string) (point string, shared, ok bool) {
	best := -1
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 {
			continue
		}
		mp := unescape(fields[4])
		if !(path == mp || mp == "/" || strings.HasPrefix(path, mp+"/")) || len(mp) < best {
			continue
		}
		best, point, shared, ok = len(mp), mp, false, true
		for _, f := range fields[6:] {
			if f == "-" {
				break
			}
			if strings.HasPrefix(f, "shared:") {
				shared = true
			}
		}
	}
	return point, shared, ok
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// sameNamespace reports whether the process serving the Unix socket at
// path (dockerd) is in this process's mount namespace: then a bind the
// agent makes is dockerd's too, whatever its propagation. It is false
// whenever that cannot be told (no socket path, a peer in another PID
// namespace, a namespace link that cannot be read).
func sameNamespace(socket string) bool {
	if socket == "" {
		return false
	}
	c, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil || cred.Pid <= 0 {
		return false
	}
	theirs, err := os.Readlink("/proc/" + strconv.Itoa(int(cred.Pid)) + "/ns/mnt")
	if err != nil {
		return false
	}
	ours, err := os.Readlink("/proc/self/ns/mnt")
	return err == nil && ours == theirs
}
