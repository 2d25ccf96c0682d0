package harness

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The binary is built once for the module's sources as they are: into a
// cache directory named by a hash of every file the build reads from the
// module (the Go, cgo and embedded files of cmd/gpumeter's packages, go.mod
// and go.sum) and of the go tool's settings. The test binaries of one
// `go test ./...` run in parallel; an exclusive lock on the entry's lock
// file makes all but the first wait for its build and then take the binary
// it made. Each then holds a shared lock on it while it lives, so that no
// other prunes a binary in use. Beyond the keepRecent entries used last,
// those not in use are removed.
const (
	mainPackage = "./cmd/gpumeter"
	// keepRecent is how many entries stay for runs to come (a source
	// changed and changed back, another checkout), in use or not.
	keepRecent = 4
	// keepBuild is how long a build directory can be in progress; one
	// older was left by a build that never finished.
	keepBuild = time.Hour
)

// goEnv are the go tool's settings that change what a build makes.
var goEnv = []string{"GOMOD", "GOVERSION", "GOOS", "GOARCH", "GOAMD64", "GOARM64", "GOEXPERIMENT", "GOFLAGS",
	"CGO_ENABLED", "CGO_CFLAGS", "CGO_CPPFLAGS", "CGO_LDFLAGS", "CC"}

// findModule returns the go tool and the module's root directory.
func findModule() (goTool, moduleRoot string, err error) {
	goTool, err = exec.LookPath("go")
	if err != nil {
		return "", "", fmt.Errorf("the go tool is needed to build the binary under test: %w", err)
	}
	out, err := run(goTool, "", "env", "GOMOD")
	if err != nil {
		return "", "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", "", errors.New("go env GOMOD names no go.mod: the tests must run inside the gpumeter module")
	}
	return goTool, filepath.Dir(mod), nil
}

// build returns the binary for the sources as they are now, building it if
// no test binary has, and its entry's lock file, which holds the shared
// lock until it is closed (or collected). It reads every source file of
// the binary: called from a test, that tells go test's result cache to run
// the tests again when one changes, since the test binary does not link
// them all.
func build(goTool, moduleRoot string) (bin string, lock *os.File, err error) {
	out, err := run(goTool, moduleRoot, append([]string{"env"}, goEnv...)...)
	if err != nil {
		return "", nil, err
	}
	for _, k := range goEnv {
		os.Getenv(k) // for go test's result cache, as the files are
	}
	settings := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(settings) != len(goEnv) {
		return "", nil, fmt.Errorf("go env %s: %q: want %d lines", strings.Join(goEnv, " "), out, len(goEnv))
	}
	flags := []string{"-buildvcs=false"} // the revision is no input the hash knows
	if Race {
		// The agent's goroutines are the ones worth racing.
		flags = append(flags, "-race")
	}
	key, err := sourceKey(goTool, moduleRoot, flags, settings)
	if err != nil {
		return "", nil, err
	}

	cache := filepath.Join(os.TempDir(), fmt.Sprintf("gpumeter-e2e-%d", os.Geteuid()))
	if err := ownDir(cache); err != nil {
		return "", nil, err
	}
	lock, err = os.OpenFile(filepath.Join(cache, key+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", nil, err
	}
	// Shared first: every test binary holds its entry shared while it
	// runs, and an exclusive lock would wait for all of them to end, so
	// that the packages ran one after another. Only a missing binary needs
	// the exclusive lock, and then nobody holds the entry.
	if err := flock(lock, syscall.LOCK_SH); err != nil {
		lock.Close()
		return "", nil, err
	}
	if bin, ok := built(cache, key); ok {
		prune(cache)
		return bin, lock, nil
	}
	if err := flock(lock, syscall.LOCK_EX); err != nil {
		lock.Close()
		return "", nil, err
	}
	bin, err = buildOnce(goTool, moduleRoot, cache, key, flags)
	if err == nil {
		err = flock(lock, syscall.LOCK_SH)
	}
	if err != nil {
		lock.Close()
		return "", nil, err
	}
	prune(cache)
	return bin, lock, nil
}

// built returns the binary of entry key of cache if it is there, marking
// the entry used last, so that it is the last to be pruned.
func built(cache, key string) (string, bool) {
	dir := filepath.Join(cache, key)
	bin := filepath.Join(dir, "gpumeter")
	fi, err := os.Stat(bin)
	if err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	now := time.Now()
	_ = os.Chtimes(dir, now, now)
	return bin, true
}

// buildOnce returns the binary of entry key of cache, building it there
// when it has none.
func buildOnce(goTool, moduleRoot, cache, key string, flags []string) (string, error) {
	if bin, ok := built(cache, key); ok {
		return bin, nil // another test binary built it while this one waited
	}
	dir := filepath.Join(cache, key)
	bin := filepath.Join(dir, "gpumeter")
	tmp, err := os.MkdirTemp(cache, key+".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // gone by the rename, unless the build failed
	args := append(append([]string{"build"}, flags...), "-o", filepath.Join(tmp, "gpumeter"), mainPackage)
	if _, err := run(goTool, moduleRoot, args...); err != nil {
		return "", err
	}
	// Others may run the binary too: tests run it as nobody.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Only the holder of the entry's lock builds it, but should two
		// have, the first's binary is as good.
		if fi, serr := os.Stat(bin); serr != nil || !fi.Mode().IsRegular() {
			return "", err
		}
	}
	return bin, nil
}

// sourceKey hashes the go tool's settings, the build flags and every file
// of the module that the build of the main package reads.
func sourceKey(goTool, moduleRoot string, flags, settings []string) (string, error) {
	const fields = "Dir,Module,GoFiles,CgoFiles,CFiles,CXXFiles,HFiles,SFiles,SysoFiles,EmbedFiles"
	args := append(append([]string{"list", "-deps", "-json=" + fields}, flags...), mainPackage)
	out, err := run(goTool, moduleRoot, args...)
	if err != nil {
		return "", err
	}
	files := []string{filepath.Join(moduleRoot, "go.mod"), filepath.Join(moduleRoot, "go.sum")}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			Dir    string
			Module *struct{ Main bool }
			GoFiles, CgoFiles, CFiles, CXXFiles, HFiles, SFiles, SysoFiles,
			EmbedFiles []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", fmt.Errorf("go list: %w", err)
		}
		if p.Module == nil || !p.Module.Main {
			continue // fixed by go.sum
		}
		// Reading the directory tells go test's result cache to look at
		// it: a file added to a package of the binary then reruns the
		// tests, as a file changed does.
		if _, err := os.ReadDir(p.Dir); err != nil {
			return "", err
		}
		for _, list := range [][]string{p.GoFiles, p.CgoFiles, p.CFiles, p.CXXFiles, p.HFiles, p.SFiles, p.SysoFiles, p.EmbedFiles} {
			for _, f := range list {
				files = append(files, filepath.Join(p.Dir, f))
			}
		}
	}
	slices.Sort(files)
	h := sha256.New()
	fmt.Fprintf(h, "%q\n%q\n", settings, flags)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(moduleRoot, f)
		sum := sha256.Sum256(b)
		fmt.Fprintf(h, "%s %x\n", filepath.ToSlash(rel), sum)
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

// ownDir makes dir, or checks the one there: a directory of this user's
// that nobody else may write, so that no one can put a binary of theirs
// where the tests would run it.
func ownDir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is not a directory of uid %d that only it may write (mode %s): remove it", dir, os.Geteuid(), fi.Mode())
	}
	return nil
}

// flock takes the lock how (syscall.LOCK_EX or LOCK_SH) on f, waiting for
// whoever holds it; a lock f holds already is converted.
func flock(f *os.File, how int) error {
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return nil
}

// prune removes the entries of cache that no test binary holds, but for
// the keepRecent used last, and builds that never finished.
func prune(cache string) {
	entries, err := os.ReadDir(cache)
	if err != nil {
		return
	}
	type entry struct {
		name string
		used time.Time
	}
	var done []entry
	for _, e := range entries {
		fi, err := e.Info()
		if !e.IsDir() || err != nil {
			continue
		}
		if strings.Contains(e.Name(), ".build-") {
			if time.Since(fi.ModTime()) > keepBuild {
				os.RemoveAll(filepath.Join(cache, e.Name()))
			}
			continue
		}
		done = append(done, entry{e.Name(), fi.ModTime()})
	}
	slices.SortFunc(done, func(a, b entry) int { return b.used.Compare(a.used) })
	for _, e := range done[min(keepRecent, len(done)):] {
		// The lock file stays, and so it exists for every entry made: a
		// test binary that waits on it must find the same file once it
		// has the lock.
		f, err := os.OpenFile(filepath.Join(cache, e.name+".lock"), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.RemoveAll(filepath.Join(cache, e.name))
		}
		f.Close()
	}
}

// run runs the go tool in dir and returns its output; an error carries
// what it printed.
func run(goTool, dir string, args ...string) ([]byte, error) {
	cmd := exec.Command(goTool, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}
