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
// `go test ./...` run in parallel; a file lock per hash makes all but the
// first wait for its build and then take the binary it made. Entries not
// used for a day are removed.
const (
	mainPackage = "./cmd/gpumeter"
	// keepUnused is how long an entry no test binary asked for stays.
	keepUnused = 24 * time.Hour
)

// goEnv are the go tool's settings that change what a build makes.
var goEnv = []string{"GOMOD", "GOVERSION", "GOOS", "GOARCH", "GOAMD64", "GOARM64", "GOEXPERIMENT", "GOFLAGS",
	"CGO_ENABLED", "CGO_CFLAGS", "CGO_CPPFLAGS", "CGO_LDFLAGS", "CC"}

// build returns the binary for the sources as they are now, building it if
// no test binary has, and the module's root.
func build() (bin, moduleRoot string, err error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", "", fmt.Errorf("the go tool is needed to build the binary under test: %w", err)
	}
	out, err := run(goTool, "", append([]string{"env"}, goEnv...)...)
	if err != nil {
		return "", "", err
	}
	settings := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(settings) != len(goEnv) || settings[0] == "" || settings[0] == os.DevNull {
		return "", "", fmt.Errorf("go env %s: %q: not inside the gpumeter module", strings.Join(goEnv, " "), out)
	}
	moduleRoot = filepath.Dir(settings[0])
	flags := []string{"-buildvcs=false"} // the revision is no input the hash knows
	if raceEnabled {
		// The agent's goroutines are the ones worth racing.
		flags = append(flags, "-race")
	}
	key, err := sourceKey(goTool, moduleRoot, flags, settings)
	if err != nil {
		return "", "", err
	}

	cache := filepath.Join(os.TempDir(), fmt.Sprintf("gpumeter-e2e-%d", os.Geteuid()))
	if err := ownDir(cache); err != nil {
		return "", "", err
	}
	unlock, err := lockFile(filepath.Join(cache, key+".lock"))
	if err != nil {
		return "", "", err
	}
	defer unlock()
	dir := filepath.Join(cache, key)
	bin = filepath.Join(dir, "gpumeter")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		now := time.Now()
		_ = os.Chtimes(dir, now, now) // in use: not to be pruned
		return bin, moduleRoot, nil
	}
	tmp, err := os.MkdirTemp(cache, key+".build-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(tmp) // gone by the rename, unless the build failed
	args := append(append([]string{"build"}, flags...), "-o", filepath.Join(tmp, "gpumeter"), mainPackage)
	if _, err := run(goTool, moduleRoot, args...); err != nil {
		return "", "", err
	}
	// Others may run the binary too: tests run it as nobody.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		// A test binary that took a lock file pruned meanwhile may have
		// built the same binary at the same time: take its.
		if fi, serr := os.Stat(bin); serr != nil || !fi.Mode().IsRegular() {
			return "", "", err
		}
	}
	prune(cache, key)
	return bin, moduleRoot, nil
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

// lockFile takes an exclusive lock on path, waiting for whoever holds it.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil // closing lets go
}

// prune removes the entries of cache other than keep that no test binary
// has asked for in keepUnused, with their lock files; one whose lock is
// held is in use and stays.
func prune(cache, keep string) {
	entries, err := os.ReadDir(cache)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || name == keep {
			continue
		}
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < keepUnused {
			continue
		}
		if strings.Contains(name, ".build-") {
			os.RemoveAll(filepath.Join(cache, name)) // a build that never finished
			continue
		}
		lock := filepath.Join(cache, name+".lock")
		f, err := os.OpenFile(lock, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.RemoveAll(filepath.Join(cache, name))
			os.Remove(lock)
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
