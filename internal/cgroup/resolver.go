package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
)

// ErrNoProcess says the process is gone: its /proc entry vanished before or
// while it was read.
var ErrNoProcess = errors.New("no such process")

// Proc is a resolved process.
type Proc struct {
	PID uint32
	// StartTime is field 22 of /proc/<pid>/stat, in clock ticks since
	// boot. Together with PID it names one process for the life of the
	// host, where a PID alone is reused.
	StartTime uint64
	// UID is the real uid from /proc/<pid>/status.
	UID int
	// User is the name of UID in the passwd file, or the decimal uid when
	// the file does not know it.
	User string
	Ref  Ref
}

// Resolver maps PIDs to processes, reading files under a proc root
// (normally /proc; /host/proc when the agent runs in a container). It
// caches on (PID, start time): a lookup of a cached PID reads only
// /proc/<pid>/stat, and resolves the PID again when its start time changed
// because the PID now belongs to another process. It is safe for
// concurrent use.
type Resolver struct {
	procRoot string
	users    *Users

	mu    sync.Mutex
	cache map[uint32]cached
}

type cached struct {
	proc     Proc
	statPath string // kept so that a warm lookup builds no path
}

// NewResolver returns a Resolver that reads the process files under
// procRoot and names users through users (nil: every user shows as the
// decimal uid).
func NewResolver(procRoot string, users *Users) *Resolver {
	return &Resolver{procRoot: procRoot, users: users, cache: make(map[uint32]cached)}
}

// bufs holds read buffers; a cold resolve reads three files, a warm one
// only stat, and neither should allocate a buffer each time.
var bufs = sync.Pool{New: func() any {
	b := make([]byte, 0, 4096)
	return &b
}}

// maxPooled keeps one oversized file from pinning a large buffer.
const maxPooled = 64 << 10

// statReadSize bounds the one read of /proc/<pid>/stat on the warm path.
// Fields 1-22 take at most about 500 bytes (a 64-byte comm, 20-digit
// numbers); later fields may be cut off, and are not needed.
const statReadSize = 1024

// Resolve returns the process with this PID. A process that is gone gives
// an error wrapping ErrNoProcess.
func (r *Resolver) Resolve(pid uint32) (Proc, error) {
	r.mu.Lock()
	c, ok := r.cache[pid]
	r.mu.Unlock()
	if ok {
		start, err := r.startTime(pid, c.statPath)
		if err == nil && start == c.proc.StartTime {
			return c.proc, nil
		}
		if err != nil {
			r.forget(pid, c.proc.StartTime)
			return Proc{}, err
		}
		// The PID was reused: resolve the new process below.
	}

	p, statPath, err := r.resolve(pid)
	if err != nil {
		if ok {
			r.forget(pid, c.proc.StartTime)
		}
		return Proc{}, err
	}
	r.mu.Lock()
	r.cache[pid] = cached{proc: p, statPath: statPath}
	r.mu.Unlock()
	return p, nil
}

// forget drops the cache entry for pid unless a concurrent Resolve has
// already replaced it with another process.
func (r *Resolver) forget(pid uint32, start uint64) {
	r.mu.Lock()
	if c, ok := r.cache[pid]; ok && c.proc.StartTime == start {
		delete(r.cache, pid)
	}
	r.mu.Unlock()
}

// Prune drops the cache entries of the PIDs that keep rejects. keep runs
// with the cache locked and must not call back into r.
func (r *Resolver) Prune(keep func(pid uint32) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for pid := range r.cache {
		if !keep(pid) {
			delete(r.cache, pid)
		}
	}
}

// startTime reads the start time of pid with one open and one read.
func (r *Resolver) startTime(pid uint32, statPath string) (uint64, error) {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	buf := (*bp)[:statReadSize]
	n, err := readOnce(statPath, buf)
	if err != nil {
		return 0, procErr(pid, err)
	}
	start, err := parseStat(pid, buf[:n])
	if err != nil {
		return 0, fmt.Errorf("pid %d: %s: %w", pid, statPath, err)
	}
	return start, nil
}

// resolve reads a process from scratch: stat, status and cgroup, all
// through one open /proc/<pid> directory. It also returns the path of the
// stat file for later warm lookups.
func (r *Resolver) resolve(pid uint32) (Proc, string, error) {
	d, err := openProcDir(r.procRoot + "/" + strconv.FormatUint(uint64(pid), 10))
	if err != nil {
		return Proc{}, "", procErr(pid, err)
	}
	defer d.close()
	bp := bufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooled {
			bufs.Put(bp)
		}
	}()

	b, err := d.readFile("stat", *bp, endsLine)
	if err != nil {
		return Proc{}, "", procErr(pid, err)
	}
	*bp = b
	start, err := parseStat(pid, b)
	if err != nil {
		return Proc{}, "", fmt.Errorf("pid %d: %s/stat: %w", pid, d.path, err)
	}

	b, err = d.readFile("status", *bp, hasUID)
	if err != nil {
		return Proc{}, "", procErr(pid, err)
	}
	*bp = b
	uid, err := parseUID(b)
	if err != nil {
		return Proc{}, "", fmt.Errorf("pid %d: %s/status: %w", pid, d.path, err)
	}

	b, err = d.readFile("cgroup", *bp, nil)
	if err != nil {
		return Proc{}, "", procErr(pid, err)
	}
	*bp = b
	ref, err := Parse(b)
	if err != nil {
		return Proc{}, "", fmt.Errorf("pid %d: %s/cgroup: %w", pid, d.path, err)
	}

	p := Proc{PID: pid, StartTime: start, UID: uid, User: r.users.Name(uid), Ref: ref}
	return p, d.path + "/stat", nil
}

// procErr wraps a failed open or read; a process that went away is
// ErrNoProcess.
func procErr(pid uint32, err error) error {
	if gone(err) {
		return fmt.Errorf("pid %d: %w: %w", pid, ErrNoProcess, err)
	}
	return fmt.Errorf("pid %d: %w", pid, err)
}

func endsLine(b []byte) bool { return len(b) > 0 && b[len(b)-1] == '\n' }

func hasUID(b []byte) bool {
	_, after, ok := bytes.Cut(b, []byte("\nUid:"))
	return ok && bytes.IndexByte(after, '\n') >= 0
}

// parseStat returns the start time (field 22) from the contents of
// /proc/<pid>/stat, checking that the file is pid's. The command name in
// field 2 may hold spaces and parentheses, so the fields after it are
// found from the last ')'.
func parseStat(pid uint32, b []byte) (uint64, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 2 || end < open || b[open-1] != ' ' {
		return 0, errors.New("no (comm) field")
	}
	if field1 := b[:open-1]; !pidIs(field1, pid) {
		return 0, fmt.Errorf("pid field %q is not %d", field1, pid)
	}
	// Fields 3 to 22 follow the comm, one space before each.
	rest := b[end+1:]
	for field := 3; ; field++ {
		if len(rest) < 2 || rest[0] != ' ' || rest[1] == ' ' || rest[1] == '\n' {
			return 0, fmt.Errorf("field %d missing", field)
		}
		rest = rest[1:]
		i := bytes.IndexAny(rest, " \n")
		if field < 22 {
			if i < 0 {
				return 0, fmt.Errorf("field %d missing", field+1)
			}
			rest = rest[i:]
			continue
		}
		if i < 0 {
			return 0, errors.New("field 22 cut short")
		}
		start, ok := parseDec(rest[:i])
		if !ok {
			return 0, fmt.Errorf("start time %q is not a number", rest[:i])
		}
		return start, nil
	}
}

// pidIs reports whether b is pid as the kernel writes it.
func pidIs(b []byte, pid uint32) bool {
	n, ok := parseDec(b)
	return ok && n == uint64(pid) && (b[0] != '0' || len(b) == 1)
}

// parseDec parses a decimal uint64 without the string conversion that
// strconv would need.
func parseDec(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// parseUID returns the real uid, the first number of the Uid line of
// /proc/<pid>/status.
func parseUID(b []byte) (int, error) {
	_, line, ok := bytes.Cut(b, []byte("\nUid:"))
	if !ok {
		return 0, errors.New("no Uid line")
	}
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	f := bytes.Fields(line)
	if len(f) == 0 {
		return 0, errors.New("empty Uid line")
	}
	uid, err := strconv.ParseUint(string(f[0]), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("uid %q is not a number", f[0])
	}
	return int(uid), nil
}
