package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
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
// because the PID now belongs to another process.
//
// On Linux the cache keeps the stat file of each cached process open, up
// to a cap, and a warm lookup rereads it with one pread, which takes well
// under half the time of an open, read and close. A held file also
// notices a reaped process by itself: reading it fails even after the PID
// was reused. The agent calls Close at shutdown to release the files.
// Past the cap, newly resolved processes are cached without a held file
// and looked up by opening it each time; Prune makes room again as
// processes go.
//
// A Resolver is safe for concurrent use.
type Resolver struct {
	procRoot string
	users    *Users
	maxHeld  int // stat files the cache keeps open at most

	mu     sync.Mutex
	cache  map[uint32]*cached
	held   int // entries of cache whose stat file is open
	closed bool
}

// maxHeldStats bounds the descriptors a Resolver holds, so that a host
// where processes come and go faster than Prune runs cannot exhaust them.
// Each held procfs file also pins about a page of kernel memory, some
// 20 MiB at the cap.
const maxHeldStats = 4096

// ErrClosed is returned by Resolve after Close.
var ErrClosed = errors.New("resolver closed")

type cached struct {
	proc Proc
	stat statFile
	// refs counts the cache's own hold on stat, plus one for each lookup
	// reading it outside the lock. The last one out closes the file, so
	// that no read reaches a descriptor that was closed, and perhaps
	// reused for another file, under it.
	refs atomic.Int32
}

func (c *cached) release() {
	if c.refs.Add(-1) == 0 {
		c.stat.close()
	}
}

// NewResolver returns a Resolver that reads the process files under
// procRoot and names users through users (nil: every user shows as the
// decimal uid).
func NewResolver(procRoot string, users *Users) *Resolver {
	return &Resolver{procRoot: procRoot, users: users, maxHeld: maxHeldStats, cache: make(map[uint32]*cached)}
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
// an error wrapping ErrNoProcess; a closed Resolver gives ErrClosed.
func (r *Resolver) Resolve(pid uint32) (Proc, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return Proc{}, ErrClosed
	}
	c := r.cache[pid]
	if c != nil {
		c.refs.Add(1)
	}
	r.mu.Unlock()
	if c != nil {
		start, err := startTime(pid, c.stat)
		c.release()
		if err == nil && start == c.proc.StartTime {
			return c.proc, nil
		}
		// The process is gone, its file no longer reads, or the PID now
		// belongs to another process: a cold resolve tells which.
		r.mu.Lock()
		if r.cache[pid] == c {
			r.drop(pid, c)
		}
		r.mu.Unlock()
	}

	c, err := r.resolve(pid)
	if err != nil {
		return Proc{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.stat.close()
		return Proc{}, ErrClosed
	}
	if old := r.cache[pid]; old != nil {
		// A concurrent Resolve got here first.
		r.drop(pid, old)
	}
	if c.stat.isOpen() {
		if r.held < r.maxHeld {
			r.held++
		} else {
			c.stat = c.stat.unheld()
		}
	}
	r.cache[pid] = c
	return c.proc, nil
}

// drop removes c, the entry of pid, from the cache. r.mu must be held.
func (r *Resolver) drop(pid uint32, c *cached) {
	delete(r.cache, pid)
	if c.stat.isOpen() {
		r.held--
	}
	c.release()
}

// Prune drops the cache entries of the PIDs that keep rejects, closing
// their stat files. keep runs with the cache locked and must not call back
// into r.
func (r *Resolver) Prune(keep func(pid uint32) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for pid, c := range r.cache {
		if !keep(pid) {
			r.drop(pid, c)
		}
	}
}

// Close empties the cache and closes the stat files it holds open; a
// lookup still reading one closes it when done. The agent calls it at
// shutdown. Resolve after Close returns ErrClosed. The error result is
// always nil: it is there for io.Closer.
func (r *Resolver) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for pid, c := range r.cache {
		r.drop(pid, c)
	}
	return nil
}

// startTime reads the start time of pid from its stat file.
func startTime(pid uint32, f statFile) (uint64, error) {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	buf := (*bp)[:statReadSize]
	n, err := f.read(buf)
	if err != nil {
		return 0, procErr(pid, err)
	}
	start, err := parseStat(pid, buf[:n])
	if err != nil {
		return 0, fmt.Errorf("pid %d: %s: %w", pid, f.path, err)
	}
	return start, nil
}

// resolve reads a process from scratch: stat, status and cgroup, all
// through one open /proc/<pid> directory. It returns a cache entry that
// keeps the stat file open, where the platform allows, for later warm
// lookups.
func (r *Resolver) resolve(pid uint32) (*cached, error) {
	d, err := openProcDir(r.procRoot + "/" + strconv.FormatUint(uint64(pid), 10))
	if err != nil {
		return nil, procErr(pid, err)
	}
	defer d.close()
	bp := bufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooled {
			bufs.Put(bp)
		}
	}()

	stat, b, err := d.openStat(*bp)
	if err != nil {
		return nil, procErr(pid, err)
	}
	*bp = b
	p, err := r.parseProc(pid, d, b, bp)
	if err != nil {
		stat.close()
		return nil, err
	}
	c := &cached{proc: p, stat: stat}
	c.refs.Store(1)
	return c, nil
}

// parseProc parses stat, held in b, and reads and parses status and
// cgroup into *bp.
func (r *Resolver) parseProc(pid uint32, d procDir, b []byte, bp *[]byte) (Proc, error) {
	start, err := parseStat(pid, b)
	if err != nil {
		return Proc{}, fmt.Errorf("pid %d: %s/stat: %w", pid, d.path, err)
	}

	b, err = d.readFile("status", *bp, hasUID)
	if err != nil {
		return Proc{}, procErr(pid, err)
	}
	*bp = b
	uid, err := parseUID(b)
	if err != nil {
		return Proc{}, fmt.Errorf("pid %d: %s/status: %w", pid, d.path, err)
	}

	b, err = d.readFile("cgroup", *bp, nil)
	if err != nil {
		return Proc{}, procErr(pid, err)
	}
	*bp = b
	ref, err := Parse(b)
	if err != nil {
		return Proc{}, fmt.Errorf("pid %d: %s/cgroup: %w", pid, d.path, err)
	}
	return Proc{PID: pid, StartTime: start, UID: uid, User: r.users.Name(uid), Ref: ref}, nil
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
		i := fieldEnd(rest)
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

// fieldEnd returns the index of the space or newline that ends the field
// b starts with, or -1. A loop, because bytes.IndexAny builds its set of
// bytes on each call, which shows on the warm path.
func fieldEnd(b []byte) int {
	for i, c := range b {
		if c == ' ' || c == '\n' {
			return i
		}
	}
	return -1
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
