package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one finished process: its wall time, its CPU time (user +
// system, from its rusage, which the kernel keeps to the microsecond
// where /usr/bin/time prints 10 ms steps) and its output.
type proc struct {
	Wall, CPU      time.Duration
	Stdout, Stderr []byte
}

// run runs name with args and fails with its stderr when it exits non-zero.
func run(ctx context.Context, env []string, name string, args ...string) (proc, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	began := time.Now()
	err := cmd.Run()
	p := proc{Wall: time.Since(began), Stdout: out.Bytes(), Stderr: errb.Bytes()}
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			p.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	if err != nil {
		return p, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(errb.Bytes()))
	}
	return p, nil
}

// environ is this process's environment without GPUMETER_* settings, so
// that the gpumeter timed reads its ledger with the default config, as
// the benchmark's own in-process report does.
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUMETER_") {
			env = append(env, kv)
		}
	}
	return env
}

func tail(b []byte) string {
	const n = 2000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// procCPU is the CPU time process pid has had, all its threads: the sum
// of each thread's run time in /proc/PID/task/TID/schedstat, which the
// scheduler keeps to the nanosecond (/proc/PID/stat and
// process_cpu_seconds_total count 10 ms ticks, too coarse for one query).
// A thread that ends between two readings takes its time with it; Go
// seldom ends threads.
func procCPU(pid int) (time.Duration, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/schedstat")
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread ended
		}
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, fmt.Errorf("%s/%s/schedstat: empty", dir, e.Name())
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, e.Name(), err)
		}
		total += time.Duration(ns)
	}
	return total, nil
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) + " ms" }
