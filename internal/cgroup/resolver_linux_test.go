package cgroup

import (
	"errors"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestResolveReaped resolves a real child process, kills and reaps it,
// and resolves its PID again: the held stat file fails to read with ESRCH
// by itself, and the lookup does not return the reaped process.
func TestResolveReaped(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("needs sleep(1)")
	}
	cmd := exec.Command(sleep, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	pid := uint32(cmd.Process.Pid)
	r := newResolver(t, "/proc", nil)
	first, err := r.Resolve(pid)
	if err != nil {
		t.Fatal(err)
	}
	if first.PID != pid || first.StartTime == 0 {
		t.Fatalf("Resolve(%d) = %+v, want the pid and a start time", pid, first)
	}
	if warm, err := r.Resolve(pid); err != nil || warm != first {
		t.Fatalf("warm Resolve(%d) = %+v, %v; want %+v", pid, warm, err, first)
	}
	r.mu.Lock()
	c := r.cache[pid]
	c.refs.Add(1) // keeps the file open past the lookup below
	r.mu.Unlock()
	defer c.release()
	if !c.stat.isOpen() {
		t.Fatal("the cached process holds no stat file")
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	reaped = true

	buf := make([]byte, statReadSize)
	if n, err := c.stat.read(buf); !errors.Is(err, unix.ESRCH) {
		t.Errorf("read of the reaped process's held stat file = %q, %v; want ESRCH", buf[:n], err)
	}
	got, err := r.Resolve(pid)
	switch {
	case err == nil && got.StartTime == first.StartTime:
		t.Errorf("Resolve(%d) after the process was reaped = %+v, nil; want ErrNoProcess or a new process", pid, got)
	case err != nil && !errors.Is(err, ErrNoProcess):
		t.Errorf("Resolve(%d) after the process was reaped: %v; want ErrNoProcess", pid, err)
	case err != nil && len(r.cache) != 0:
		t.Errorf("cache holds %d entries after the process was reaped, want 0", len(r.cache))
	}
}
