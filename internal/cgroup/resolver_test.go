package cgroup

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeProc is one process of a fake proc tree.
type fakeProc struct {
	comm   string
	start  uint64
	uid    int
	cgroup string
}

// statLine is a /proc/<pid>/stat line as the kernel writes it, taken from
// a container's process on the test host, with pid, comm and start time
// (field 22) swapped in.
func statLine(pid uint32, comm string, start uint64) string {
	return fmt.Sprintf("%d (%s) S 5729 %d %d 0 -1 4194560 1139 0 19 0 2 2 0 0 20 0 4 0 %d 1256439808 458 "+
		"18446744073709551615 4194304 4807185 140728440976256 0 0 0 0 0 2143420159 0 0 0 17 1 0 0 0 0 0 "+
		"5644288 5680832 886833152 140728440979329 140728440979344 140728440979344 140728440979439 0\n",
		pid, comm, pid, pid, start)
}

// statusText is a /proc/<pid>/status file cut after the lines a resolver
// may look at, with the uid swapped in.
func statusText(comm string, uid int) string {
	return fmt.Sprintf("Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t5751\nNgid:\t0\nPid:\t5751\n"+
		"PPid:\t5729\nTracerPid:\t0\nUid:\t%d\t%d\t%d\t%d\nGid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t0 \n"+
		"VmPeak:\t 1226992 kB\nThreads:\t4\n", comm, uid, uid+1, uid+2, uid+3)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeProc(t *testing.T, root string, pid uint32, p fakeProc) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(int(pid)))
	writeFile(t, filepath.Join(dir, "stat"), statLine(pid, p.comm, p.start))
	writeFile(t, filepath.Join(dir, "status"), statusText(p.comm, p.uid))
	writeFile(t, filepath.Join(dir, "cgroup"), p.cgroup)
}

func testUsers() *Users { return NewUsers(filepath.Join("testdata", "passwd")) }

// newResolver returns a Resolver that is closed when the test ends.
func newResolver(tb testing.TB, procRoot string, users *Users) *Resolver {
	r := NewResolver(procRoot, users)
	tb.Cleanup(func() { r.Close() })
	return r
}

// checkHeld checks that r holds want stat files open (none off Linux): by
// its count, by its entries, and by the test process's descriptors on
// files under root.
func checkHeld(t *testing.T, r *Resolver, root string, want int) {
	t.Helper()
	if runtime.GOOS != "linux" {
		want = 0
	}
	r.mu.Lock()
	held, open := r.held, 0
	for _, c := range r.cache {
		if c.stat.isOpen() {
			open++
		}
	}
	r.mu.Unlock()
	if held != want || open != want {
		t.Errorf("resolver counts %d held stat files and has %d entries with one, want %d", held, open, want)
	}
	if runtime.GOOS != "linux" {
		return
	}
	if got := openFilesUnder(t, root); got != want {
		t.Errorf("%d descriptors open on files under %s, want %d", got, root, want)
	}
}

// openFilesUnder counts the test process's descriptors open on files
// under root, deleted ones included.
func openFilesUnder(t *testing.T, root string) int {
	t.Helper()
	root, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		// A descriptor closed since ReadDir fails to read, and is not held.
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(target, root+"/") {
			n++
		}
	}
	return n
}

func TestResolve(t *testing.T) {
	docker := "0::/system.slice/docker-" + testID + ".scope\n"
	dockerRef := Ref{testID, "docker", "/system.slice/docker-" + testID + ".scope"}
	tests := []struct {
		name string
		pid  uint32
		proc fakeProc
		want Proc
	}{
		{"plain", 1234, fakeProc{"python3", 29045, 1000, docker},
			Proc{1234, 29045, 1000, "alice", dockerRef}},
		{"parentheses in comm", 1234, fakeProc{"my (weird) proc", 7, 1001, docker},
			Proc{1234, 7, 1001, "bob", dockerRef}},
		{"comm that looks like fields", 1234, fakeProc{"a) S 1 2 3 (b", 8, 0, docker},
			Proc{1234, 8, 0, "root", dockerRef}},
		{"comm of a closing parenthesis", 1234, fakeProc{")", 9, 0, docker},
			Proc{1234, 9, 0, "root", dockerRef}},
		{"empty comm", 1234, fakeProc{"", 10, 0, docker},
			Proc{1234, 10, 0, "root", dockerRef}},
		{"uid not in passwd", 99, fakeProc{"train.py", 11, 4242, docker},
			Proc{99, 11, 4242, "4242", dockerRef}},
		{"host process", 1, fakeProc{"systemd", 1, 0, "0::/init.scope\n"},
			Proc{1, 1, 0, "root", Ref{}}},
		{"largest pid and start time", 4194304, fakeProc{"x", 18446744073709551615, 65534, docker},
			Proc{4194304, 18446744073709551615, 65534, "nobody", dockerRef}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeProc(t, root, tt.pid, tt.proc)
			got, err := newResolver(t, root, testUsers()).Resolve(tt.pid)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Resolve mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResolveCaptured reads files copied from a Docker container's main
// process on a cgroup v1 host.
func TestResolveCaptured(t *testing.T) {
	got, err := newResolver(t, filepath.Join("testdata", "proc"), testUsers()).Resolve(5751)
	if err != nil {
		t.Fatal(err)
	}
	want := Proc{PID: 5751, StartTime: 29045, UID: 0, User: "root",
		Ref: Ref{capturedID, "docker", "/docker/" + capturedID}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Resolve mismatch (-want +got):\n%s", diff)
	}
}

func TestResolverNilUsers(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, 5, fakeProc{"x", 1, 1000, "0::/\n"})
	got, err := newResolver(t, root, nil).Resolve(5)
	if err != nil {
		t.Fatal(err)
	}
	if got.User != "1000" {
		t.Errorf("User = %q, want %q", got.User, "1000")
	}
}

func TestResolverWarmReadsOnlyStat(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, 1234, fakeProc{"python3", 100, 1000, "0::/docker/" + testID + "\n"})
	r := newResolver(t, root, testUsers())
	first, err := r.Resolve(1234)
	if err != nil {
		t.Fatal(err)
	}
	// With status and cgroup gone, only a lookup that never opens them
	// can still succeed.
	for _, f := range []string{"status", "cgroup"} {
		if err := os.Remove(filepath.Join(root, "1234", f)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.Resolve(1234)
	if err != nil {
		t.Fatalf("warm Resolve: %v", err)
	}
	if diff := cmp.Diff(first, got); diff != "" {
		t.Errorf("warm Resolve mismatch (-want +got):\n%s", diff)
	}
	checkHeld(t, r, root, 1)
}

func TestResolverPIDReuse(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, 1234, fakeProc{"python3", 100, 1000, "0::/docker/" + testOuterID + "\n"})
	r := newResolver(t, root, testUsers())
	got, err := r.Resolve(1234)
	if err != nil {
		t.Fatal(err)
	}
	if got.Ref.ContainerID != testOuterID {
		t.Fatalf("first Resolve: ContainerID = %q, want %q", got.Ref.ContainerID, testOuterID)
	}

	// The process exits and another one, in another container and of
	// another user, gets its PID.
	writeProc(t, root, 1234, fakeProc{"bash", 5000, 1001, "0::/system.slice/docker-" + testInnerID + ".scope\n"})
	got, err = r.Resolve(1234)
	if err != nil {
		t.Fatal(err)
	}
	want := Proc{1234, 5000, 1001, "bob", Ref{testInnerID, "docker", "/system.slice/docker-" + testInnerID + ".scope"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Resolve after PID reuse mismatch (-want +got):\n%s", diff)
	}
	// The new process is cached in turn.
	if err := os.Remove(filepath.Join(root, "1234", "cgroup")); err != nil {
		t.Fatal(err)
	}
	if got, err = r.Resolve(1234); err != nil || got.StartTime != 5000 {
		t.Errorf("warm Resolve after reuse = %+v, %v; want start time 5000", got, err)
	}
}

func TestResolverVanished(t *testing.T) {
	full := fakeProc{"python3", 100, 1000, "0::/docker/" + testID + "\n"}
	tests := []struct {
		name   string
		remove []string // files of /proc/1234 that are gone
	}{
		{"no process directory", []string{"."}},
		{"stat gone", []string{"stat"}},
		{"status gone after stat was read", []string{"status"}},
		{"cgroup gone after status was read", []string{"cgroup"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeProc(t, root, 1234, full)
			for _, f := range tt.remove {
				if err := os.RemoveAll(filepath.Join(root, "1234", f)); err != nil {
					t.Fatal(err)
				}
			}
			r := newResolver(t, root, testUsers())
			got, err := r.Resolve(1234)
			if !errors.Is(err, ErrNoProcess) {
				t.Fatalf("Resolve = %+v, %v; want an error wrapping ErrNoProcess", got, err)
			}
			if !strings.Contains(err.Error(), "pid 1234") {
				t.Errorf("error %q does not name the pid", err)
			}
			if len(r.cache) != 0 {
				t.Errorf("cache holds %d entries after a failed resolve, want 0", len(r.cache))
			}
		})
	}

	// A held stat file of a reaped process fails to read (see
	// TestResolveReaped); a deleted fake file would still read its old
	// content, so the fake process is emptied before it is removed. A
	// cache past its cap of held files meets the removal alone.
	for _, held := range []bool{true, false} {
		t.Run(fmt.Sprintf("gone after it was cached/held=%t", held), func(t *testing.T) {
			root := t.TempDir()
			writeProc(t, root, 1234, full)
			r := newResolver(t, root, testUsers())
			if !held {
				r.maxHeld = 0
			}
			if _, err := r.Resolve(1234); err != nil {
				t.Fatal(err)
			}
			if held {
				if err := os.Truncate(filepath.Join(root, "1234", "stat"), 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.RemoveAll(filepath.Join(root, "1234")); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Resolve(1234); !errors.Is(err, ErrNoProcess) {
				t.Fatalf("Resolve error = %v, want ErrNoProcess", err)
			}
			if len(r.cache) != 0 {
				t.Errorf("cache holds %d entries for a vanished process, want 0", len(r.cache))
			}
			checkHeld(t, r, root, 0)
		})
	}
}

func TestResolverBadFiles(t *testing.T) {
	good := fakeProc{"python3", 100, 1000, "0::/docker/" + testID + "\n"}
	tests := []struct {
		name      string
		file      string // replaced in /proc/1234
		content   string
		wantError string
	}{
		{"empty stat", "stat", "", "/1234/stat: no (comm) field"},
		{"stat garbage", "stat", "garbage\n", "no (comm) field"},
		{"stat binary", "stat", "\x00\xff)\x01(\x7f", "no (comm) field"},
		{"stat without closing parenthesis", "stat", "1234 (python3 S 1 2 3\n", "no (comm) field"},
		{"stat without pid", "stat", "(python3) S 1\n", "no (comm) field"},
		{"stat of another pid", "stat", statLine(4321, "python3", 100), `pid field "4321" is not 1234`},
		{"stat cut short", "stat", "1234 (python3) S 1 2 3\n", "field 7 missing"},
		{"stat cut after field 21", "stat", strings.Join(strings.Fields(statLine(1234, "x", 1))[:21], " "),
			"field 22 missing"},
		{"start time cut short", "stat", strings.Join(strings.Fields(statLine(1234, "x", 77))[:22], " "),
			"field 22 cut short"},
		{"start time not a number", "stat", strings.Replace(statLine(1234, "x", 77), " 77 ", " -77 ", 1),
			`start time "-77" is not a number`},
		{"start time overflows", "stat", strings.Replace(statLine(1234, "x", 77), " 77 ", " 18446744073709551616 ", 1),
			`start time "18446744073709551616" is not a number`},
		{"double spaces", "stat", strings.ReplaceAll(statLine(1234, "x", 1), " ", "  "), `pid field "1234 " is not 1234`},
		{"double spaces after comm", "stat", strings.ReplaceAll(statLine(1234, "x", 1), " 5729 ", "  5729 "), "field 4 missing"},
		{"status without Uid", "status", "Name:\tpython3\nGid:\t0\t0\t0\t0\n", "no Uid line"},
		{"status with empty Uid", "status", "Name:\tx\nUid:\n", "empty Uid line"},
		{"status with bad uid", "status", "Name:\tx\nUid:\tabc\t0\t0\t0\n", `uid "abc" is not a number`},
		{"bad cgroup", "cgroup", "0:/docker\n", "cgroup: line 1: want hierarchy-ID:controllers:path"},
		{"empty cgroup", "cgroup", "", "cgroup: line 1: want hierarchy-ID:controllers:path, got an empty file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeProc(t, root, 1234, good)
			writeFile(t, filepath.Join(root, "1234", tt.file), tt.content)
			got, err := newResolver(t, root, testUsers()).Resolve(1234)
			if err == nil {
				t.Fatalf("Resolve = %+v, nil; want an error", got)
			}
			if errors.Is(err, ErrNoProcess) {
				t.Errorf("Resolve error %q wraps ErrNoProcess for a process that exists", err)
			}
			if !strings.Contains(err.Error(), tt.wantError) {
				t.Errorf("Resolve error = %q, want it to contain %q", err, tt.wantError)
			}
		})
	}

	t.Run("stat turns bad after it was cached", func(t *testing.T) {
		root := t.TempDir()
		writeProc(t, root, 1234, good)
		r := newResolver(t, root, testUsers())
		if _, err := r.Resolve(1234); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(root, "1234", "stat"), "junk")
		if _, err := r.Resolve(1234); err == nil || errors.Is(err, ErrNoProcess) {
			t.Errorf("Resolve error = %v, want a parse error", err)
		}
		if len(r.cache) != 0 {
			t.Errorf("cache holds %d entries, want 0", len(r.cache))
		}
		checkHeld(t, r, root, 0)
	})
}

func TestResolverPrune(t *testing.T) {
	root := t.TempDir()
	r := newResolver(t, root, testUsers())
	for pid := uint32(1); pid <= 5; pid++ {
		writeProc(t, root, pid, fakeProc{"x", uint64(pid), 0, "0::/\n"})
		if _, err := r.Resolve(pid); err != nil {
			t.Fatal(err)
		}
	}
	checkHeld(t, r, root, 5)
	r.Prune(func(pid uint32) bool { return pid%2 == 1 })
	got := slices.Sorted(maps.Keys(r.cache))
	if diff := cmp.Diff([]uint32{1, 3, 5}, got); diff != "" {
		t.Errorf("cached PIDs after Prune mismatch (-want +got):\n%s", diff)
	}
	checkHeld(t, r, root, 3)
}

// TestResolverHeldCap resolves more processes than the cache may hold
// stat files open for: the ones past the cap are still cached and looked
// up correctly, by opening their file each time, and a Prune makes room
// for the next process.
func TestResolverHeldCap(t *testing.T) {
	root := t.TempDir()
	r := newResolver(t, root, testUsers())
	r.maxHeld = 2
	for pid := uint32(1); pid <= 5; pid++ {
		writeProc(t, root, pid, fakeProc{"x", uint64(pid), 0, "0::/\n"})
		if _, err := r.Resolve(pid); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.cache) != 5 {
		t.Fatalf("cache holds %d entries, want 5", len(r.cache))
	}
	checkHeld(t, r, root, 2)
	if runtime.GOOS == "linux" {
		for pid, c := range r.cache {
			if got, want := c.stat.isOpen(), pid <= 2; got != want {
				t.Errorf("entry of pid %d holds its stat file: %t, want %t", pid, got, want)
			}
		}
	}

	// Every PID is reused, the ones with a held file and the ones without.
	for pid := uint32(1); pid <= 5; pid++ {
		writeProc(t, root, pid, fakeProc{"y", uint64(pid) + 100, 1000, "0::/\n"})
	}
	for pid := uint32(1); pid <= 5; pid++ {
		got, err := r.Resolve(pid)
		if err != nil {
			t.Fatal(err)
		}
		if got.StartTime != uint64(pid)+100 || got.User != "alice" {
			t.Errorf("Resolve(%d) after reuse = %+v, want start time %d of alice", pid, got, pid+100)
		}
	}
	checkHeld(t, r, root, 2)

	r.Prune(func(pid uint32) bool { return pid != 1 && pid != 3 })
	checkHeld(t, r, root, 1)
	writeProc(t, root, 6, fakeProc{"x", 6, 0, "0::/\n"})
	if _, err := r.Resolve(6); err != nil {
		t.Fatal(err)
	}
	checkHeld(t, r, root, 2)
	if runtime.GOOS == "linux" && !r.cache[6].stat.isOpen() {
		t.Error("pid 6, resolved after a Prune made room, does not hold its stat file")
	}
}

func TestResolverClose(t *testing.T) {
	root := t.TempDir()
	r := NewResolver(root, testUsers())
	for pid := uint32(1); pid <= 3; pid++ {
		writeProc(t, root, pid, fakeProc{"x", uint64(pid), 0, "0::/\n"})
		if _, err := r.Resolve(pid); err != nil {
			t.Fatal(err)
		}
	}
	checkHeld(t, r, root, 3)
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	checkHeld(t, r, root, 0)
	for _, pid := range []uint32{1, 4} {
		if got, err := r.Resolve(pid); !errors.Is(err, ErrClosed) {
			t.Errorf("Resolve(%d) after Close = %+v, %v; want ErrClosed", pid, got, err)
		}
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestResolverConcurrent resolves, reuses and prunes PIDs from many
// goroutines; run it with -race.
func TestResolverConcurrent(t *testing.T) {
	root := t.TempDir()
	const pids = 8
	for pid := uint32(1); pid <= pids; pid++ {
		writeProc(t, root, pid, fakeProc{"x", 1, 1000, "0::/docker/" + testID + "\n"})
	}
	r := newResolver(t, root, testUsers())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				pid := uint32(i%pids + 1)
				p, err := r.Resolve(pid)
				if err != nil {
					t.Errorf("Resolve(%d): %v", pid, err)
					return
				}
				if p.PID != pid || p.User != "alice" || p.Ref.ContainerID != testID {
					t.Errorf("Resolve(%d) = %+v", pid, p)
					return
				}
				if g == 0 && i%50 == 0 {
					r.Prune(func(uint32) bool { return false })
				}
			}
		})
	}
	wg.Wait()
	checkHeld(t, r, root, len(r.cache))
}

// TestResolverConcurrentClose closes a Resolver while other goroutines
// look up, reuse and prune PIDs: every lookup succeeds until Close and
// fails with ErrClosed after it, and no stat file is left open. Run it
// with -race.
func TestResolverConcurrentClose(t *testing.T) {
	root := t.TempDir()
	const pids = 8
	for pid := uint32(1); pid <= pids; pid++ {
		writeProc(t, root, pid, fakeProc{"x", 1, 1000, "0::/docker/" + testID + "\n"})
	}
	r := NewResolver(root, testUsers())
	r.maxHeld = pids / 2
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			closed := false
			for i := 0; i < 300 || !closed; i++ {
				if g == 1 && i == 100 {
					r.Close()
				}
				pid := uint32(i%pids + 1)
				p, err := r.Resolve(pid)
				switch {
				case errors.Is(err, ErrClosed):
					closed = true
				case closed:
					t.Errorf("Resolve(%d) after ErrClosed = %+v, %v; want ErrClosed", pid, p, err)
					return
				case err != nil:
					t.Errorf("Resolve(%d): %v", pid, err)
					return
				case p.PID != pid || p.Ref.ContainerID != testID:
					t.Errorf("Resolve(%d) = %+v", pid, p)
					return
				}
				if g == 0 && i%20 == 0 {
					r.Prune(func(pid uint32) bool { return pid%2 == 0 })
				}
			}
			if !closed {
				t.Error("no Resolve failed with ErrClosed")
			}
		})
	}
	wg.Wait()
	if len(r.cache) != 0 {
		t.Errorf("cache holds %d entries after Close, want 0", len(r.cache))
	}
	checkHeld(t, r, root, 0)
}

// TestResolveSelf resolves the test's own process through the real /proc.
func TestResolveSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs a Linux /proc")
	}
	pid := uint32(os.Getpid())
	r := newResolver(t, "/proc", NewUsers("/etc/passwd"))
	got, err := r.Resolve(pid)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	wantRef, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	wantUser := strconv.Itoa(os.Getuid())
	if u, err := user.LookupId(wantUser); err == nil {
		wantUser = u.Username
	}
	if got.PID != pid || got.StartTime == 0 || got.UID != os.Getuid() || got.User != wantUser {
		t.Errorf("Resolve(self) = %+v, want pid %d, a start time, uid %d, user %q", got, pid, os.Getuid(), wantUser)
	}
	if diff := cmp.Diff(wantRef, got.Ref); diff != "" {
		t.Errorf("Resolve(self).Ref mismatch (-want +got):\n%s", diff)
	}
	again, err := r.Resolve(pid)
	if err != nil || again != got {
		t.Errorf("warm Resolve(self) = %+v, %v; want %+v", again, err, got)
	}
}

func TestResolveWarmAllocs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the allocation-free read is Linux only")
	}
	root := t.TempDir()
	writeProc(t, root, 1234, fakeProc{"x", 1, 1000, "0::/\n"})
	r := newResolver(t, root, nil)
	if _, err := r.Resolve(1234); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { r.Resolve(1234) }); n != 0 {
		t.Errorf("warm Resolve allocates %v times, want 0", n)
	}

	// Past the cap of held files, the one allocation is the C string of
	// the path for open(2).
	unheld := newResolver(t, root, nil)
	unheld.maxHeld = 0
	if _, err := unheld.Resolve(1234); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { unheld.Resolve(1234) }); n > 1 {
		t.Errorf("warm Resolve past the cap allocates %v times, want at most 1", n)
	}
}

// benchPIDs returns up to n PIDs of the machine that resolve, and how many
// distinct ones there were. When fewer than n exist the list repeats them,
// so that a benchmark op is always n lookups.
func benchPIDs(b *testing.B, n int) ([]uint32, int) {
	if runtime.GOOS != "linux" {
		b.Skip("needs a Linux /proc")
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	r := NewResolver("/proc", nil)
	defer r.Close()
	var distinct []uint32
	for _, e := range ents {
		pid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		if _, err := r.Resolve(uint32(pid)); err == nil {
			distinct = append(distinct, uint32(pid))
		}
		if len(distinct) == n {
			break
		}
	}
	if len(distinct) == 0 {
		b.Fatal("no process under /proc resolves")
	}
	pids := make([]uint32, n)
	for i := range pids {
		pids[i] = distinct[i%len(distinct)]
	}
	return pids, len(distinct)
}

// BenchmarkResolveCold1000 resolves 1,000 real /proc PIDs with an empty
// cache: stat, status and cgroup of each. A machine with fewer processes
// gives its PIDs several times over; the distinct-pids metric says how
// many there were. Target: 50 ms per op.
func BenchmarkResolveCold1000(b *testing.B) {
	pids, distinct := benchPIDs(b, 1000)
	users := NewUsers("/etc/passwd")
	b.ReportAllocs()
	failed := 0
	for b.Loop() {
		r := NewResolver("/proc", users)
		for _, pid := range pids {
			// Each distinct PID once: a repeat would hit the cache.
			if _, ok := r.cache[pid]; ok {
				r.Prune(func(uint32) bool { return false })
			}
			if _, err := r.Resolve(pid); err != nil {
				failed++
			}
		}
		r.Close()
	}
	b.ReportMetric(float64(distinct), "distinct-pids")
	b.ReportMetric(float64(failed)/float64(b.N), "failed/op")
}

// BenchmarkResolveWarm1000 looks up 1,000 real /proc PIDs that are all
// cached: one pread of the held /proc/<pid>/stat each. Target: 5 ms per
// op.
func BenchmarkResolveWarm1000(b *testing.B) { benchmarkWarm(b, maxHeldStats) }

// BenchmarkResolveWarmUnheld1000 is BenchmarkResolveWarm1000 past the cap
// of held files: an open, read and close of /proc/<pid>/stat each. Its
// ratio to the held lookup, taken in one run, holds better than either
// figure on a loaded machine.
func BenchmarkResolveWarmUnheld1000(b *testing.B) { benchmarkWarm(b, 0) }

func benchmarkWarm(b *testing.B, maxHeld int) {
	pids, distinct := benchPIDs(b, 1000)
	r := newResolver(b, "/proc", NewUsers("/etc/passwd"))
	r.maxHeld = maxHeld
	for _, pid := range pids {
		r.Resolve(pid)
	}
	b.ReportAllocs()
	failed := 0
	for b.Loop() {
		for _, pid := range pids {
			if _, err := r.Resolve(pid); err != nil {
				failed++
			}
		}
	}
	b.ReportMetric(float64(distinct), "distinct-pids")
	b.ReportMetric(float64(failed)/float64(b.N), "failed/op")
}

// FuzzProcFiles feeds arbitrary bytes to the parsers of stat, status and
// passwd files: whatever a file holds, they return an error, not a panic.
func FuzzProcFiles(f *testing.F) {
	for _, name := range []string{"stat", "status", "cgroup"} {
		b, err := os.ReadFile(filepath.Join("testdata", "proc", "5751", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(statLine(5751, "a) S 1 (b", 1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		if start, err := parseStat(5751, b); err == nil && !strings.HasPrefix(string(b), "5751 (") {
			t.Errorf("parseStat(%q) = %d, nil for a file that is not pid 5751's", b, start)
		}
		if uid, err := parseUID(b); err == nil && uid < 0 {
			t.Errorf("parseUID(%q) = %d", b, uid)
		}
		parsePasswd(b)
	})
}
