package stage

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/testenv"
	"golang.org/x/sys/unix"
)

// needMount skips (or fails under CI) where this process cannot mount.
func needMount(t *testing.T) {
	t.Helper()
	d := t.TempDir()
	err := unix.Mount("none", d, "tmpfs", 0, "size=4k")
	if err != nil {
		testenv.SkipUnlessCI(t, "this process cannot mount (%v); staging needs CAP_SYS_ADMIN", err)
		return
	}
	_ = unix.Unmount(d, unix.MNT_DETACH)
}

// tree is a mount root with a directory and a file, and a staging
// directory beside it.
type tree struct {
	root, dir, file string
	stage           *Dir
}

func newTree(t *testing.T) tree {
	t.Helper()
	needMount(t)
	base := t.TempDir()
	tr := tree{root: filepath.Join(base, "root")}
	tr.dir = filepath.Join(tr.root, "alice")
	tr.file = filepath.Join(tr.root, "alice", "weights.bin")
	if err := os.MkdirAll(tr.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tr.file, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Open(filepath.Join(base, "stage"))
	if err != nil {
		t.Fatal(err)
	}
	tr.stage = d
	t.Cleanup(func() {
		jobs, _ := d.Jobs()
		for _, j := range jobs {
			if err := d.Unstage(j); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	return tr
}

func (tr tree) open(t *testing.T, p string) *spec.Source {
	t.Helper()
	s, err := spec.OpenSource(p, []string{tr.root}, spec.Identity{}, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func isMountPoint(t *testing.T, p string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && unescape(f[4]) == p {
			return true
		}
	}
	return false
}

func TestBindAndUnstage(t *testing.T) {
	tests := []struct {
		name     string
		source   func(tree) string
		readOnly bool
	}{
		{"directory read-write", func(tr tree) string { return tr.dir }, false},
		{"directory read-only", func(tr tree) string { return tr.dir }, true},
		{"file read-write", func(tr tree) string { return tr.file }, false},
		{"file read-only", func(tr tree) string { return tr.file }, true},
	}
	for _, classic := range []bool{false, true} {
		for _, tt := range tests {
			name := tt.name
			if classic {
				name += ", mount(2)"
			}
			t.Run(name, func(t *testing.T) { testBind(t, tt.source, tt.readOnly, classic) })
		}
	}
}

func testBind(t *testing.T, source func(tree) string, readOnly, classic bool) {
	tr := newTree(t)
	tr.stage.classic = classic
	src := tr.open(t, source(tr))
	p, err := tr.stage.Bind("j-000001", 0, src.FD(), src.Dir, readOnly)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(tr.stage.Path(), "j-000001", "0"); p != want {
		t.Errorf("staged at %s, want %s", p, want)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.IsDir() != src.Dir {
		t.Errorf("staged target is a directory: %v, the source: %v", fi.IsDir(), src.Dir)
	}
	if !isMountPoint(t, p) {
		t.Errorf("%s is no mount point", p)
	}
	probe := filepath.Join(p, "weights.bin")
	if !src.Dir {
		probe = p
	}
	if b, err := os.ReadFile(probe); err != nil || string(b) != "weights" {
		t.Errorf("read through the stage: %q, %v", b, err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(p, &sfs); err != nil {
		t.Fatal(err)
	}
	if ro := sfs.Flags&unix.ST_RDONLY != 0; ro != readOnly {
		t.Errorf("stage read-only %v, want %v", ro, readOnly)
	}
	f, err := os.OpenFile(probe, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		f.Close()
	}
	if readOnly && !errors.Is(err, unix.EROFS) {
		t.Errorf("write through a read-only stage: %v, want EROFS", err)
	}
	if !readOnly && err != nil {
		t.Errorf("write through a read-write stage: %v", err)
	}
	jobs, err := tr.stage.Jobs()
	if err != nil || !slices.Equal(jobs, []string{"j-000001"}) {
		t.Errorf("Jobs: %v, %v; want [j-000001]", jobs, err)
	}

	if err := tr.stage.Unstage("j-000001"); err != nil {
		t.Fatal(err)
	}
	if isMountPoint(t, p) {
		t.Errorf("%s is still a mount point after Unstage", p)
	}
	if _, err := os.Lstat(filepath.Join(tr.stage.Path(), "j-000001")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the job's staging directory after Unstage: %v, want it gone", err)
	}
	if b, err := os.ReadFile(tr.file); err != nil || string(b) != "weights" {
		t.Errorf("the source after Unstage: %q, %v; want it untouched", b, err)
	}
	if err := tr.stage.Unstage("j-000001"); err != nil {
		t.Errorf("a second Unstage: %v", err)
	}
}

// TestBindHoldsAgainstASwap: once staged, swapping the source's name for
// a symlink to / changes nothing the stage shows.
func TestBindHoldsAgainstASwap(t *testing.T) {
	tr := newTree(t)
	x, xl := filepath.Join(tr.dir, "x"), filepath.Join(tr.dir, "x.l")
	if err := os.Mkdir(x, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(x, "marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", xl); err != nil {
		t.Fatal(err)
	}
	src := tr.open(t, x)
	if err := unix.Renameat2(unix.AT_FDCWD, x, unix.AT_FDCWD, xl, unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	p, err := tr.stage.Bind("j-000002", 0, src.FD(), src.Dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(p, "marker")); err != nil {
		t.Errorf("the marker in the stage: %v", err)
	}
	if _, err := os.Stat(filepath.Join(p, "proc")); err == nil {
		t.Errorf("the stage shows the host's /")
	}
}

// TestBindTwiceAndRestage: a second job and a second mount get paths of
// their own; a start tried again after Unstage binds afresh.
func TestBindTwiceAndRestage(t *testing.T) {
	tr := newTree(t)
	src := tr.open(t, tr.dir)
	var paths []string
	for _, jm := range []struct {
		job string
		n   int
	}{{"j-1", 0}, {"j-1", 1}, {"j-2", 0}} {
		p, err := tr.stage.Bind(jm.job, jm.n, src.FD(), true, true)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(paths, p) {
			t.Errorf("Bind(%s, %d) = %s, a path given before", jm.job, jm.n, p)
		}
		paths = append(paths, p)
	}
	jobs, _ := tr.stage.Jobs()
	sort.Strings(jobs)
	if !slices.Equal(jobs, []string{"j-1", "j-2"}) {
		t.Errorf("Jobs %v, want [j-1 j-2]", jobs)
	}
	if _, err := tr.stage.Bind("j-1", 0, src.FD(), true, true); err == nil {
		t.Errorf("a bind over a staged mount succeeded")
	}
	if err := tr.stage.Unstage("j-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.stage.Bind("j-1", 0, src.FD(), true, true); err != nil {
		t.Errorf("bind after Unstage: %v", err)
	}
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if _, err := tr.stage.Bind(bad, 0, src.FD(), true, true); err == nil {
			t.Errorf("Bind of job %q succeeded", bad)
		}
		if err := tr.stage.Unstage(bad); err == nil {
			t.Errorf("Unstage of job %q succeeded", bad)
		}
	}
}

func TestOpenRefuses(t *testing.T) {
	base := t.TempDir()
	link := filepath.Join(base, "link")
	if err := os.Symlink(base, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"relative", link, file} {
		if _, err := Open(p); err == nil {
			t.Errorf("Open(%s) succeeded", p)
		}
	}
	d, err := Open(filepath.Join(base, "stage"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(d.Path()); fi.Mode().Perm() != 0o700 {
		t.Errorf("stage dir mode %v, want 0700", fi.Mode().Perm())
	}
}

// BenchmarkStageUnstage is staging's part of a job's start: open a
// source beneath its root, bind it read-only, and unstage it at the end.
// Run it with -benchtime=100x for the 100 starts BENCHMARKS.md reports;
// it reports the median too.
func BenchmarkStageUnstage(b *testing.B) {
	base := b.TempDir()
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o755); err != nil { // a user's path, walked as a user
			b.Fatal(err)
		}
	}
	root := filepath.Join(base, "root")
	dir := filepath.Join(root, "alice", "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	d, err := Open(filepath.Join(base, "stage"))
	if err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		src, err := spec.OpenSource(dir, []string{root}, spec.Identity{UID: 1000, GID: 1000}, false)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := d.Bind("j-bench", 0, src.FD(), src.Dir, true); err != nil {
			b.Fatal(err)
		}
		src.Close()
		if err := d.Unstage("j-bench"); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(t0))
	}
	slices.Sort(took)
	if len(took) > 0 {
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
	}
}
