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
			got, err := NewResolver(root, testUsers()).Resolve(tt.pid)
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
	got, err := NewResolver(filepath.Join("testdata", "proc"), testUsers()).Resolve(5751)
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
	got, err := NewResolver(root, nil).Resolve(5)
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
	r := NewResolver(root, testUsers())
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
}

func TestResolverPIDReuse(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, 1234, fakeProc{"python3", 100, 1000, "0::/docker/" + testOuterID + "\n"})
	r := NewResolver(root, testUsers())
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
			r := NewResolver(root, testUsers())
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

	t.Run("gone after it was cached", func(t *testing.T) {
		root := t.TempDir()
		writeProc(t, root, 1234, full)
		r := NewResolver(root, testUsers())
		if _, err := r.Resolve(1234); err != nil {
			t.Fatal(err)
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
	})
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
			got, err := NewResolver(root, testUsers()).Resolve(1234)
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
		r := NewResolver(root, testUsers())
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
	})
}

func TestResolverPrune(t *testing.T) {
	root := t.TempDir()
	r := NewResolver(root, testUsers())
	for pid := uint32(1); pid <= 5; pid++ {
		writeProc(t, root, pid, fakeProc{"x", uint64(pid), 0, "0::/\n"})
		if _, err := r.Resolve(pid); err != nil {
			t.Fatal(err)
		}
	}
	r.Prune(func(pid uint32) bool { return pid%2 == 1 })
	got := slices.Sorted(maps.Keys(r.cache))
	if diff := cmp.Diff([]uint32{1, 3, 5}, got); diff != "" {
		t.Errorf("cached PIDs after Prune mismatch (-want +got):\n%s", diff)
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
	r := NewResolver(root, testUsers())
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
}

// TestResolveSelf resolves the test's own process through the real /proc.
func TestResolveSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs a Linux /proc")
	}
	pid := uint32(os.Getpid())
	r := NewResolver("/proc", NewUsers("/etc/passwd"))
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
	r := NewResolver(root, nil)
	if _, err := r.Resolve(1234); err != nil {
		t.Fatal(err)
	}
	// The one allocation left is the C string of the path for open(2).
	if n := testing.AllocsPerRun(100, func() { r.Resolve(1234) }); n > 1 {
		t.Errorf("warm Resolve allocates %v times, want at most 1", n)
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
				r.cache = make(map[uint32]cached)
			}
			if _, err := r.Resolve(pid); err != nil {
				failed++
			}
		}
	}
	b.ReportMetric(float64(distinct), "distinct-pids")
	b.ReportMetric(float64(failed)/float64(b.N), "failed/op")
}

// BenchmarkResolveWarm1000 looks up 1,000 real /proc PIDs that are all
// cached: one read of /proc/<pid>/stat each. Target: 5 ms per op.
func BenchmarkResolveWarm1000(b *testing.B) {
	pids, distinct := benchPIDs(b, 1000)
	r := NewResolver("/proc", NewUsers("/etc/passwd"))
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
