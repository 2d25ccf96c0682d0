package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Self is what the gpumeter checks need from its config.
type Self struct {
	// Proc is the host's /proc (host.proc_root).
	Proc fs.FS
	// DataDir is the agent's data directory, as this process sees it.
	DataDir string
	// Listen is the agent's listen address.
	Listen string
}

func selfChecks() []check {
	return []check{
		{"gpumeter.pid_namespace", "host PID namespace", checkPIDNamespace},
		{"gpumeter.cgroup_namespace", "host cgroup namespace", checkCgroupNamespace},
		{"gpumeter.data_dir", "data directory writable, safe permissions", checkDataDir},
		{"gpumeter.listen", "listen address free", checkListen},
	}
}

// checkPIDNamespace reads /proc/1/sched, whose first line names PID 1 by
// its PID in the initial namespace: 1 there means the host's namespace.
func checkPIDNamespace(_ context.Context, s *state) Result {
	if s.Self == nil || s.Self.Proc == nil {
		return skip("no proc root")
	}
	data, err := fs.ReadFile(s.Self.Proc, "1/sched")
	if err != nil {
		return skip("1/sched under host.proc_root: %v", unwrapPath(err))
	}
	first, _, _ := bytes.Cut(data, []byte("\n"))
	if bytes.Contains(first, []byte("(1,")) {
		return pass("PID 1 is the host's (%s)", strings.TrimSpace(string(first)))
	}
	return fail("run the agent's container with --pid=host, or set host.proc_root to the host's /proc", "PID 1 here is not the host's (%s): other users' processes, and their GPU use, cannot be attributed", strings.TrimSpace(string(first)))
}

func checkCgroupNamespace(_ context.Context, s *state) Result {
	if s.Self == nil || s.Self.Proc == nil {
		return skip("no proc root")
	}
	data, err := fs.ReadFile(s.Self.Proc, "self/cgroup")
	if err != nil {
		return skip("self/cgroup under host.proc_root: %v", unwrapPath(err))
	}
	if strings.TrimSpace(string(data)) == "0::/" {
		return warn("run the agent's container with --cgroupns=host, so cgroup paths name containers", "this process's cgroup path is / : a private cgroup namespace hides the paths that name containers")
	}
	return pass("%s", strings.TrimSpace(string(data)))
}

func checkDataDir(_ context.Context, s *state) Result {
	if s.Self == nil || s.Self.DataDir == "" {
		return skip("no data directory configured")
	}
	d := s.Self.DataDir
	fi, err := os.Stat(d)
	if errors.Is(err, fs.ErrNotExist) {
		return warn("the agent creates it on start; check that its parent is writable", "%s does not exist yet", d)
	}
	if err != nil {
		return fail("run doctor as the agent's user, or fix the directory", "%s: %v", d, err)
	}
	if !fi.IsDir() {
		return fail("set data_dir to a directory", "%s is not a directory", d)
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return fail("chmod o-w "+d, "%s is world-writable (%v): anyone could replace the ledger", d, fi.Mode().Perm())
	}
	f, err := os.CreateTemp(d, ".doctor-*")
	if err != nil {
		return fail("run doctor as the agent's user, or chown the directory to it", "%s is not writable: %v", d, err)
	}
	f.Close()
	os.Remove(f.Name())
	if _, err := os.Stat(filepath.Join(d, "ledger.db")); err == nil {
		return pass("%s writable (%v), holds a ledger", d, fi.Mode().Perm())
	}
	return pass("%s writable (%v)", d, fi.Mode().Perm())
}

func checkListen(_ context.Context, s *state) Result {
	if s.Self == nil || s.Self.Listen == "" {
		return skip("no listen address configured")
	}
	l, err := net.Listen("tcp", s.Self.Listen)
	if err == nil {
		l.Close()
		return pass("%s is free", s.Self.Listen)
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return warn("if `gpumeter serve` is running this is expected; otherwise stop what holds it (`ss -ltnp 'sport = "+portOf(s.Self.Listen)+"'`) or change listen", "%s is in use", s.Self.Listen)
	}
	return fail("change listen", "%s: %v", s.Self.Listen, err)
}

func portOf(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return fmt.Sprintf(":%s", p)
}
